"""Bearer-token authentication for the API (`Authorization: Bearer phk_...`); the lookup of
project and node tokens is cached per process (accounts/token_cache.py), personal tokens are
read afresh each request.

A token that no longer works is refused with a 401 that names it and says why and when
(accounts/token_life.py: revoked, replaced by rotation past its overlap, expired; or a personal
token whose owner is inactive), so whoever holds it knows what to do (docs/identity.md, "Tokens")."""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.accounts.services import TOKEN_PREFIX, token_digest
from phantomhub.accounts.signin import client_address
from phantomhub.accounts.token_cache import token_lookup
from phantomhub.accounts.token_life import token_refusal


def _address(request: HttpRequest) -> str | None:
    """The client's address as an IP (a Unix socket's peer has none: None)."""
    address = client_address(request)
    try:
        return str(ipaddress.ip_address(address)) if address else None
    except ValueError:
        return None


def token_touch(token: ApiToken, request: HttpRequest) -> None:
    """Record the token's last use and the client's address, at most once per TOKEN_TOUCH_INTERVAL_S.

    Ingest is many requests a second; the cached token remembers the last write, so a cache hit
    costs no query either. The address is the client's behind a trusted proxy
    (signin.client_address)."""
    now = timezone.now()
    interval = timedelta(seconds=settings.TOKEN_TOUCH_INTERVAL_S)
    if token.last_used_at is None or now - token.last_used_at >= interval:
        address = _address(request)
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_address=address)
        token.last_used_at, token.last_used_address = now, address


SCIM_TOKEN_ONLY = "a SCIM token reaches /scim/v2/ only"


class ProjectPrincipal:
    """The "user" of a request made with a project token: it can act only on its project."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    pk = None

    def __init__(self, token: ApiToken) -> None:
        self.token = token
        self.project = token.project

    def __str__(self) -> str:
        return f"token {self.token.prefix}…"


class ProjectTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0] != self.keyword or not parts[1].startswith(TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed("Authorization must be 'Bearer phk_...'")
        token = token_lookup(token_digest(parts[1]))
        if token is None:
            raise exceptions.AuthenticationFailed("unknown token")
        refusal = token_refusal(token, timezone.now())
        if refusal is not None:
            raise exceptions.AuthenticationFailed(refusal)
        if token.kind == TokenKind.SCIM:  # the identity provider's: /scim/v2/ only, even public endpoints refuse it
            raise exceptions.PermissionDenied(SCIM_TOKEN_ONLY)
        if token.kind == TokenKind.PERSONAL:
            assert token.user is not None
            if not token.user.is_active:
                raise exceptions.AuthenticationFailed(f"token {token.prefix}… belongs to an inactive person")
            token_touch(token, request._request)
            return token.user, token
        token_touch(token, request._request)
        return ProjectPrincipal(token), token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class ProjectTokenScheme(OpenApiAuthenticationExtension):
    target_class = "phantomhub.accounts.auth.ProjectTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A PhantomHub token: phk_..."}

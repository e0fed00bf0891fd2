"""Bearer-token authentication for the API (`Authorization: Bearer phk_...`); the token
lookup is cached per process (accounts/token_cache.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.accounts.services import TOKEN_PREFIX, token_digest
from phantomhub.accounts.token_cache import token_lookup

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
        if token is None or token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("unknown or revoked token")
        if token.kind == TokenKind.SCIM:  # the identity provider's: /scim/v2/ only, even public endpoints refuse it
            raise exceptions.PermissionDenied(SCIM_TOKEN_ONLY)
        self._touch(token)
        if token.kind == TokenKind.PERSONAL:
            assert token.user is not None
            if not token.user.is_active:
                raise exceptions.AuthenticationFailed("the token's owner is inactive")
            return token.user, token
        return ProjectPrincipal(token), token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword

    @staticmethod
    def _touch(token: ApiToken) -> None:
        # Ingest is many requests a second; write last_used_at at most once per interval (the
        # cached token remembers the last write, so a cache hit costs no query either).
        now = timezone.now()
        interval = timedelta(seconds=settings.TOKEN_TOUCH_INTERVAL_S)
        if token.last_used_at is None or now - token.last_used_at >= interval:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now


class ProjectTokenScheme(OpenApiAuthenticationExtension):
    target_class = "phantomhub.accounts.auth.ProjectTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A PhantomHub token: phk_..."}

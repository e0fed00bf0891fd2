"""Bearer-token authentication for the API (`Authorization: Bearer phk_...`).

A web process keeps what it looked up for a token for at most TOKEN_CACHE_S seconds (default 5,
`PHANTOMHUB_TOKEN_CACHE_S`; 0 turns the cache off): an agent's batches then cost no token query
and no join with project, team and owner. The price is the bound: a token revoked, or an owner
deactivated, by another process is refused by every web process within TOKEN_CACHE_S seconds;
the process that revokes (``token_revoke``) forgets the token at once.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.accounts.services import TOKEN_PREFIX, token_digest
from phantomhub.env import env_int

TOKEN_CACHE_S_DEFAULT = env_int("PHANTOMHUB_TOKEN_CACHE_S", 5, minimum=0, maximum=60)
# Entries beyond this are dropped oldest first (a process sees a few hundred tokens at most).
TOKEN_CACHE_MAX = 10_000

# digest -> (monotonic expiry, the token with project, team and owner loaded)
_cache: dict[str, tuple[float, ApiToken]] = {}
_cache_lock = threading.Lock()


def _cache_s() -> float:
    return float(getattr(settings, "TOKEN_CACHE_S", TOKEN_CACHE_S_DEFAULT))


def token_cache_forget(digest: str | None = None) -> None:
    """Forget one token (its digest), or every token, in this process."""
    with _cache_lock:
        if digest is None:
            _cache.clear()
        else:
            _cache.pop(digest, None)


def _token_lookup(digest: str) -> ApiToken | None:
    ttl = _cache_s()
    now = time.monotonic()
    if ttl > 0:
        hit = _cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
    token = ApiToken.objects.select_related("project", "project__team", "user").filter(digest=digest).first()
    if token is not None and ttl > 0:
        with _cache_lock:
            if len(_cache) >= TOKEN_CACHE_MAX:
                del _cache[next(iter(_cache))]
            _cache[digest] = (now + ttl, token)
    return token


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
        token = _token_lookup(token_digest(parts[1]))
        if token is None or token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("unknown or revoked token")
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

"""What a web process knows of the tokens it has looked up.

A web process keeps what it looked up for a project or node token for at most TOKEN_CACHE_S
seconds (default 5, `PHANTOMHUB_TOKEN_CACHE_S`; 0 turns the cache off): an agent's batches, and
a node collector's, then cost no token query and no join with project and team. The price is
the bound: a project or node token revoked, or rotated with no overlap, by another process is
refused by every web process within TOKEN_CACHE_S seconds; the process that revokes or rotates
(accounts/services.py) forgets the token at once. Expiry and the end of a rotation's overlap are
fields of the cached token, checked on every request (accounts/auth.py), so they are exact.

Personal tokens are never cached: each request reads the token and its owner afresh (one query
by the unique digest, joined with the user), so a personal token revoked, or whose owner is
deactivated (by an admin, or by the identity provider over SCIM), is refused by every process
from the next request on. They carry people's reads from integrations, not the ingest's
hot path, so the query costs little.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings

from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.env import env_int

TOKEN_CACHE_S_DEFAULT = env_int("PHANTOMHUB_TOKEN_CACHE_S", 5, minimum=0, maximum=60)
# Entries beyond this are dropped oldest first (a process sees a few hundred tokens at most).
TOKEN_CACHE_MAX = 10_000

# digest -> (monotonic expiry, the project or node token with project and team loaded)
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


def token_lookup(digest: str) -> ApiToken | None:
    """The token of this digest (project, team and owner loaded), or None if there is none."""
    ttl = _cache_s()
    now = time.monotonic()
    if ttl > 0:
        hit = _cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
    token = ApiToken.objects.select_related("project", "project__team", "user").filter(digest=digest).first()
    if token is not None and ttl > 0 and token.kind != TokenKind.PERSONAL:
        with _cache_lock:
            if len(_cache) >= TOKEN_CACHE_MAX:
                del _cache[next(iter(_cache))]
            _cache[digest] = (now + ttl, token)
    return token

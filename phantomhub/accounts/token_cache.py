"""What a web process knows of the tokens it has looked up.

A web process keeps what it looked up for a token for at most TOKEN_CACHE_S seconds (default 5,
`PHANTOMHUB_TOKEN_CACHE_S`; 0 turns the cache off): an agent's batches then cost no token query
and no join with project, team and owner. The price is the bound: a token revoked, or an owner
deactivated, by another process is refused by every web process within TOKEN_CACHE_S seconds;
the process that revokes (accounts/services.py ``token_revoke``) forgets the token at once.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings

from phantomhub.accounts.models import ApiToken
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


def token_lookup(digest: str) -> ApiToken | None:
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

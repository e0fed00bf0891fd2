"""Ingest rate limit per token: a DRF throttle counted in the cache (Redis when configured).

It is the default throttle of every DRF view (settings.REST_FRAMEWORK) but counts only POSTs to
the ingest endpoints, so reads, the portal and sign-in (django-axes) are left alone. Each token
gets settings.INGEST_RATE requests per clock-aligned window (e.g. 6000 per minute); past that the
answer is 429 with Retry-After, the seconds until the window ends, which the agent waits out
(its telemetry stays in its queue or spool meanwhile, so nothing is lost).

One atomic increment a request (INCR on Redis), not DRF's list of timestamps per client, which
at thousands of requests a minute would move tens of KB through Redis for every batch. A fixed
window can let through up to twice the rate across a window boundary; for a limit meant to stop
a runaway client, not to meter it, that is fine.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

log = logging.getLogger(__name__)

# URL names (phantomhub/telemetry/urls.py) of the endpoints the agent writes telemetry to.
INGEST_URL_NAMES = frozenset({"run-create", "run-steps", "run-samples", "run-events", "run-batch", "run-batches"})

_CACHE_ERROR_LOG_INTERVAL_S = 60.0
_last_cache_error_log = 0.0


def _now() -> float:
    return time.time()  # wall clock: windows are aligned to it, the same in every process


def _url_name(request: Request) -> str | None:
    match = getattr(request._request, "resolver_match", None)
    return match.url_name if match is not None else None


def _client_key(request: Request) -> str | None:
    """Who is counted: the token (project or personal), else the signed-in user."""
    token_id = getattr(request.auth, "pk", None)
    if token_id is not None:
        return f"token:{token_id}"
    user_id = getattr(request.user, "pk", None)
    if user_id is not None:
        return f"user:{user_id}"
    return None  # unauthenticated: refused by the permissions before any write


def _count(key: str, window_s: int) -> int:
    """Increment the window's counter and return it; the counter expires a little after its window."""
    cache.add(key, 0, timeout=window_s + 5)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr (a window boundary): start it again
        cache.add(key, 1, timeout=window_s + 5)
        return 1


def _log_cache_error(exc: Exception) -> None:
    global _last_cache_error_log
    now = time.monotonic()
    if now - _last_cache_error_log >= _CACHE_ERROR_LOG_INTERVAL_S:
        _last_cache_error_log = now
        log.warning("ingest rate limit not applied, the cache is unreachable: %s", exc)


class IngestRateThrottle(BaseThrottle):
    """At most settings.INGEST_RATE ingest requests per token per window (see the module docstring)."""

    def __init__(self) -> None:
        self._wait_s: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        rate: tuple[int, int] | None = settings.INGEST_RATE
        if rate is None or request.method != "POST" or _url_name(request) not in INGEST_URL_NAMES:
            return True
        client = _client_key(request)
        if client is None:
            return True
        limit, window_s = rate
        now = _now()
        window = int(now // window_s)
        try:
            count = _count(f"throttle:ingest:{client}:{window_s}:{window}", window_s)
        except Exception as exc:  # a Redis outage must not turn ingest into 500s: let it through
            _log_cache_error(exc)
            return True
        if count <= limit:
            return True
        self._wait_s = (window + 1) * window_s - now
        return False

    def wait(self) -> float | None:
        if self._wait_s is None:
            return None
        return max(1, math.ceil(self._wait_s))  # Retry-After is whole seconds; 0 would mean "now"

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

Requests are not all alike (one node batch may carry 250,000 rows), so each token also has a
budget of rows per window, settings.INGEST_ROWS_RATE: the view counts a request's steps, samples
and events (`ingest_rows_charge`, INCRBY) once its body is parsed, before anything is checked or
written, and answers 429 with Retry-After when they take the token past its budget. Refused rows
count too, so a token past its budget is refused before its next bodies are even read
(`IngestRateThrottle` looks at the rows counter first) until the window ends.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.exceptions import Throttled
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


def _count(key: str, window_s: int, by: int = 1) -> int:
    """Add `by` to the window's counter and return it; the counter expires a little after its window."""
    cache.add(key, 0, timeout=window_s + 5)
    try:
        return cache.incr(key, by)
    except ValueError:  # expired between add and incr (a window boundary): start it again
        cache.add(key, by, timeout=window_s + 5)
        return by


def _window(window_s: int) -> tuple[int, float]:
    """The current window's number and the seconds left in it."""
    now = _now()
    window = int(now // window_s)
    return window, (window + 1) * window_s - now


def _retry_after_s(left_s: float) -> int:
    return max(1, math.ceil(left_s))  # Retry-After is whole seconds; 0 would mean "now"


def _rows_key(client: str, window_s: int, window: int) -> str:
    return f"throttle:rows:{client}:{window_s}:{window}"


def _log_cache_error(exc: Exception) -> None:
    global _last_cache_error_log
    now = time.monotonic()
    if now - _last_cache_error_log >= _CACHE_ERROR_LOG_INTERVAL_S:
        _last_cache_error_log = now
        log.warning("ingest rate limit not applied, the cache is unreachable: %s", exc)


class IngestRateThrottle(BaseThrottle):
    """At most settings.INGEST_RATE ingest requests per token per window, and none once the token's
    rows of the window are past settings.INGEST_ROWS_RATE (see the module docstring)."""

    def __init__(self) -> None:
        self._wait_s: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        rate: tuple[int, int] | None = settings.INGEST_RATE
        rows_rate: tuple[int, int] | None = settings.INGEST_ROWS_RATE
        if (rate is None and rows_rate is None) or request.method != "POST" or _url_name(request) not in INGEST_URL_NAMES:
            return True
        client = _client_key(request)
        if client is None:
            return True
        try:
            if rows_rate is not None:
                limit, window_s = rows_rate
                window, left_s = _window(window_s)
                if int(cache.get(_rows_key(client, window_s, window)) or 0) > limit:
                    self._wait_s = left_s
                    return False
            if rate is None:
                return True
            limit, window_s = rate
            window, left_s = _window(window_s)
            count = _count(f"throttle:ingest:{client}:{window_s}:{window}", window_s)
        except Exception as exc:  # a Redis outage must not turn ingest into 500s: let it through
            _log_cache_error(exc)
            return True
        if count <= limit:
            return True
        self._wait_s = left_s
        return False

    def wait(self) -> float | None:
        if self._wait_s is None:
            return None
        return _retry_after_s(self._wait_s)


def ingest_rows_charge(request: Request, rows: int) -> None:
    """Count an ingest request's rows (steps, samples, events) against its token's budget of
    settings.INGEST_ROWS_RATE; past it, 429 with Retry-After (the seconds to the window's end)."""
    rate: tuple[int, int] | None = settings.INGEST_ROWS_RATE
    client = _client_key(request)
    if rate is None or rows <= 0 or client is None:
        return
    limit, window_s = rate
    window, left_s = _window(window_s)
    try:
        total = _count(_rows_key(client, window_s, window), window_s, rows)
    except Exception as exc:  # as for requests: a Redis outage lets ingest through
        _log_cache_error(exc)
        return
    if total > limit:
        wait_s = _retry_after_s(left_s)
        raise Throttled(
            wait=wait_s,
            detail=f"rows: this request's {rows:,} rows take this token past its {limit:,} rows per "
            f"{window_s} s; try again in {wait_s} s",
        )

"""When a run is analysed: soon after new telemetry (a Redis debounce key and a delayed Celery
task), again after a price or policy change (its analysis marked stale), and by the sweep when a
message was lost.

The task is sent by name (ANALYZE_RUN, defined in waste/tasks.py), so this module does not import
the tasks that import it back (docs/architecture.md, layers).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from functools import cache
from typing import Any

import redis
from celery import current_app
from django.conf import settings
from django.db.models.signals import post_save
from django.dispatch import receiver

from phantomhub.waste.models import OrgSettings, RunAnalysis

log = logging.getLogger(__name__)
ANALYZE_RUN = "phantomhub.waste.tasks.analyze_run"


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)


def analyze_run_send(run_id: uuid.UUID, *, countdown: int | None = None) -> None:
    """Enqueue the analysis of one run (waste/tasks.py's ``analyze_run``)."""
    current_app.send_task(ANALYZE_RUN, args=[str(run_id)], countdown=countdown)


def analyses_invalidate(*, gpu_key: str | None = None, run_ids: Iterable[uuid.UUID] | None = None) -> int:
    """Mark analyses for re-computation (after a price or policy change, or of a job's attempts
    when a neighbouring attempt changed: ``run_ids``); failed ones get a fresh set of retries."""
    rows = RunAnalysis.objects.all() if gpu_key is None else RunAnalysis.objects.filter(gpu_key=gpu_key)
    if run_ids is not None:
        ids = list(run_ids)
        if not ids:
            return 0
        rows = rows.filter(run_id__in=ids)
    return rows.update(analysed_seq=-1, failures=0, retry_at=None)


# While the broker is down every ingest request fails to enqueue: warn once a minute, not once
# a request (a 30 s Redis outage logged ~930 tracebacks in bench/soak.py).
ENQUEUE_WARNING_INTERVAL_S = 60.0
_enqueue_warned_at = -ENQUEUE_WARNING_INTERVAL_S


# analysis_request runs on the commit of every ingest batch. A web process keeps (a) the
# organization's debounce interval for ANALYSIS_SETTINGS_CACHE_S seconds, and (b) for each run,
# until when it knows the run's debounce key in Redis is held: it set the key itself (held for the
# whole interval), or Redis said it was held and for how long (PTTL, in the same round trip). A
# batch of a run whose key is known held costs no query and no Redis call, and schedules nothing,
# exactly as the refused SET NX did. Staleness: a debounce interval changed in another process
# applies here within ANALYSIS_SETTINGS_CACHE_S seconds (at once in the process that saves it);
# a key deleted by hand before it expires is not noticed by this process until then (the beat
# sweep still enqueues the run's analysis).
ANALYSIS_SETTINGS_CACHE_S = 5.0
_HELD_MAX = 10_000
_debounce_cache: list[float] = [-1.0, 0.0]  # [monotonic expiry, debounce_s]
_debounce_held: dict[uuid.UUID, float] = {}  # run id -> monotonic time until which its key is held


def _debounce_s(now: float) -> int:
    if _debounce_cache[0] > now:
        return int(_debounce_cache[1])
    debounce = OrgSettings.get().analysis_debounce_s
    _debounce_cache[:] = [now + ANALYSIS_SETTINGS_CACHE_S, float(debounce)]
    return debounce


def analysis_request_cache_forget() -> None:
    """Forget this process's debounce interval and held keys (after the settings change)."""
    _debounce_cache[0] = -1.0
    _debounce_held.clear()


@receiver(post_save, sender=OrgSettings)
def _org_settings_saved(**_: Any) -> None:
    analysis_request_cache_forget()


def analysis_request(run_id: uuid.UUID) -> None:
    """After new telemetry committed: analyse soon, at most once per debounce interval per run.

    With a broker, a Redis key debounces and a delayed Celery task does the work. On the
    embedded default (no broker) the in-process sweeper picks the run up (phantomhub/periodic.py).
    """
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return
    now = time.monotonic()
    if _debounce_held.get(run_id, 0.0) > now:
        return  # the key is held: Redis would refuse the SET NX
    debounce = _debounce_s(now)
    key = f"phantomhub:analyze:{run_id}"
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.set(key, "1", nx=True, ex=max(debounce, 1))
        pipe.pttl(key)
        first, left_ms = pipe.execute()
        if len(_debounce_held) >= _HELD_MAX:
            _debounce_held.clear()
        if first:
            _debounce_held[run_id] = now + max(debounce, 1)
            analyze_run_send(run_id, countdown=debounce)
        elif left_ms > 0:
            _debounce_held[run_id] = now + left_ms / 1000
    except Exception:  # the beat sweep catches up; ingest must not fail because the broker is down
        global _enqueue_warned_at
        if now - _enqueue_warned_at >= ENQUEUE_WARNING_INTERVAL_S:  # once a minute, not every request
            _enqueue_warned_at = now
            log.warning("could not enqueue analysis of run %s; the periodic sweep will pick it up", run_id, exc_info=True)


def analysis_enqueue_once(run_id: uuid.UUID, debounce_s: int) -> int:
    """The sweep's catch-up for a dirty run, through the same debounce key as ingest: a run whose
    analysis is already scheduled (key held) is left to it, so the sweep adds no duplicate
    analyses (a fleet simulation measured 11-23 extra per 30 s sweep without this). The key
    expires after the debounce interval, so a lost message is still retried by a later sweep."""
    try:
        held = not redis_client().set(f"phantomhub:analyze:{run_id}", "1", nx=True, ex=max(debounce_s, 1))
    except Exception:  # Redis down: enqueue anyway (it fails too, or reaches a broker that is back)
        held = False
    if held:
        return 0
    analyze_run_send(run_id)
    return 1

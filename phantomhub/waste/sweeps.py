"""The periodic sweep: silent runs marked crashed, dirty runs analysed (or enqueued), pending
rollups rebuilt. Beat runs it every ~30 s through waste/tasks.py; the embedded default's sweeper
runs it in the web process (phantomhub/periodic.py lists both).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import F, Q
from django.utils import timezone

from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste.models import OrgSettings
from phantomhub.waste.rollups import rollups_rebuild
from phantomhub.waste.scheduling import analysis_enqueue_once
from phantomhub.waste.services import MAX_ANALYSIS_FAILURES, run_analyze_isolated


def runs_mark_crashed(*, now: datetime | None = None, org: OrgSettings | None = None) -> int:
    """Running runs the server has not heard from for longer than the crash threshold become
    crashed; analysis then bills them up to their last sign of life and sets finished_at there.
    ``org``: the organization's settings, when the caller has read them."""
    now = now or timezone.now()
    return _runs_mark_crashed(now - timedelta(seconds=(org or OrgSettings.get()).crash_after_s))


def _runs_mark_crashed(cutoff: datetime) -> int:
    if connection.vendor == "postgresql":  # the statement as text: the ORM's compiling was most of a sweep
        with connection.cursor() as cursor:
            cursor.execute(_MARK_CRASHED_SQL, [RunStatus.CRASHED.value, cutoff, RunStatus.RUNNING.value])
            return int(cursor.rowcount)
    return Run.objects.filter(status=RunStatus.RUNNING, last_seen_at__lt=cutoff).update(
        status=RunStatus.CRASHED, ingest_seq=F("ingest_seq") + 1
    )


_MARK_CRASHED_SQL = "UPDATE telemetry_run SET status = %s, ingest_seq = ingest_seq + 1 WHERE last_seen_at < %s AND status = %s"
# runs_dirty_orm's query as one SELECT (a run is in at most one of its two halves: no UNION needed).
_DIRTY_SQL = """
SELECT r.id FROM telemetry_run r LEFT OUTER JOIN waste_runanalysis a ON a.run_id = r.id
WHERE a.run_id IS NULL
   OR (a.analysed_seq < r.ingest_seq
       AND NOT (a.failed_seq = r.ingest_seq AND (a.failures >= %s OR (a.retry_at > %s AND a.retry_at IS NOT NULL))))
ORDER BY r.allocation_start LIMIT %s
"""


def runs_dirty(limit: int = 500) -> list[uuid.UUID]:
    """Runs whose stored analysis is missing or older than their telemetry, oldest allocation
    first: earlier runs finish first, so later ones find them as peers (evidence.py). On
    PostgreSQL one SELECT as text (what ``runs_dirty_orm`` builds, without building it each
    sweep: the ORM's compiling was most of a sweep with nothing to do)."""
    if connection.vendor != "postgresql":
        return runs_dirty_orm(limit)
    with connection.cursor() as cursor:
        cursor.execute(_DIRTY_SQL, [MAX_ANALYSIS_FAILURES, timezone.now(), limit])
        return [row[0] for row in cursor.fetchall()]


def runs_dirty_orm(limit: int = 500) -> list[uuid.UUID]:
    """``runs_dirty`` through the ORM (SQLite; and the oracle the SQL is tested against)."""
    never = Run.objects.filter(analysis__isnull=True).values_list("id", "allocation_start")
    # A run whose analysis failed at its current telemetry waits for its retry time, and after
    # MAX_ANALYSIS_FAILURES for new telemetry.
    held = Q(analysis__failed_seq=F("ingest_seq")) & (
        Q(analysis__failures__gte=MAX_ANALYSIS_FAILURES) | Q(analysis__retry_at__gt=timezone.now())
    )
    stale = Run.objects.filter(analysis__analysed_seq__lt=F("ingest_seq")).exclude(held).values_list("id", "allocation_start")
    return [run_id for run_id, _ in never.union(stale).order_by("allocation_start")[:limit]]


@dataclass(frozen=True)
class SweepResult:
    crashed: int
    analysed: int
    enqueued: int
    rollup_days: int


def _sweep_settings() -> tuple[int, int]:
    """The organization's crash threshold and analysis debounce, s (the row is made if missing)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT crash_after_s, analysis_debounce_s FROM waste_orgsettings WHERE id = 1")
            found = cursor.fetchone()
        if found is not None:
            return int(found[0]), int(found[1])
    org = OrgSettings.get()
    return org.crash_after_s, org.analysis_debounce_s


def analysis_sweep(*, inline: bool) -> SweepResult:
    """Mark silent runs crashed, analyse (or enqueue) every dirty run, rebuild pending rollups."""
    crash_after_s, debounce_s = _sweep_settings()  # once per sweep
    crashed = _runs_mark_crashed(timezone.now() - timedelta(seconds=crash_after_s))
    dirty = runs_dirty()
    analysed = enqueued = 0
    if inline:
        for run_id in dirty:
            if run_analyze_isolated(run_id=run_id) is not None:
                analysed += 1
    else:
        for run_id in dirty:
            enqueued += analysis_enqueue_once(run_id, debounce_s)
    days = rollups_rebuild()
    return SweepResult(crashed, analysed, enqueued, len(days))

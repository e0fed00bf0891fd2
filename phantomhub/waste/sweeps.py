"""The periodic sweep: silent runs marked crashed, dirty runs analysed (or enqueued), pending
rollups rebuilt. Beat runs it every ~30 s through waste/tasks.py; the embedded default's sweeper
runs it in the web process (phantomhub/periodic.py lists both).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from phantomhub.telemetry.models import RunStatus
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
    # The statement as text: the ORM's compiling was most of a sweep with nothing to do. Plain
    # SQL both backends run; the cutoff as the backend stores datetimes (SQLite: UTC text).
    with connection.cursor() as cursor:
        cursor.execute(
            _MARK_CRASHED_SQL,
            [RunStatus.CRASHED.value, connection.ops.adapt_datetimefield_value(cutoff), RunStatus.RUNNING.value],
        )
        return int(cursor.rowcount)


_MARK_CRASHED_SQL = "UPDATE telemetry_run SET status = %s, ingest_seq = ingest_seq + 1 WHERE last_seen_at < %s AND status = %s"
# A run is in at most one of the two halves (never analysed; analysed at older telemetry and not
# held back by its failures): one SELECT, no UNION. tests/waste/test_analysis_isolation.py
# pins it to the same question asked through the ORM.
_DIRTY_SQL = """
SELECT r.id FROM telemetry_run r LEFT OUTER JOIN waste_runanalysis a ON a.run_id = r.id
WHERE a.run_id IS NULL
   OR (a.analysed_seq < r.ingest_seq
       AND NOT (a.failed_seq = r.ingest_seq AND (a.failures >= %s OR (a.retry_at > %s AND a.retry_at IS NOT NULL))))
ORDER BY r.allocation_start LIMIT %s
"""


def runs_dirty(limit: int = 500) -> list[uuid.UUID]:
    """Runs whose stored analysis is missing or older than their telemetry, oldest allocation
    first: earlier runs finish first, so later ones find them as peers (evidence.py). A run whose
    analysis failed at its current telemetry waits for its retry time, and after
    MAX_ANALYSIS_FAILURES for new telemetry. One SELECT as text, on every backend: the ORM's
    compiling of it was most of a sweep with nothing to do."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(_DIRTY_SQL, [MAX_ANALYSIS_FAILURES, now, limit])
        # SQLite hands back the 32 hex digits Django stores a uuid as.
        return [r if isinstance(r, uuid.UUID) else uuid.UUID(r) for (r,) in cursor.fetchall()]


@dataclass(frozen=True)
class SweepResult:
    crashed: int
    analysed: int
    enqueued: int
    rollup_days: int


def _sweep_settings() -> tuple[int, int]:
    """The organization's crash threshold and analysis debounce, s (the row is made if missing):
    the statement as text, as the sweep's others."""
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

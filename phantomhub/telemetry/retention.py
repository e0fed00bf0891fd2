"""Storage maintenance: weekly partitions made ahead, finished runs archived, raw rows retired.

Raw rows leave PostgreSQL only when their run is over (not running), archived at its current
telemetry (RunArchive.ingest_seq equals Run.ingest_seq) and past its project's retention
(ProjectRetention, else PHANTOMHUB_RAW_RETENTION_DAYS) counted from its end. A weekly partition
is dropped only when every run registered that week is so, and the run ids actually present in
the partition are checked against that list first. Rows in the legacy and default partitions,
and every row on SQLite, are deleted run by run under the same rule. Marking runs pruned and
dropping their rows commit together, so a reader sees either the rows or the mark.

Each run is archived on its own: one that fails is logged and counted, and the others go on.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from phantomhub.telemetry.archive import run_archive
from phantomhub.telemetry.models import ProjectRetention, Run, RunArchive, RunStatus
from phantomhub.telemetry.partitions import (
    LEGACY_WEEK,
    RAW_TABLES,
    Partition,
    partition_drop,
    partitions_ensure,
    partitions_list,
    run_weeks_where,
    week_of,
)

log = logging.getLogger(__name__)
ARCHIVE_BATCH = 200  # runs archived per pass at most: a pass stays short, the next one goes on


@dataclass
class MaintenanceResult:
    dry_run: bool = False
    partitions_created: list[str] = field(default_factory=list)
    archived: int = 0
    archive_failed: int = 0
    partitions_dropped: list[str] = field(default_factory=list)
    runs_pruned: int = 0
    prune_failed: int = 0
    would_archive: list[str] = field(default_factory=list)
    would_drop: list[str] = field(default_factory=list)
    would_prune: list[str] = field(default_factory=list)
    skipped: bool = False  # another pass held the lock

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ended_at() -> Coalesce:
    return Coalesce("finished_at", "last_seen_at")


def runs_to_archive(*, now: datetime, limit: int = ARCHIVE_BATCH) -> list[uuid.UUID]:
    """Runs over for PHANTOMHUB_ARCHIVE_DELAY_S whose archive is missing or stale, oldest first."""
    cutoff = now - timedelta(seconds=settings.ARCHIVE_DELAY_S)
    rows = (
        Run.objects.exclude(status=RunStatus.RUNNING)
        .annotate(ended=_ended_at())
        .filter(ended__lte=cutoff)
        .filter(Q(archive__isnull=True) | ~Q(archive__ingest_seq=F("ingest_seq")))
        .order_by("ended")
        .values_list("id", flat=True)[:limit]
    )
    return list(rows)


def retention_days(project_id: int, overrides: dict[int, int] | None = None) -> int:
    if overrides is None:
        row = ProjectRetention.objects.filter(project_id=project_id).values_list("raw_retention_days", flat=True).first()
        return int(row) if row is not None else int(settings.RAW_RETENTION_DAYS)
    return overrides.get(project_id, int(settings.RAW_RETENTION_DAYS))


def _overrides() -> dict[int, int]:
    return dict(ProjectRetention.objects.values_list("project_id", "raw_retention_days"))


def run_expired(run: Run, archive: RunArchive | None, *, now: datetime, overrides: dict[int, int] | None = None) -> bool:
    """May this run's raw rows leave PostgreSQL now?"""
    if run.status == RunStatus.RUNNING or archive is None or archive.ingest_seq != run.ingest_seq:
        return False
    ended = run.finished_at or run.last_seen_at
    return ended + timedelta(days=retention_days(run.project_id, overrides)) <= now


def _runs_of_week(week: int) -> list[tuple[Run, RunArchive | None]]:
    runs = list(Run.objects.filter(storage_week=week).select_related("archive"))
    return [(run, getattr(run, "archive", None)) for run in runs]


def _runs_in_partition(partition: Partition) -> set[uuid.UUID]:
    """The distinct run ids stored in a partition, by skipping along its primary key (one index
    probe per run, not a scan of every row)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE ids AS ((SELECT run_id FROM {partition.name} ORDER BY run_id LIMIT 1) UNION ALL "
            f"SELECT (SELECT p.run_id FROM {partition.name} p WHERE p.run_id > ids.run_id ORDER BY p.run_id LIMIT 1) "
            "FROM ids WHERE ids.run_id IS NOT NULL) SELECT run_id FROM ids WHERE run_id IS NOT NULL"
        )
        return {row[0] for row in cursor.fetchall()}


def _weeks_droppable(now: datetime, overrides: dict[int, int]) -> dict[int, list[Partition]]:
    """Weekly partitions (both tables of a week together) that may be dropped."""
    current = week_of(now)
    by_week: dict[int, list[Partition]] = {}
    for partition in partitions_list():
        if partition.week is not None and partition.week < current:
            by_week.setdefault(partition.week, []).append(partition)
    out: dict[int, list[Partition]] = {}
    for week, partitions in sorted(by_week.items()):
        runs = _runs_of_week(week)
        if not all(run_expired(run, archive, now=now, overrides=overrides) for run, archive in runs):
            continue
        allowed = {run.pk for run, _ in runs}
        if any(_runs_in_partition(p) - allowed for p in partitions):
            log.warning("week %s holds rows of runs registered another week; not dropping it", week)
            continue
        out[week] = partitions
    return out


def _week_drop(week: int, partitions: list[Partition]) -> None:
    run_ids = list(Run.objects.filter(storage_week=week).values_list("id", flat=True))
    with transaction.atomic():
        RunArchive.objects.filter(run__storage_week=week, pruned_at__isnull=True).update(pruned_at=timezone.now())
        with connection.cursor() as cursor:
            for table in RAW_TABLES:  # rows of these runs written without their week (a bulk COPY)
                cursor.execute(f"DELETE FROM {table} WHERE run_week = %s AND run_id = ANY(%s)", [LEGACY_WEEK, run_ids])
        for partition in partitions:
            partition_drop(partition)


def _runs_to_delete(now: datetime, overrides: dict[int, int]) -> list[tuple[Run, RunArchive]]:
    """Expired runs whose rows are deleted row by row: on SQLite every run; on PostgreSQL those
    whose rows can only be in the legacy or default partition (week 0, or a week already dropped),
    and runs of projects whose retention is shorter than the default (a week's partition waits for
    its longest-kept run; a shorter retention is honoured without waiting for it). A run pruned
    before and archived again since (late rows) is pruned again."""
    candidates = (
        RunArchive.objects.select_related("run").filter(ingest_seq=F("run__ingest_seq")).exclude(run__status=RunStatus.RUNNING)
    )
    candidates = candidates.filter(Q(pruned_at__isnull=True) | Q(archived_at__gt=F("pruned_at")))
    # Without partitions (SQLite) there are no weekly partitions: every week is "not one", so
    # every run qualifies.
    weeks = {p.week for p in partitions_list() if p.week is not None}
    shorter = [pid for pid, days in overrides.items() if days < settings.RAW_RETENTION_DAYS]
    candidates = candidates.filter(
        Q(run__storage_week=LEGACY_WEEK) | ~Q(run__storage_week__in=weeks) | Q(run__project_id__in=shorter)
    )
    out = []
    for archive in candidates.order_by("archived_at")[:ARCHIVE_BATCH]:
        if run_expired(archive.run, archive, now=now, overrides=overrides):
            out.append((archive.run, archive))
    return out


def _run_rows_delete(run: Run) -> None:
    weeks, week_params = run_weeks_where(run.storage_week)
    run_id = Run._meta.pk.get_db_prep_value(run.pk, connection)
    with transaction.atomic(), connection.cursor() as cursor:
        for table in RAW_TABLES:
            cursor.execute(f"DELETE FROM {table} WHERE run_id = %s{weeks}", [run_id, *week_params])
        RunArchive.objects.filter(run=run).update(pruned_at=timezone.now())


_PASS_LOCK = (4242, 7011)  # a PostgreSQL advisory lock: one pass at a time in the whole deployment


def storage_maintain(*, now: datetime | None = None, dry_run: bool = False, progress: Any = None) -> MaintenanceResult:
    """One maintenance pass: partitions ahead, archive, retention. `progress(line)` is told each
    step. On PostgreSQL a pass that finds another one running (beat and a manual `retention`)
    does nothing and says so."""
    if connection.vendor != "postgresql":
        return _storage_maintain(now=now, dry_run=dry_run, progress=progress)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", list(_PASS_LOCK))
        row = cursor.fetchone()
        if not (row and row[0]):
            (progress or (lambda line: None))("another storage maintenance pass is running; nothing done")
            return MaintenanceResult(dry_run=dry_run, skipped=True)
        try:
            return _storage_maintain(now=now, dry_run=dry_run, progress=progress)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(_PASS_LOCK))


def _storage_maintain(*, now: datetime | None, dry_run: bool, progress: Any) -> MaintenanceResult:
    now = now or timezone.now()
    say = progress or (lambda line: None)
    result = MaintenanceResult(dry_run=dry_run)
    if not dry_run:
        result.partitions_created = partitions_ensure(now=now)
        for name in result.partitions_created:
            say(f"created partition {name}")
    for run_id in runs_to_archive(now=now):
        if dry_run:
            result.would_archive.append(str(run_id))
            say(f"would archive run {run_id}")
            continue
        try:
            archived = run_archive(run_id=run_id)
        except Exception:
            log.exception("archiving run %s failed; the other runs go on", run_id)
            result.archive_failed += 1
            say(f"FAILED to archive run {run_id}")
            continue
        result.archived += 1
        say(f"archived run {run_id}: {archived.step_rows} steps ({archived.steps_bytes} bytes), {archived.sample_rows} samples")
    overrides = _overrides()
    for week, partitions in _weeks_droppable(now, overrides).items():  # none without partitions
        names = [p.name for p in partitions]
        if dry_run:
            result.would_drop += names
            say(f"would drop {', '.join(names)}")
            continue
        try:
            _week_drop(week, partitions)
        except Exception:
            log.exception("dropping week %s failed; retrying next pass", week)
            result.prune_failed += 1
            continue
        result.partitions_dropped += names
        say(f"dropped {', '.join(names)}")
    for run, _ in _runs_to_delete(now, overrides):
        if dry_run:
            result.would_prune.append(str(run.pk))
            say(f"would delete the raw rows of run {run.pk}")
            continue
        try:
            _run_rows_delete(run)
        except Exception:
            log.exception("pruning run %s failed; retrying next pass", run.pk)
            result.prune_failed += 1
            continue
        result.runs_pruned += 1
        say(f"deleted the raw rows of run {run.pk}")
    return result

"""Weekly partitions of the raw tables (PostgreSQL): which week holds a run, and the DDL.

`telemetry_stepchunk` and `telemetry_samplechunk` (raw steps and samples, packed a chunk per
rank and batch: storage.py) are RANGE-partitioned on a hidden column,
`run_week`: the week the run was registered in (Run.storage_week), the same for every row of a
run. A partition is therefore "the runs registered that week", and retention drops a whole
partition once every run in it is archived and past its retention (retention.py), instead of
deleting rows. Run ids stay what clients chose (docs/api.md, "Run ids"), so the key is a column
of its own, not the run id; docs/scaling.md ("Storage") says why.

Besides the weekly partitions: `<table>_legacy` holds week 0 (rows stored before partitioning,
and rows written without a week, e.g. by a bulk load that names no run_week), and
`<table>_default` catches rows of a week that has no partition (one not created ahead in time,
or a late row of a run whose partition was already dropped). Both are pruned row by row.

Weeks are counted in Mondays since 1970-01-05, so week N starts on WEEK_EPOCH + 7·N days.
SQLite has none of this: its raw tables are plain, and run_week does not exist there.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

log = logging.getLogger(__name__)

RAW_TABLES = ("telemetry_stepchunk", "telemetry_samplechunk")
WEEK_EPOCH = date(1970, 1, 5)  # a Monday
LEGACY_WEEK = 0
WEEKS_AHEAD = 4
_WEEK_NAME = re.compile(r"^(?P<table>telemetry_stepchunk|telemetry_samplechunk)_w(?P<day>\d{8})$")


def week_of(moment: datetime | date) -> int:
    day = moment.astimezone(UTC).date() if isinstance(moment, datetime) else moment
    return (day - WEEK_EPOCH).days // 7


def week_now() -> int:
    """The default of Run.storage_week: the week a run is registered in."""
    return week_of(timezone.now())


def week_start(week: int) -> date:
    return WEEK_EPOCH + timedelta(days=7 * week)


def partition_name(table: str, week: int) -> str:
    return f"{table}_w{week_start(week):%Y%m%d}"


def has_run_week() -> bool:
    """Whether the raw tables carry `run_week` (PostgreSQL). The one place that says SQLite has
    no partitions: its raw tables are plain, and the column does not exist there."""
    return connection.vendor == "postgresql"


def run_weeks_where(week: int) -> tuple[str, list[Any]]:
    """The condition (" AND ...", its parameters) that keeps a query of a run's raw rows to the
    partitions they can be in: the run's week and the legacy one (nothing without partitions)."""
    if not has_run_week():
        return "", []
    return " AND run_week = ANY(%s)", [[LEGACY_WEEK, week]]


def is_partitioned() -> bool:
    """True when the raw tables are partitioned (PostgreSQL after migration 0007)."""
    if not has_run_week():
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s AND relkind IN ('r', 'p')", [RAW_TABLES[0]])
        row = cursor.fetchone()
    return bool(row and row[0] == "p")


# The week of a run never changes after registration, so each process remembers it: the ingest
# path pays one primary-key lookup per run and process, not one per batch.
_RUN_WEEKS: dict[uuid.UUID, int] = {}
_RUN_WEEKS_MAX = 100_000


def run_week(run_id: uuid.UUID) -> int:
    """Run.storage_week of the run (LEGACY_WEEK for an unknown run: the insert then fails on the FK)."""
    week = _RUN_WEEKS.get(run_id)
    if week is not None:
        return week
    with connection.cursor() as cursor:
        cursor.execute("SELECT storage_week FROM telemetry_run WHERE id = %s", [run_id])
        row = cursor.fetchone()
    if row is None:
        return LEGACY_WEEK
    if len(_RUN_WEEKS) >= _RUN_WEEKS_MAX:
        _RUN_WEEKS.clear()
    _RUN_WEEKS[run_id] = week = int(row[0])
    return week


def run_week_forget() -> None:
    """Forget the remembered weeks (tests that give a run an explicit week)."""
    _RUN_WEEKS.clear()


@dataclass(frozen=True)
class Partition:
    table: str
    name: str
    week: int | None  # None: the legacy or the default partition
    rows_estimate: int
    bytes_total: int


def partitions_list() -> list[Partition]:
    """Every partition of the raw tables, weekly ones by week."""
    if not is_partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT parent.relname, child.relname, GREATEST(child.reltuples, 0)::bigint, pg_total_relation_size(child.oid) "
            "FROM pg_inherits i JOIN pg_class parent ON parent.oid = i.inhparent JOIN pg_class child ON child.oid = i.inhrelid "
            "WHERE parent.relname = ANY(%s) ORDER BY parent.relname, child.relname",
            [list(RAW_TABLES)],
        )
        rows = cursor.fetchall()
    out = []
    for table, name, estimate, size in rows:
        match = _WEEK_NAME.match(name)
        week = week_of(datetime.strptime(match["day"], "%Y%m%d").date()) if match else None
        out.append(Partition(table, name, week, int(estimate), int(size)))
    return out


def partitions_ensure(*, now: datetime | None = None, weeks_ahead: int = WEEKS_AHEAD) -> list[str]:
    """Create the weekly partitions from this week to `weeks_ahead` weeks on, if missing.

    Made ahead of time so a run registered next week finds its partition. A week whose rows
    already went to the default partition is left out (creating it would have to move them); its
    rows are pruned from the default partition row by row. Returns the partitions created.
    """
    if not is_partitioned():
        return []
    current = week_of(now or timezone.now())
    existing = {(p.table, p.week) for p in partitions_list()}
    created = []
    for week in range(current, current + weeks_ahead + 1):
        missing = [table for table in RAW_TABLES if (table, week) not in existing]
        # Both tables' partitions of a week come and go together: retention reasons per week.
        if missing and any(_default_holds(table, week) for table in RAW_TABLES):
            log.warning("week %s has rows in a default partition; not creating its partitions", week)
            continue
        for table in missing:
            name = partition_name(table, week)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} FOR VALUES FROM (%s) TO (%s)", [week, week + 1]
                )
            created.append(name)
    return created


def _default_holds(table: str, week: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table}_default WHERE run_week = %s)", [week])
        row = cursor.fetchone()
    return bool(row and row[0])


def partition_drop(partition: Partition, *, lock_timeout_ms: int = 5000) -> None:
    """Detach and drop one weekly partition. A short lock timeout: if ingest holds the parent
    for longer, this gives up (LockNotAvailable) and the next maintenance pass tries again."""
    if partition.week is None:
        raise ValueError(f"{partition.name} is not a weekly partition")
    from django.db import transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
        # Deferred foreign-key checks of rows written earlier in this transaction (none in a
        # maintenance pass of its own) would block the DROP: run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"ALTER TABLE {partition.table} DETACH PARTITION {partition.name}")
        cursor.execute(f"DROP TABLE {partition.name}")

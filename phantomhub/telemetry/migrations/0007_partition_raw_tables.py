"""Partition the raw tables by week on PostgreSQL (phantomhub/telemetry/partitions.py).

A table with data cannot become partitioned in place, so each raw table is renamed to
`<table>_legacy`, given the partition column (`run_week`, 0 for every existing row: a catalog-only
change, no rewrite), re-indexed on the new primary key and attached as the partition of week 0 under
a new partitioned table of the old name; a default partition and the weekly partitions from this
week on are created beside it. Existing rows are never copied: the cost is one index build and
one validation scan per table. The index Django made on run_id alone is dropped (the primary key
leads with run_id). SQLite: nothing to do (the model changes are bookkeeping only).
"""

from datetime import UTC, date, datetime, timedelta

import django.db.models.deletion
from django.db import migrations, models

STEP = (
    "telemetry_step",
    [
        ("run_id", "uuid NOT NULL"),
        ("rank", "integer NOT NULL"),
        ("run_week", "integer NOT NULL DEFAULT 0"),
        ("step", "bigint NOT NULL"),
        ("t_start_ns", "bigint NOT NULL"),
        *((name, "bigint") for name in ("dur_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns")),
        ("flops", "double precision"),
        *((name, "bigint") for name in ("tokens", "samples", "mem_allocated", "mem_reserved", "mem_peak", "alloc_retries")),
    ],
    ["run_id", "rank", "step"],
)
SAMPLE = (
    "telemetry_systemsample",
    [
        ("run_id", "uuid NOT NULL"),
        ("rank", "integer NOT NULL"),
        ("device", "integer NOT NULL"),
        ("run_week", "integer NOT NULL DEFAULT 0"),
        ("t_ns", "bigint NOT NULL"),
        ("gpu_util_pct", "double precision"),
        ("sm_clock_mhz", "double precision"),
        ("gpu_mem_used_bytes", "bigint"),
        ("power_w", "double precision"),
        ("cpu_process_pct", "double precision"),
        ("cpu_other_pct", "double precision"),
        ("cpu_steal_pct", "double precision"),
        ("rss_bytes", "bigint"),
    ],
    ["run_id", "rank", "device", "t_ns"],
)
WEEK_EPOCH = date(1970, 1, 5)
WEEKS_AHEAD = 4


def _constraints_and_indexes(cursor, table):
    cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN ('p', 'f', 'u')", [table])
    constraints = [row[0] for row in cursor.fetchall()]
    cursor.execute(
        "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = %s::regclass", [table]
    )
    return constraints, [row[0] for row in cursor.fetchall()]


def _partition(cursor, spec):
    table, columns, key = spec
    legacy = f"{table}_legacy"
    cursor.execute(f"ALTER TABLE {table} RENAME TO {legacy}")
    constraints, _ = _constraints_and_indexes(cursor, legacy)
    for name in constraints:
        cursor.execute(f'ALTER TABLE {legacy} DROP CONSTRAINT "{name}"')
    _, indexes = _constraints_and_indexes(cursor, legacy)
    for name in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    cursor.execute(f"ALTER TABLE {legacy} ADD COLUMN run_week integer NOT NULL DEFAULT 0")
    pk = ", ".join([*key, "run_week"])
    body = ", ".join(f"{name} {kind}" for name, kind in columns)
    cursor.execute(f"CREATE TABLE {table} ({body}, CONSTRAINT {table}_pkey PRIMARY KEY ({pk})) PARTITION BY RANGE (run_week)")
    # A primary key (not a bare unique index), so ATTACH adopts it instead of building another.
    cursor.execute(f"ALTER TABLE {legacy} ADD CONSTRAINT {legacy}_pkey PRIMARY KEY ({pk})")
    cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO (1)")
    cursor.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
    cursor.execute(
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_run_id_fk FOREIGN KEY (run_id) "
        "REFERENCES telemetry_run (id) DEFERRABLE INITIALLY DEFERRED"
    )
    current = (datetime.now(UTC).date() - WEEK_EPOCH).days // 7
    for week in range(current, current + WEEKS_AHEAD + 1):
        start = WEEK_EPOCH + timedelta(days=7 * week)
        cursor.execute(f"CREATE TABLE {table}_w{start:%Y%m%d} PARTITION OF {table} FOR VALUES FROM ({week}) TO ({week + 1})")


def _unpartition(cursor, spec):
    table, columns, key = spec
    plain = f"{table}_plain"
    # The column order Django created (run_id last), without run_week.
    kept = [(name, kind.replace(" DEFAULT 0", "")) for name, kind in columns if name not in ("run_id", "run_week")]
    kept.append(("run_id", "uuid NOT NULL"))
    names = ", ".join(name for name, _ in kept)
    cursor.execute(f"CREATE TABLE {plain} ({', '.join(f'{n} {k}' for n, k in kept)})")
    cursor.execute(f"INSERT INTO {plain} ({names}) SELECT {names} FROM {table}")
    cursor.execute(f"DROP TABLE {table} CASCADE")
    cursor.execute(f"ALTER TABLE {plain} RENAME TO {table}")
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({', '.join(key)})")
    cursor.execute(f"CREATE INDEX {table}_run_id_idx ON {table} (run_id)")
    cursor.execute(
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_run_id_fk FOREIGN KEY (run_id) "
        "REFERENCES telemetry_run (id) DEFERRABLE INITIALLY DEFERRED"
    )


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for spec in (STEP, SAMPLE):
            _partition(cursor, spec)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for spec in (STEP, SAMPLE):
            _unpartition(cursor, spec)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0006_storage_archive_retention")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="telemetry.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="systemsample",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="telemetry.run",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]

"""Raw steps and samples move from a row each to a packed chunk per rank and batch (storage.py).

The chunk tables are created beside the row tables (on PostgreSQL partitioned by week as the row
tables were: the same weekly partitions, a legacy one for week 0 and a default one), every stored
row is packed into them (PostgreSQL: one INSERT … SELECT per table, a chunk per rank and 4,096
steps or hour of samples, the payload built by int8send/float8send, which write the big-endian
records storage.py reads; SQLite: in Python), each rank's high-water marks and chunk sequence are
set from what was packed, and the row tables are dropped. Backwards: the chunks are unpacked into
row tables again, partitioned as migration 0007 made them (every row in week 0's partition).
"""

import importlib

import django.db.models.deletion
import numpy as np
from django.db import migrations, models

STEP_COLUMNS = [
    "step", "t_start_ns", "dur_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns", "flops",
    "tokens", "samples", "mem_allocated", "mem_reserved", "mem_peak", "alloc_retries",
]  # fmt: skip
SAMPLE_COLUMNS = [
    "device", "t_ns", "gpu_util_pct", "sm_clock_mhz", "gpu_mem_used_bytes", "power_w", "cpu_process_pct",
    "cpu_other_pct", "cpu_steal_pct", "rss_bytes",
]  # fmt: skip
FLOATS = {"flops", "gpu_util_pct", "sm_clock_mhz", "power_w", "cpu_process_pct", "cpu_other_pct", "cpu_steal_pct"}
# (row table, chunk table, record columns, key order, span column, group per chunk, seq parity)
KINDS = (
    ("telemetry_step", "telemetry_stepchunk", STEP_COLUMNS, "step", "step", "step / 4096", 0),
    ("telemetry_systemsample", "telemetry_samplechunk", SAMPLE_COLUMNS, "device, t_ns", "t_ns", "t_ns / 3600000000000", 1),
)
CHUNK_DDL = (
    "run_id uuid NOT NULL, rank integer NOT NULL, seq bigint NOT NULL, key_lo bigint NOT NULL, key_hi bigint NOT NULL, "
    "n integer NOT NULL, payload bytea NOT NULL, run_week integer NOT NULL DEFAULT 0"
)


def _field(name):
    if name in ("step", "t_ns"):
        return f"int8send({name})"
    if name == "device":
        return "int8send(device::int8)"
    return f"float8send(COALESCE({name}, 'NaN'))" if name in FLOATS else f"int8send(COALESCE({name}, -1))"


def _pg_forwards(cursor):
    for rows, chunks, columns, order, span, group, parity in KINDS:
        cursor.execute(f"DROP TABLE {chunks}")  # made plain by CreateModel: made again partitioned
        cursor.execute(
            f"CREATE TABLE {chunks} ({CHUNK_DDL}, CONSTRAINT {chunks}_pkey PRIMARY KEY (run_id, rank, key_hi, seq, run_week)) "
            "PARTITION BY RANGE (run_week)"
        )
        try:
            with cursor.connection.transaction():
                cursor.execute(f"ALTER TABLE {chunks} ALTER COLUMN payload SET COMPRESSION lz4")
        except Exception:  # a PostgreSQL built without lz4 keeps its default (pglz)
            pass
        cursor.execute(
            "SELECT child.relname, pg_get_expr(child.relpartbound, child.oid) FROM pg_inherits i "
            "JOIN pg_class parent ON parent.oid = i.inhparent JOIN pg_class child ON child.oid = i.inhrelid "
            "WHERE parent.relname = %s",
            [rows],
        )
        for name, bound in cursor.fetchall():
            cursor.execute(f"CREATE TABLE {chunks}{name[len(rows):]} PARTITION OF {chunks} {bound}")
        record = " || ".join(_field(name) for name in columns)
        cursor.execute(
            f"INSERT INTO {chunks} (run_id, rank, run_week, seq, key_lo, key_hi, n, payload) "
            f"SELECT run_id, rank, run_week, 2 * (row_number() OVER (PARTITION BY run_id, rank ORDER BY min({span})) - 1) "
            f"+ {parity}, min({span}), max({span}), count(*), string_agg({record}, ''::bytea ORDER BY {order}) "
            f"FROM {rows} GROUP BY run_id, rank, run_week, {group}"
        )


def _sqlite_forwards(cursor):
    for rows, chunks, columns, order, span, _, parity in KINDS:
        record = np.dtype([(name, ">f8" if name in FLOATS else ">i8") for name in columns])
        cursor.execute(f"SELECT run_id, rank, {', '.join(columns)} FROM {rows} ORDER BY run_id, rank, {order}")
        fetched = cursor.fetchall()
        groups = {}
        for row in fetched:
            groups.setdefault((row[0], row[1]), []).append(row[2:])
        for (run_id, rank), values in groups.items():
            for i, start in enumerate(range(0, len(values), 4096)):
                part = values[start : start + 4096]
                out = np.empty(len(part), dtype=record)
                for k, name in enumerate(columns):
                    nan = np.nan if name in FLOATS else -1
                    out[name] = [nan if row[k] is None else row[k] for row in part]
                keys = out[span]
                cursor.execute(
                    f"INSERT INTO {chunks} (run_id, rank, seq, key_lo, key_hi, n, payload) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [run_id, rank, 2 * i + parity, int(keys.min()), int(keys.max()), len(part), out.tobytes()],
                )


STEP_HI = "(SELECT max(key_hi) FROM telemetry_stepchunk c WHERE c.run_id = telemetry_runrank.run_id AND c.rank = telemetry_runrank.rank)"


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cursor:
        if vendor == "postgresql":
            _pg_forwards(cursor)
        else:
            _sqlite_forwards(cursor)
        # Every packed (run, rank) gets its row, its marks and its next sequence number.
        greatest = "GREATEST" if vendor == "postgresql" else "MAX"
        cursor.execute(
            "INSERT INTO telemetry_runrank (run_id, rank, host, counters, step_rows, reused_step_rows, chunk_seq) "
            "SELECT run_id, rank, '', '{}', 0, 0, 0 FROM (SELECT run_id, rank FROM telemetry_stepchunk UNION "
            "SELECT run_id, rank FROM telemetry_samplechunk) AS ranks WHERE true ON CONFLICT (run_id, rank) DO NOTHING"
        )
        cursor.execute(
            "UPDATE telemetry_runrank SET "
            # A pruned rank keeps its mark (its rows left with retention): the larger of the two.
            f"last_step = {greatest}(COALESCE(telemetry_runrank.last_step, {STEP_HI}), COALESCE({STEP_HI}, telemetry_runrank.last_step)), "
            "last_sample_ns = (SELECT max(key_hi) FROM telemetry_samplechunk c WHERE c.run_id = telemetry_runrank.run_id "
            "AND c.rank = telemetry_runrank.rank), "
            f"chunk_seq = {greatest}((SELECT COALESCE(max(seq), -1) + 1 FROM telemetry_stepchunk c "
            "WHERE c.run_id = telemetry_runrank.run_id AND c.rank = telemetry_runrank.rank), "
            "(SELECT COALESCE(max(seq), -1) + 1 FROM telemetry_samplechunk c "
            "WHERE c.run_id = telemetry_runrank.run_id AND c.rank = telemetry_runrank.rank))"
        )


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cursor:
        for rows, chunks, columns, _, _, _, _ in KINDS:
            record = np.dtype([(name, ">f8" if name in FLOATS else ">i8") for name in columns])
            cursor.execute(f"SELECT run_id, rank, payload FROM {chunks} ORDER BY run_id, rank, seq")
            for run_id, rank, packed in cursor.fetchall():
                out = np.frombuffer(bytes(packed), dtype=record)
                values = []
                for rec in out.tolist():
                    values.append(
                        [run_id, rank]
                        + [
                            None
                            if (name in FLOATS and v != v) or (name not in FLOATS and name != "device" and v < 0)
                            else v
                            for name, v in zip(columns, rec)
                        ]
                    )
                marks = ", ".join(["%s"] * (2 + len(columns)))
                cursor.executemany(f"INSERT INTO {rows} (run_id, rank, {', '.join(columns)}) VALUES ({marks})", values)
        if vendor == "postgresql":  # partitioned again as migration 0007 left them (0008 dropped the foreign key)
            partitioning = importlib.import_module("phantomhub.telemetry.migrations.0007_partition_raw_tables")
            for spec in (partitioning.STEP, partitioning.SAMPLE):
                partitioning._partition(cursor, spec)
                cursor.execute(f"ALTER TABLE {spec[0]} DROP CONSTRAINT {spec[0]}_run_id_fk")


def _chunk_model(name):
    return migrations.CreateModel(
        name=name,
        fields=[
            ("pk", models.CompositePrimaryKey("run_id", "rank", "key_hi", "seq", blank=True, editable=False, primary_key=True, serialize=False)),
            ("rank", models.IntegerField()),
            ("seq", models.BigIntegerField()),
            ("key_lo", models.BigIntegerField()),
            ("key_hi", models.BigIntegerField()),
            ("n", models.IntegerField()),
            ("payload", models.BinaryField()),
            (
                "run",
                models.ForeignKey(
                    db_constraint=False,
                    db_index=False,
                    on_delete=django.db.models.deletion.CASCADE,
                    related_name="+",
                    to="telemetry.run",
                ),
            ),
        ],
        options={"abstract": False},
    )


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0008_raw_rows_checked_per_batch")]

    operations = [
        migrations.AddField(model_name="runrank", name="last_sample_ns", field=models.BigIntegerField(blank=True, null=True)),
        migrations.AddField(model_name="runrank", name="chunk_seq", field=models.BigIntegerField(default=0, db_default=0)),
        _chunk_model("StepChunk"),
        _chunk_model("SampleChunk"),
        migrations.RunPython(forwards, backwards),
        migrations.DeleteModel(name="Step"),
        migrations.DeleteModel(name="SystemSample"),
    ]

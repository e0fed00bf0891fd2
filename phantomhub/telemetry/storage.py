"""Bulk writes of validated columnar batches into the raw tables, idempotently.

PostgreSQL: the batch goes in by binary COPY straight into the table inside a savepoint — the
common case of all-new rows costs exactly one COPY. If any row already exists (a replay, or the
same batch arriving twice at once) the COPY fails on the primary key; we roll back to the
savepoint and go through a temp staging table with INSERT … ON CONFLICT DO NOTHING, whose row
count tells accepted from duplicate rows. SQLite: batched INSERT OR IGNORE, counted by
total_changes. Both give the same (accepted, duplicates) for the same input.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from django.db import connection

from phantomhub.telemetry.columns import Batch


@dataclass(frozen=True)
class Table:
    name: str
    pg_types: dict[str, str]  # every column but run_id and rank: "int4" | "int8" | "float8"


_I8, _F8, _I4 = "int8", "float8", "int4"
STEP_TABLE = Table(
    "telemetry_step",
    {
        "step": _I8,
        "t_start_ns": _I8,
        "dur_ns": _I8,
        "data_ns": _I8,
        "forward_ns": _I8,
        "backward_ns": _I8,
        "optimizer_ns": _I8,
        "comm_ns": _I8,
        "flops": _F8,
        "tokens": _I8,
        "samples": _I8,
        "mem_allocated": _I8,
        "mem_reserved": _I8,
        "mem_peak": _I8,
        "alloc_retries": _I8,
    },
)
SAMPLE_TABLE = Table(
    "telemetry_systemsample",
    {
        "device": _I4,
        "t_ns": _I8,
        "gpu_util_pct": _F8,
        "sm_clock_mhz": _F8,
        "gpu_mem_used_bytes": _I8,
        "power_w": _F8,
        "cpu_process_pct": _F8,
        "cpu_other_pct": _F8,
        "cpu_steal_pct": _F8,
        "rss_bytes": _I8,
    },
)
_NP = {_I8: ">i8", _F8: ">f8", _I4: ">i4"}
_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_PG_COPY_TRAILER = b"\xff\xff"


def batch_insert(*, table: Table, run_id: uuid.UUID, rank: int, batch: Batch) -> tuple[int, int]:
    """Store the rows that are new; return (accepted, duplicates). Call inside a transaction."""
    names = [name for name in table.pg_types if name in batch.values]
    if connection.vendor == "postgresql":
        accepted = _pg_insert(table, names, run_id, rank, batch)
    else:
        accepted = _sqlite_insert(table, names, run_id, rank, batch)
    return accepted, batch.n - accepted


def pg_copy_payload(table: Table, names: list[str], run_id: uuid.UUID, rank: int, batch: Batch) -> bytes:
    """Binary COPY rows built in one numpy pass: a fixed-width record per row."""
    fields: list[tuple[str, str]] = [
        ("nf", ">i2"),
        ("l_run", ">i4"),
        ("run", "V16"),
        ("l_rank", ">i4"),
        ("rank", ">i4"),
    ]
    for name in names:
        fields += [(f"l_{name}", ">i4"), (name, _NP[table.pg_types[name]])]
    rows = np.empty(batch.n, dtype=np.dtype(fields))
    rows["nf"] = 2 + len(names)
    rows["l_run"] = 16
    rows["run"] = np.frombuffer(run_id.bytes, dtype="V16")[0]
    rows["l_rank"] = 4
    rows["rank"] = rank
    for name in names:
        rows[f"l_{name}"] = np.dtype(_NP[table.pg_types[name]]).itemsize
        rows[name] = batch.values[name]
    return _PG_COPY_HEADER + rows.tobytes() + _PG_COPY_TRAILER


def _row_tuples(names: list[str], run_key: Any, rank: int, batch: Batch) -> list[tuple[Any, ...]]:
    columns: list[list[Any]] = []
    for name in names:
        values = batch.values[name].tolist()
        mask = batch.nulls.get(name)
        if mask is not None:
            values = [None if is_null else v for v, is_null in zip(values, mask.tolist())]
        columns.append(values)
    return [(run_key, rank, *row) for row in zip(*columns)]


def _pg_copy(
    cur: psycopg.Cursor[Any], target: str, table: Table, names: list[str], run_id: uuid.UUID, rank: int, batch: Batch
) -> None:
    cols = ", ".join(["run_id", "rank", *names])
    if batch.has_nulls:
        with cur.copy(f"COPY {target} ({cols}) FROM STDIN") as copy:
            for row in _row_tuples(names, run_id, rank, batch):
                copy.write_row(row)
    else:
        with cur.copy(f"COPY {target} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(pg_copy_payload(table, names, run_id, rank, batch))


def _pg_insert(table: Table, names: list[str], run_id: uuid.UUID, rank: int, batch: Batch) -> int:
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    with raw.cursor() as cur:
        cur.execute("SAVEPOINT phantomhub_copy")
        try:
            _pg_copy(cur, table.name, table, names, run_id, rank, batch)
            cur.execute("RELEASE SAVEPOINT phantomhub_copy")
            return batch.n
        except psycopg.errors.UniqueViolation:
            cur.execute("ROLLBACK TO SAVEPOINT phantomhub_copy")
        stage = f"{table.name}_stage"
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {table.name} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        cur.execute(f"TRUNCATE {stage}")
        _pg_copy(cur, stage, table, names, run_id, rank, batch)
        cols = ", ".join(["run_id", "rank", *names])
        cur.execute(f"INSERT INTO {table.name} ({cols}) SELECT {cols} FROM {stage} ON CONFLICT DO NOTHING")
        return int(cur.rowcount)


def _sqlite_insert(table: Table, names: list[str], run_id: uuid.UUID, rank: int, batch: Batch) -> int:
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    cols = ", ".join(["run_id", "rank", *names])
    marks = ", ".join("?" * (2 + len(names)))
    before = raw.total_changes
    # Django stores UUIDs on SQLite as 32 hex digits.
    raw.executemany(
        f"INSERT OR IGNORE INTO {table.name} ({cols}) VALUES ({marks})",
        _row_tuples(names, run_id.hex, rank, batch),
    )
    return int(raw.total_changes - before)

"""Bulk writes of validated columnar batches into the raw tables, idempotently.

PostgreSQL: the batch goes in by binary COPY straight into the table inside a savepoint — the
common case of all-new rows costs exactly one COPY. If any row already exists (a replay, or the
same batch arriving twice at once) the COPY fails on the primary key; we roll back to the
savepoint and go through a temp staging table with INSERT … ON CONFLICT DO NOTHING, whose row
count tells accepted from refused rows. A caller that can redo its whole transaction passes
``optimistic=True``: no savepoint (two round trips fewer), and a conflict raises RowsExist, which
leaves the transaction aborted; the caller rolls it back and redoes it without ``optimistic``.
SQLite: batched INSERT OR IGNORE, counted by total_changes. Both give the same counts for the
same input. Several ranks' batches of one run (a node's, batches_insert) go in as one COPY, each
row's rank from a column, when all their rows are new; else rank by rank as above.

A refused step row is either a true duplicate (a replay: same step, same start) or a reused step
number (a restarted process numbering from 0 again: same step, another start). Only when some rows
were refused do we look at the stored starts to tell the two apart, so the common all-new batch
pays nothing for it.

On PostgreSQL every row also carries its run's week (partitions.py), the key of the weekly
partition it lands in; the week is looked up once per run and process, never per batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from django.db import connection

from phantomhub.telemetry.columns import Batch
from phantomhub.telemetry.partitions import run_week


@dataclass(frozen=True)
class Table:
    name: str
    pg_types: dict[str, str]  # every column but run_id and rank: "int4" | "int8" | "float8"
    # (key, value): a refused row whose stored value differs was a reused key, not a replay.
    reuse_check: tuple[str, str] | None = None


@dataclass(frozen=True)
class InsertResult:
    accepted: int
    duplicates: int  # refused rows identical in their reuse_check value (replays)
    reused: int  # refused rows whose key was stored with another value


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
    reuse_check=("step", "t_start_ns"),
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


# A row's rank: one for the whole COPY, or one per row (several ranks' batches in one COPY).
Ranks = int | npt.NDArray[np.int32]


class RowsExist(Exception):
    """An optimistic COPY met stored rows; the transaction is aborted and must be redone."""


def batch_insert(*, table: Table, run_id: uuid.UUID, rank: int, batch: Batch, optimistic: bool = False) -> InsertResult:
    """Store the rows that are new and count the refused ones. Call inside a transaction.

    ``optimistic``: all rows are expected new (a live rank's batch); see the module's docstring.
    """
    names = [name for name in table.pg_types if name in batch.values]
    if connection.vendor == "postgresql":
        accepted, reused = _pg_insert(table, names, run_id, rank, batch, optimistic)
    else:
        accepted = _sqlite_insert(table, names, run_id, rank, batch)
        reused = _sqlite_reused(table, run_id, rank, batch) if accepted < batch.n else 0
    return InsertResult(accepted, batch.n - accepted - reused, reused)


def batches_insert(
    *, table: Table, run_id: uuid.UUID, batches: Sequence[tuple[int, Batch]], optimistic: bool = False
) -> list[InsertResult]:
    """batch_insert for several ranks' batches of one run (distinct ranks), results in their order.

    On PostgreSQL, ``optimistic`` (all rows expected new): every row in one binary COPY, whose
    rank field comes from a column, so a node's ranks cost one COPY, not one each; RowsExist when
    any is stored already. Otherwise rank by rank through batch_insert, for exact counts per rank.
    Either way in the order of the ranks: two writers of the same rows take their locks in one order.
    """
    order = sorted(range(len(batches)), key=lambda i: batches[i][0])
    if optimistic and len(batches) > 1 and connection.vendor == "postgresql":
        names, ranks, joined = _joined(table, [batches[i] for i in order])
        _pg_insert(table, names, run_id, ranks, joined, optimistic=True)  # all new, or RowsExist
        return [InsertResult(batch.n, 0, 0) for _, batch in batches]
    results: dict[int, InsertResult] = {}
    for i in order:
        rank, batch = batches[i]
        results[i] = batch_insert(table=table, run_id=run_id, rank=rank, batch=batch, optimistic=optimistic)
    return [results[i] for i in range(len(batches))]


def _joined(table: Table, batches: Sequence[tuple[int, Batch]]) -> tuple[list[str], npt.NDArray[np.int32], Batch]:
    """Several ranks' batches as one: (the columns any of them sent, each row's rank, the rows).
    A column a batch did not send is null in its rows, as the table stores a column left out."""
    names = [name for name in table.pg_types if any(name in batch.values for _, batch in batches)]
    ranks = np.repeat(np.array([rank for rank, _ in batches], dtype=np.int32), [batch.n for _, batch in batches])
    values: dict[str, npt.NDArray[Any]] = {}
    nulls: dict[str, npt.NDArray[np.bool_]] = {}
    for name in names:
        dtype = next(batch.values[name].dtype for _, batch in batches if name in batch.values)
        values[name] = np.concatenate(
            [batch.values[name] if name in batch.values else np.zeros(batch.n, dtype) for _, batch in batches]
        )
        if any(name not in batch.values or name in batch.nulls for _, batch in batches):
            nulls[name] = np.concatenate(
                [
                    batch.nulls.get(name, np.zeros(batch.n, np.bool_)) if name in batch.values else np.ones(batch.n, np.bool_)
                    for _, batch in batches
                ]
            )
    return names, ranks, Batch(n=len(ranks), values=values, nulls=nulls)


def pg_copy_payload(
    table: Table, names: list[str], run_id: uuid.UUID, rank: Ranks, batch: Batch, week: int | None = None
) -> bytes:
    """Binary COPY rows built in numpy passes: a fixed-width record per row, for the columns
    (run_id, rank, [run_week,] *names); without `week` the rows take run_week's default (0).
    `rank` is every row's, or an array of one per row.

    A null field is its length (-1) without a value, so rows with nulls are written a group per
    pattern of nulls (system samples have two: host rows and GPU rows), each group fixed-width.
    The groups go in the order of their patterns and each keeps the batch's order: two writers of
    the same rows take their index locks in the same order, as with one sorted group.
    """
    masks = [batch.nulls.get(name) for name in names]
    if not any(mask is not None and mask.any() for mask in masks):
        return _PG_COPY_HEADER + _pg_records(table, names, run_id, rank, batch, week, None, None) + _PG_COPY_TRAILER
    # A row's pattern as one integer (bit k: names[k] is null); np.unique on it is a 1-D sort.
    code = np.zeros(batch.n, dtype=np.int64)
    for k, mask in enumerate(masks):
        if mask is not None:
            code |= mask.astype(np.int64) << k
    parts = [_PG_COPY_HEADER]
    for pattern in np.unique(code):
        rows = np.flatnonzero(code == pattern)
        null = [bool(int(pattern) >> k & 1) for k in range(len(names))]
        parts.append(_pg_records(table, names, run_id, rank, batch, week, rows, null))
    parts.append(_PG_COPY_TRAILER)
    return b"".join(parts)


def _pg_records(
    table: Table,
    names: list[str],
    run_id: uuid.UUID,
    rank: Ranks,
    batch: Batch,
    week: int | None,
    rows: Any,
    null: Any,
) -> bytes:
    """The records of `rows` (None: every row), whose fields in `null` (None: none) are null."""
    fields: list[tuple[str, str]] = [
        ("nf", ">i2"),
        ("l_run", ">i4"),
        ("run", "V16"),
        ("l_rank", ">i4"),
        ("rank", ">i4"),
    ]
    if week is not None:
        fields += [("l_week", ">i4"), ("week", ">i4")]
    for k, name in enumerate(names):
        fields.append((f"l_{name}", ">i4"))
        if null is None or not null[k]:
            fields.append((name, _NP[table.pg_types[name]]))
    out = np.empty(batch.n if rows is None else len(rows), dtype=np.dtype(fields))
    out["nf"] = 2 + len(names) + (week is not None)
    out["l_run"] = 16
    out["run"] = np.frombuffer(run_id.bytes, dtype="V16")[0]
    out["l_rank"] = 4
    out["rank"] = rank[rows] if isinstance(rank, np.ndarray) and rows is not None else rank
    if week is not None:
        out["l_week"] = 4
        out["week"] = week
    for k, name in enumerate(names):
        if null is not None and null[k]:
            out[f"l_{name}"] = -1
            continue
        out[f"l_{name}"] = np.dtype(_NP[table.pg_types[name]]).itemsize
        out[name] = batch.values[name] if rows is None else batch.values[name][rows]
    return out.tobytes()


def _row_tuples(names: list[str], run_key: Any, rank: int, batch: Batch, *lead: Any) -> list[tuple[Any, ...]]:
    columns: list[list[Any]] = []
    for name in names:
        values = batch.values[name].tolist()
        mask = batch.nulls.get(name)
        if mask is not None:
            values = [None if is_null else v for v, is_null in zip(values, mask.tolist())]
        columns.append(values)
    return [(run_key, rank, *lead, *row) for row in zip(*columns)]


def _pg_copy(
    cur: psycopg.Cursor[Any],
    target: str,
    table: Table,
    names: list[str],
    run_id: uuid.UUID,
    rank: Ranks,
    batch: Batch,
    week: int,
) -> None:
    cols = ", ".join(["run_id", "rank", "run_week", *names])
    with cur.copy(f"COPY {target} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(pg_copy_payload(table, names, run_id, rank, batch, week))


def _pg_insert(table: Table, names: list[str], run_id: uuid.UUID, rank: Ranks, batch: Batch, optimistic: bool) -> tuple[int, int]:
    """(accepted, reused) rows; `rank` an array of one per row only with ``optimistic``."""
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    week = run_week(run_id)
    with raw.cursor() as cur:
        if optimistic:
            try:
                _pg_copy(cur, table.name, table, names, run_id, rank, batch, week)
            except psycopg.errors.UniqueViolation:
                raise RowsExist(table.name) from None
            return batch.n, 0
        cur.execute("SAVEPOINT phantomhub_copy")
        try:
            _pg_copy(cur, table.name, table, names, run_id, rank, batch, week)
            cur.execute("RELEASE SAVEPOINT phantomhub_copy")
            return batch.n, 0
        except psycopg.errors.UniqueViolation:
            cur.execute("ROLLBACK TO SAVEPOINT phantomhub_copy")
        stage = f"{table.name}_stage"
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {table.name} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        cur.execute(f"TRUNCATE {stage}")
        _pg_copy(cur, stage, table, names, run_id, rank, batch, week)
        cols = ", ".join(["run_id", "rank", "run_week", *names])
        cur.execute(f"INSERT INTO {table.name} ({cols}) SELECT {cols} FROM {stage} ON CONFLICT DO NOTHING")
        accepted = int(cur.rowcount)
        if table.reuse_check is None or accepted == batch.n:
            return accepted, 0
        # The rows just inserted match themselves; only refused rows can differ.
        key, value = table.reuse_check
        cur.execute(
            f"SELECT count(*) FROM {stage} s JOIN {table.name} t ON t.run_id = s.run_id AND t.rank = s.rank "
            f"AND t.run_week = s.run_week AND t.{key} = s.{key} WHERE t.{value} <> s.{value}"
        )
        row = cur.fetchone()
        return accepted, int(row[0]) if row else 0


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


def _sqlite_reused(table: Table, run_id: uuid.UUID, rank: int, batch: Batch) -> int:
    if table.reuse_check is None:
        return 0
    key, value = table.reuse_check
    keys, values = batch.values[key], batch.values[value]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {key}, {value} FROM {table.name} WHERE run_id = %s AND rank = %s AND {key} BETWEEN %s AND %s",
            [run_id.hex, rank, int(keys.min()), int(keys.max())],
        )
        stored = dict(cursor.fetchall())
    return sum(1 for k, v in zip(keys.tolist(), values.tolist()) if k in stored and stored[k] != v)

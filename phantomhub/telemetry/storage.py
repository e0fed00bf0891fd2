"""Raw steps and samples stored as packed chunks: one row per rank and batch, idempotently.

A rank's batch of steps (or samples) is one row of `telemetry_stepchunk` (`telemetry_samplechunk`):
the run, the rank, a sequence number, the smallest and largest key in it (step; t_ns for samples),
the row count and `payload`, every row as a fixed-width big-endian record of the kind's columns
(`Kind.columns`, nulls as -1 / NaN: every stored value is non-negative, columns.py). A node's
60-second batch of 8 ranks is 16 database rows, however many steps it carries: the database's
cost is per batch, not per step, and a read is one ``frombuffer`` over the joined payloads.
docs/scaling.md ("Storage") measures it against a row per step.

Exactly-once per key, as a primary key per row gave: every writer first takes its ranks' rows in
`telemetry_runrank` (one upsert, in rank order, that also hands out the chunks' sequence numbers
and returns each rank's high-water marks: the largest step and sample time stored). A batch
whose smallest key is above its rank's mark is all new (a live rank: the common case costs no
read). Otherwise the stored chunks that overlap the batch's keys are read and its rows split into
new ones (stored as a chunk), replays (same key, same start) and, for steps, reused step numbers
(same step, another start: a restarted process numbering from 0 again). The marks move in the
same transaction (services._after_ingest), so a second writer of the same rank waits for the
first and then sees its rows.

On PostgreSQL every chunk also carries its run's week (partitions.py), the key of the weekly
partition it lands in. SQLite stores the same rows in plain tables.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from django.db import connection

from phantomhub.telemetry.columns import SAMPLE_COLUMNS, STEP_COLUMNS, Batch
from phantomhub.telemetry.partitions import has_run_week, run_week, run_weeks_where


@dataclass(frozen=True)
class Kind:
    name: str  # "steps" | "samples"
    table: str
    columns: tuple[str, ...]  # the payload's record, in order
    floats: frozenset[str]
    key: tuple[str, ...]  # unique within a rank, the rows' order within a chunk
    span: str  # the key column whose range a chunk records (key_lo, key_hi)
    reuse_check: str | None = None  # a refused row whose stored value here differs was a reused key

    @property
    def record(self) -> np.dtype[Any]:
        return np.dtype([(name, ">f8" if name in self.floats else ">i8") for name in self.columns])


STEPS = Kind(
    "steps",
    "telemetry_stepchunk",
    tuple(c.name for c in STEP_COLUMNS),
    frozenset(c.name for c in STEP_COLUMNS if c.kind == "float"),
    ("step",),
    "step",
    reuse_check="t_start_ns",
)
SAMPLES = Kind(
    "samples",
    "telemetry_samplechunk",
    ("device", *(c.name for c in SAMPLE_COLUMNS if c.name != "device")),
    frozenset(c.name for c in SAMPLE_COLUMNS if c.kind == "float"),
    ("device", "t_ns"),
    "t_ns",
)
KINDS = (STEPS, SAMPLES)
CHUNK_COLUMNS = ("run_id", "rank", "seq", "key_lo", "key_hi", "n", "payload")


@dataclass(frozen=True)
class InsertResult:
    accepted: int
    duplicates: int  # refused rows identical in their reuse_check value (replays)
    reused: int  # refused rows whose key was stored with another value


@dataclass(frozen=True)
class RankMarks:
    """A rank's state when its writer took it: the first free chunk sequence numbers and the
    largest key stored of each kind (None: none yet)."""

    seq: int
    last_step: int | None
    last_sample_ns: int | None

    def last(self, kind: Kind) -> int | None:
        return self.last_step if kind is STEPS else self.last_sample_ns


def payload(kind: Kind, batch: Batch, rows: npt.NDArray[np.intp] | None = None) -> bytes:
    """The records of a validated batch (of `rows` of it, when given), nulls as -1 / NaN."""
    n = batch.n if rows is None else len(rows)
    out = np.empty(n, dtype=kind.record)
    for name in kind.columns:
        values = batch.values.get(name)
        if values is None:
            out[name] = np.nan if name in kind.floats else -1
            continue
        if rows is not None:
            values = values[rows]
        out[name] = values
        mask = batch.nulls.get(name)
        if mask is not None:
            mask = mask if rows is None else mask[rows]
            out[name][mask] = np.nan if name in kind.floats else -1
    return out.tobytes()


def columns_from_payloads(kind: Kind, payloads: Sequence[bytes], names: Iterable[str]) -> dict[str, npt.NDArray[Any]]:
    """Columns `names` of the records of `payloads`, in their order, as native numpy arrays."""
    records = np.frombuffer(b"".join(payloads), dtype=kind.record)
    return {name: records[name].astype(np.float64 if name in kind.floats else np.int64) for name in names}


def ranks_lock(run_id: uuid.UUID, ranks: Sequence[int], *, hand_out: int = 2) -> dict[int, RankMarks]:
    """Take the ranks' rows (created when missing) until the transaction ends, in rank order, and
    hand out `hand_out` chunk sequence numbers to each (two: one a kind; none for a writer that
    only needs the rows, as the events endpoint does): one statement for all the ranks.

    Every writer of a run takes its ranks' rows before the run's row; this is where."""
    ordered = sorted(set(ranks))
    upsert = _ranks_upsert_pg if connection.vendor == "postgresql" else _ranks_upsert_portable
    return {
        rank: RankMarks(seq - hand_out, last_step, last_ns) for rank, seq, last_step, last_ns in upsert(run_id, ordered, hand_out)
    }


_RANKS_UPSERT = (
    "INSERT INTO telemetry_runrank (run_id, rank, host, counters, step_rows, last_step, reused_step_rows, chunk_seq) "
    "{rows} ON CONFLICT (run_id, rank) DO UPDATE SET chunk_seq = telemetry_runrank.chunk_seq + %s "
    "RETURNING rank, chunk_seq, last_step, last_sample_ns"
)


def _ranks_upsert_pg(run_id: uuid.UUID, ordered: list[int], hand_out: int) -> list[tuple[int, int, int | None, int | None]]:
    """ranks_lock's upsert on PostgreSQL: the ranks as one array parameter, so the statement's
    text is the same for any number of ranks. tests/test_sql_pairs.py pins it to the portable one."""
    rows = "SELECT %s::uuid, r, '', '{}'::jsonb, 0, NULL::int8, 0, %s FROM unnest(%s::int4[]) AS r ORDER BY r"
    with connection.cursor() as cursor:
        cursor.execute(_RANKS_UPSERT.format(rows=rows), [run_id, hand_out, ordered, hand_out])
        return cursor.fetchall()


def _ranks_upsert_portable(run_id: uuid.UUID, ordered: list[int], hand_out: int) -> list[tuple[int, int, int | None, int | None]]:
    """ranks_lock's upsert as a VALUES list (SQLite; PostgreSQL runs it too)."""
    rows = "VALUES " + ", ".join(["(%s, %s, '', '{}', 0, NULL, 0, %s)"] * len(ordered))
    params = [value for rank in ordered for value in (run_param(run_id), rank, hand_out)]
    with connection.cursor() as cursor:
        cursor.execute(_RANKS_UPSERT.format(rows=rows), [*params, hand_out])
        return cursor.fetchall()


def run_param(run_id: uuid.UUID) -> Any:
    """A run id as raw SQL takes it: a uuid where the database has the type, else the 32 hex
    digits Django stores (SQLite), as UUIDField decides it (by the backend's feature, not its name)."""
    return run_id if connection.features.has_native_uuid_field else run_id.hex


def batches_insert(
    *, kind: Kind, run_id: uuid.UUID, batches: Sequence[tuple[int, Batch]], marks: dict[int, RankMarks]
) -> list[InsertResult]:
    """Store the new rows of several ranks' batches of one run (distinct ranks, taken by
    ranks_lock in this transaction) as one chunk each; count the refused ones. Results in order."""
    chunks: list[tuple[Any, ...]] = []
    results: list[InsertResult] = []
    for rank, batch in batches:
        mark = marks[rank]
        span = batch.values[kind.span]
        lo, hi = int(span.min()), int(span.max())
        rows: npt.NDArray[np.intp] | None = None
        duplicates = reused = 0
        last = mark.last(kind)
        if last is not None and lo <= last:
            rows, duplicates, reused = _new_rows(kind, run_id, rank, batch, lo, hi)
        n = batch.n if rows is None else len(rows)
        if n:
            if rows is not None:
                span = span[rows]
                lo, hi = int(span.min()), int(span.max())
            seq = mark.seq + (0 if kind is STEPS else 1)
            chunks.append((rank, seq, lo, hi, n, payload(kind, batch, rows)))
        results.append(InsertResult(n, duplicates, reused))
    if chunks:
        (_chunks_write_pg if has_run_week() else _chunks_write_portable)(kind, run_id, chunks)
    return results


def _chunks_write_pg(kind: Kind, run_id: uuid.UUID, chunks: list[tuple[Any, ...]]) -> None:
    """The chunks (rank, seq, key_lo, key_hi, n, payload) of a run, on PostgreSQL: into the run's
    week's partition (partitions.py), in one statement for every rank's chunk whatever their
    count (its text never changes), its parameters bound by the server: Django's cursor would
    inline the payloads into the SQL as hex text, which PostgreSQL then parses and decodes.
    tests/test_sql_pairs.py pins it to the portable one."""
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    columns = list(zip(*chunks))
    with psycopg.Cursor(raw) as cursor:
        cursor.execute(
            f"INSERT INTO {kind.table} ({', '.join(CHUNK_COLUMNS)}, run_week) "
            "SELECT %s, *, %s FROM unnest(%s::int4[], %s::int8[], %s::int8[], %s::int8[], %s::int4[], %s::bytea[])",
            [run_id, run_week(run_id), *(list(column) for column in columns)],
        )


def _chunks_write_portable(kind: Kind, run_id: uuid.UUID, chunks: list[tuple[Any, ...]]) -> None:
    """The same rows through Django's cursor (SQLite; on PostgreSQL they would go to the legacy
    partition: no week)."""
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {kind.table} ({', '.join(CHUNK_COLUMNS)}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [(run_param(run_id), *chunk) for chunk in chunks],
        )


def _new_rows(kind: Kind, run_id: uuid.UUID, rank: int, batch: Batch, lo: int, hi: int) -> tuple[npt.NDArray[np.intp], int, int]:
    """(rows of the batch not stored yet, replays, reused keys), from the stored chunks whose
    keys overlap [lo, hi] (a replay, or a batch arriving after a later one)."""
    names = (*kind.key, kind.reuse_check) if kind.reuse_check else kind.key
    stored = stored_rows(kind, run_id, [rank], names=names, key_hi_min=lo, key_lo_max=hi)
    sent = _key_codes(kind, batch.values)
    have = _key_codes(kind, stored)
    order = np.argsort(have, kind="stable")
    have_sorted = have[order]
    at = np.searchsorted(have_sorted, sent).clip(max=max(len(have_sorted) - 1, 0))
    found = (have_sorted[at] == sent) if len(have_sorted) else np.zeros(batch.n, dtype=bool)
    reused = 0
    if kind.reuse_check and found.any():
        stored_value = stored[kind.reuse_check][order][at[found]]
        reused = int((stored_value != batch.values[kind.reuse_check][found]).sum())
    refused = int(found.sum())
    return np.flatnonzero(~found), refused - reused, reused


def _key_codes(kind: Kind, columns: dict[str, npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """One comparable value per row for the kind's key (steps: the step; samples: device, t_ns)."""
    if len(kind.key) == 1:
        return np.asarray(columns[kind.key[0]], dtype=np.int64)
    keys = np.empty(len(columns[kind.key[0]]), dtype=[(k, "<i8") for k in kind.key])
    for k in kind.key:
        keys[k] = columns[k]
    return keys


def stored_rows(
    kind: Kind,
    run_id: uuid.UUID,
    ranks: Sequence[int] | None,
    *,
    names: Iterable[str],
    key_hi_min: int | None = None,
    key_lo_max: int | None = None,
    except_ranks: Sequence[int] | None = None,
    with_rank: bool = False,
) -> dict[str, npt.NDArray[Any]]:
    """Columns `names` of the run's stored rows (of `ranks`, or every rank but `except_ranks`)
    in chunks whose keys reach `key_hi_min` and start at most at `key_lo_max`, chunk after chunk
    in (rank, seq) order (not sorted by key: callers filter and sort); ``with_rank`` adds "rank"."""
    read = _chunks_read_pg if has_run_week() else _chunks_read_portable
    fetched = read(ChunkQuery(kind, run_id, ranks, except_ranks, key_hi_min, key_lo_max))
    names = list(names)
    out = columns_from_payloads(kind, [bytes(p) for _, _, p in fetched], names)
    if with_rank:
        out["rank"] = np.repeat(np.array([r for r, _, _ in fetched], dtype=np.int64), [n for _, n, _ in fetched])
    return out


@dataclass(frozen=True)
class ChunkQuery:
    """Which chunks stored_rows reads: the run's (of ``ranks``, or every rank but
    ``except_ranks``) whose keys reach ``key_hi_min`` and start at most at ``key_lo_max``."""

    kind: Kind
    run_id: uuid.UUID
    ranks: Sequence[int] | None = None
    except_ranks: Sequence[int] | None = None
    key_hi_min: int | None = None
    key_lo_max: int | None = None


def _keys_where(key_hi_min: int | None, key_lo_max: int | None) -> tuple[str, list[Any]]:
    where, params = "", []
    if key_hi_min is not None:
        where += " AND key_hi >= %s"
        params.append(key_hi_min)
    if key_lo_max is not None:
        where += " AND key_lo <= %s"
        params.append(key_lo_max)
    return where, params


def _chunks_read_pg(q: ChunkQuery) -> list[tuple[int, int, Any]]:
    """stored_rows's (rank, n, payload) chunks on PostgreSQL: only the partitions the run's rows
    can be in, the ranks as array parameters (one statement text for any number of them), and
    binary results: the payloads come as they are stored, not hex-encoded text to decode.
    tests/test_sql_pairs.py pins it to the portable one."""
    weeks, params = run_weeks_where(run_week(q.run_id))
    where = f"run_id = %s{weeks}"
    params = [q.run_id, *params]
    if q.ranks is not None:
        where += " AND rank = ANY(%s)"
        params.append(list(q.ranks))
    if q.except_ranks:
        where += " AND NOT (rank = ANY(%s))"
        params.append(list(q.except_ranks))
    keys, key_params = _keys_where(q.key_hi_min, q.key_lo_max)
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    with psycopg.Cursor(raw) as pg_cursor:
        pg_cursor.execute(
            f"SELECT rank, n, payload FROM {q.kind.table} WHERE {where}{keys} ORDER BY rank, seq",
            [*params, *key_params],
            binary=True,
        )
        return pg_cursor.fetchall()


def _chunks_read_portable(q: ChunkQuery) -> list[tuple[int, int, Any]]:
    """The same chunks through Django's cursor, the ranks as IN lists (SQLite; PostgreSQL runs it too)."""
    where = "run_id = %s"
    params: list[Any] = [run_param(q.run_id)]
    if q.ranks is not None:
        where += f" AND rank IN ({', '.join(['%s'] * len(q.ranks))})" if q.ranks else " AND 1 = 0"
        params += list(q.ranks)
    if q.except_ranks:
        where += f" AND rank NOT IN ({', '.join(['%s'] * len(q.except_ranks))})"
        params += list(q.except_ranks)
    keys, key_params = _keys_where(q.key_hi_min, q.key_lo_max)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT rank, n, payload FROM {q.kind.table} WHERE {where}{keys} ORDER BY rank, seq", [*params, *key_params]
        )
        return cursor.fetchall()


def chunk_rows(kind: Kind, run_id: uuid.UUID, rank: int, seq: int, batch: Batch, week: int | None) -> tuple[Any, ...]:
    """A chunk as the table's row (run_id, rank, seq, key_lo, key_hi, n, payload[, run_week]), for
    loaders that write many runs' rows at once (fixtures, benchmarks): they bypass ingest, and
    must leave the ranks' marks (telemetry_runrank) at or above every stored key."""
    span = batch.values[kind.span]
    row = (run_id, rank, seq, int(span.min()), int(span.max()), batch.n, payload(kind, batch))
    return row if week is None else (*row, week)

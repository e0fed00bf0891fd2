"""Stored raw steps and samples, read for assertions without the server's own reader.

The server packs each rank's batch into one chunk row (phantomhub/telemetry/storage.py). Tests
read the chunk tables here and unpack the payloads with `struct`, from the record layout written
out below, not with storage.py's numpy code: what they compare with is an independent decoding.
Nulls (stored as -1 / NaN) come back as None, as a row per step stored them.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from django.db import connection

STEP_FIELDS = (
    "step", "t_start_ns", "dur_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns", "flops",
    "tokens", "samples", "mem_allocated", "mem_reserved", "mem_peak", "alloc_retries",
)  # fmt: skip
SAMPLE_FIELDS = (
    "device", "t_ns", "gpu_util_pct", "sm_clock_mhz", "gpu_mem_used_bytes", "power_w", "cpu_process_pct",
    "cpu_other_pct", "cpu_steal_pct", "rss_bytes",
)  # fmt: skip
_RECORD = {
    "telemetry_stepchunk": (STEP_FIELDS, struct.Struct(">8qd6q")),
    "telemetry_samplechunk": (SAMPLE_FIELDS, struct.Struct(">qqddqddddq")),
}
_NEVER_NULL = {"step", "t_start_ns", "device", "t_ns"}


def _rows(table: str, run_id: Any, rank: int | None, key: tuple[str, ...]) -> list[dict[str, Any]]:
    fields, record = _RECORD[table]
    where, params = [], []
    if run_id is not None:
        run = uuid.UUID(str(run_id))
        where.append("run_id = %s")
        params.append(run if connection.vendor == "postgresql" else run.hex)
    if rank is not None:
        where.append("rank = %s")
        params.append(rank)
    sql = f"SELECT run_id, rank, n, payload FROM {table}" + (f" WHERE {' AND '.join(where)}" if where else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        chunks = cursor.fetchall()
    out = []
    for chunk_run, chunk_rank, n, payload in chunks:
        payload = bytes(payload)
        assert len(payload) == n * record.size, f"a chunk of {n} rows holds {len(payload)} bytes"
        for values in record.iter_unpack(payload):
            row: dict[str, Any] = {"run_id": str(uuid.UUID(str(chunk_run))), "rank": chunk_rank}
            for name, value in zip(fields, values):
                null = name not in _NEVER_NULL and (value != value if isinstance(value, float) else value < 0)
                row[name] = None if null else value
            out.append(row)
    out.sort(key=lambda row: (row["run_id"], row["rank"], *(row[k] for k in key)))
    return out


def steps(run_id: Any = None, rank: int | None = None) -> list[dict[str, Any]]:
    """Stored steps (of a run, of a rank), ordered by (run, rank, step), one dict each."""
    return _rows("telemetry_stepchunk", run_id, rank, ("step",))


def samples(run_id: Any = None, rank: int | None = None) -> list[dict[str, Any]]:
    """Stored system samples, ordered by (run, rank, device, t_ns), one dict each."""
    return _rows("telemetry_samplechunk", run_id, rank, ("device", "t_ns"))


def values(rows: list[dict[str, Any]], *names: str) -> list[tuple[Any, ...]]:
    """The rows as tuples of `names`, in their order."""
    return [tuple(row[name] for name in names) for row in rows]

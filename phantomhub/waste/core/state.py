"""The accumulator's state in a compact form: a small JSON header and binary per-rank arrays.

A 1,024-rank run's state as JSON was one ~1.4 MB document, parsed and rewritten whole by every
incremental analysis (per-rank dicts, the straggler tails, the chart windows as text). Here it is
three parts, each rewritten only when it changed:

- ``header``: the run-wide scalars and per-host sample sums (JSON; small);
- ``ranks``: one row per rank in fixed-width int64/float64 matrices, the straggler tails
  concatenated with their lengths, the piece sums as one (ranks, pieces, 6) array (step categories, rework): the
  accumulator's rank table (``RankTable``) as it is, in rank order;
- ``windows``: the chart sums as float64 arrays.

Arrays are stored raw (``ndarray.tobytes``), so they round-trip bit for bit: integers exactly,
floats without a decimal detour. Pure numpy and orjson, no framework imports.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from phantomhub.waste.core.accumulator import (
    _SUM_KEYS,
    PENDING_INT,
    PIECE_COLUMNS,
    STATE_VERSION,
    HostSamples,
    NotAppendable,
    RunAccumulator,
)
from phantomhub.waste.core.inputs import RunConfig
from phantomhub.waste.core.windows import WindowSums

_MAGIC = b"PHS1"
_SCALARS = ("rank", "first_s", "last_e", "max_t_start", "horizon", "mem_peak_max", "mem_reserved_max",
            "mem_allocated_max", "columns", "pending", "tail_len", "straggler")  # fmt: skip
_COUNTERS = ("aligned_steps", "slow_steps", "blamed_steps", "caused_wait_ns", "waited_ns", "excess2_ns")
INT_COLUMNS: tuple[str, ...] = (*_SCALARS, *(f"p_{k}" for k in PENDING_INT), *_SUM_KEYS, *(f"s_{k}" for k in _COUNTERS))
_I = {name: i for i, name in enumerate(INT_COLUMNS)}
FLOAT_COLUMNS = ("flops", "frag_sum", "p_flops")


def arrays_pack(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Named arrays as one byte string: a JSON directory (name, dtype, shape), then the buffers."""
    directory = [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()]
    head = orjson.dumps(directory)
    return b"".join([_MAGIC, struct.pack("<I", len(head)), head, *(np.ascontiguousarray(a).tobytes() for a in arrays.values())])


def arrays_unpack(data: bytes) -> dict[str, np.ndarray]:
    if data[:4] != _MAGIC:
        raise NotAppendable("state in an unknown format")
    (size,) = struct.unpack_from("<I", data, 4)
    pos = 8 + size
    out: dict[str, np.ndarray] = {}
    for name, dtype, shape in orjson.loads(data[8:pos]):
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        out[name] = np.frombuffer(data, dtype=dt, count=n, offset=pos).reshape(shape)
        pos += n * dt.itemsize
    return out


@dataclass
class StateParts:
    header: dict[str, Any]
    ranks: dict[str, np.ndarray]
    windows: dict[str, np.ndarray]


def state_pack(acc: RunAccumulator, *, ranks: bool = True) -> StateParts:
    """The accumulator's parts; ``ranks=False`` leaves the rank arrays out (unchanged ones)."""
    header = {
        "version": STATE_VERSION,
        "config": acc.config.fingerprint(),
        "watermark": acc.watermark,
        "max_t_seen": acc.max_t_seen,
        "window_level": acc.windows.level,
        "hosts": {k: v.to_json() for k, v in acc.hosts.items()},
    }
    windows = {"sums": acc.windows.sums, "peak": acc.windows.peak, "dur_hist": acc.windows.dur_hist}
    return StateParts(header, _ranks_pack(acc) if ranks else {}, windows)


def _ranks_pack(acc: RunAccumulator) -> dict[str, np.ndarray]:
    """The rank table's columns, rows in rank order, as the matrices of the stored format."""
    table = acc.table
    t = table.take(np.argsort(table.rank, kind="stable"))
    n = len(t)
    # The run's tail, stored rank by rank (each rank's rows in their order) with its length per rank.
    tail_rank, tail_step, tail_arrival, tail_comm = acc.tail.by_rank()
    tail_len = np.zeros(n, dtype=np.int64)
    if len(tail_rank):
        at = np.searchsorted(t.rank, tail_rank)
        if (at >= n).any() or (t.rank[np.minimum(at, n - 1)] != tail_rank).any():
            raise ValueError("tail rows of unknown ranks")
        tail_len = np.bincount(at, minlength=n).astype(np.int64)
    waiting = t.has_pending[:, None]
    scalars = {
        "rank": t.rank, "first_s": t.first_s, "last_e": t.last_e, "max_t_start": t.max_t_start, "horizon": t.horizon,
        "mem_peak_max": t.mem[:, 0], "mem_reserved_max": t.mem[:, 1], "mem_allocated_max": t.mem[:, 2],
        "columns": t.columns, "pending": t.has_pending, "tail_len": tail_len, "straggler": t.has_counters,
    }  # fmt: skip
    ints = np.empty((n, len(INT_COLUMNS)), dtype=np.int64)
    for i, name in enumerate(_SCALARS):
        ints[:, i] = scalars[name]
    p_at, sum_at, s_at = _I[f"p_{PENDING_INT[0]}"], _I[_SUM_KEYS[0]], _I[f"s_{_COUNTERS[0]}"]
    pending = np.stack([t.pending[k] for k in PENDING_INT], axis=1) if n else np.zeros((0, len(PENDING_INT)), dtype=np.int64)
    ints[:, p_at : p_at + len(PENDING_INT)] = np.where(waiting, pending, 0)
    ints[:, sum_at : sum_at + len(_SUM_KEYS)] = t.sums
    ints[:, s_at : s_at + len(_COUNTERS)] = np.where(t.has_counters[:, None], t.counters, 0)
    floats = np.stack([t.flops, t.frag_sum, np.where(t.has_pending, t.pending["flops"], np.nan)], axis=1)
    hosts: dict[str, int] = {}
    host_idx = [hosts.setdefault(h, len(hosts)) for h in t.host]
    names = np.frombuffer(orjson.dumps(list(hosts)), dtype=np.uint8)
    return {"ints": ints, "floats": floats.reshape(n, len(FLOAT_COLUMNS)), "pieces": t.piece_ns,
            "host": np.array(host_idx, dtype=np.int64), "host_names": names, "tail_step": tail_step,
            "tail_arrival": tail_arrival, "tail_comm": tail_comm}  # fmt: skip


def state_unpack(parts: StateParts) -> RunAccumulator:
    header = parts.header
    if header.get("version") != STATE_VERSION:
        raise NotAppendable("state written by another version of the waste model")
    acc = RunAccumulator(RunConfig.from_fingerprint(header["config"]))
    r = parts.ranks
    ints, floats, pieces = r["ints"], r["floats"], r["pieces"]
    if pieces.shape[1:] != (len(acc.ctx.pieces), PIECE_COLUMNS) or ints.shape[1:] != (len(INT_COLUMNS),):
        raise NotAppendable("state shaped for another configuration")
    names = orjson.loads(r["host_names"].tobytes())
    table = acc.table
    n = len(ints)
    # Copies: the stored arrays are read-only buffers, the table's columns are written in place.
    table.rank = ints[:, _I["rank"]].copy()
    table.row = {rank: i for i, rank in enumerate(table.rank.tolist())}
    table.host = [names[i] for i in r["host"].tolist()]
    for name in ("columns", "first_s", "last_e", "max_t_start", "horizon"):
        setattr(table, name, ints[:, _I[name]].copy())
    table.mem = ints[:, [_I["mem_peak_max"], _I["mem_reserved_max"], _I["mem_allocated_max"]]]
    table.has_pending = ints[:, _I["pending"]] != 0
    table.pending = {k: ints[:, _I[f"p_{k}"]].copy() for k in PENDING_INT}
    table.pending["flops"] = floats[:, 2].copy()
    sum_at, s_at = _I[_SUM_KEYS[0]], _I[f"s_{_COUNTERS[0]}"]
    table.sums = ints[:, sum_at : sum_at + len(_SUM_KEYS)].copy()
    table.counters = ints[:, s_at : s_at + len(_COUNTERS)].copy()
    table.has_counters = ints[:, _I["straggler"]] != 0
    table.flops, table.frag_sum = floats[:, 0].copy(), floats[:, 1].copy()
    table.piece_ns = pieces.copy()
    tail_len = ints[:, _I["tail_len"]]
    if n and tail_len.sum():
        acc.tail.add(np.repeat(table.rank, tail_len), r["tail_step"].copy(), r["tail_arrival"].copy(), r["tail_comm"].copy())
    w = parts.windows
    acc.windows = WindowSums(int(header["window_level"]), w["sums"].copy(), w["peak"].copy(), w["dur_hist"].copy())
    acc.watermark = header["watermark"]
    acc.max_t_seen = header["max_t_seen"]
    acc.hosts = {k: HostSamples.from_json(v) for k, v in header["hosts"].items()}
    return acc

"""The accumulator's state in a compact form: a small JSON header and binary per-rank arrays.

A 1,024-rank run's state as JSON was one ~1.4 MB document, parsed and rewritten whole by every
incremental analysis (per-rank dicts, the straggler tails, the chart windows as text). Here it is
three parts, each rewritten only when it changed:

- ``header``: the run-wide scalars and per-host sample sums (JSON; small);
- ``ranks``: one row per rank in fixed-width int64/float64 matrices, the straggler tails
  concatenated with their lengths, the piece sums as one (ranks, pieces, 5) array;
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

from phantomhub.waste.accumulator import _SUM_KEYS, STATE_VERSION, HostSamples, NotAppendable, RankState, RunAccumulator
from phantomhub.waste.inputs import OPTIONAL_COLUMNS, OPTIONAL_INT_COLUMNS, RunConfig
from phantomhub.waste.stragglers import StragglerCounters
from phantomhub.waste.windows import WindowSums

_MAGIC = b"PHS1"
NONE = np.iinfo(np.int64).min  # stands for None in the int matrices (no real value is this low)
_PENDING_INT = ("step", "t_start_ns", "dur_ns", *OPTIONAL_INT_COLUMNS)
_SCALARS = ("rank", "first_s", "last_e", "max_t_start", "horizon", "mem_peak_max", "mem_reserved_max",
            "mem_allocated_max", "columns", "pending", "tail_len", "straggler")  # fmt: skip
_COUNTERS = ("aligned_steps", "slow_steps", "blamed_steps", "caused_wait_ns", "waited_ns", "excess2_ns")
INT_COLUMNS: tuple[str, ...] = (*_SCALARS, *(f"p_{k}" for k in _PENDING_INT), *_SUM_KEYS, *(f"s_{k}" for k in _COUNTERS))
_I = {name: i for i, name in enumerate(INT_COLUMNS)}
FLOAT_COLUMNS = ("flops", "frag_sum", "p_flops")
_COLUMN_BIT = {name: 1 << i for i, name in enumerate(OPTIONAL_COLUMNS)}


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


def _opt(value: int | None) -> int:
    return NONE if value is None else value


def _back(value: int) -> int | None:
    return None if value == NONE else value


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
    ranks = sorted(acc.ranks.values(), key=lambda r: r.rank)
    n_pieces = len(acc.ctx.pieces)
    hosts: dict[str, int] = {}
    int_rows: list[list[int]] = []
    float_rows: list[tuple[float, float, float]] = []
    # The run's tail, stored rank by rank (each rank's rows in their order) with its length per rank.
    tail_rank, tail_step, tail_arrival, tail_comm = acc.tail.by_rank()
    tail_len = dict.fromkeys([rs.rank for rs in ranks], 0)
    if len(tail_rank):
        who, n = np.unique(tail_rank, return_counts=True)
        tail_len.update(zip(who.tolist(), n.tolist(), strict=True))
        if len(tail_len) > len(ranks):
            raise ValueError(f"tail rows of unknown ranks {sorted(set(tail_len) - set(acc.ranks))}")
    no_pending = [0] * len(_PENDING_INT)
    no_counters = [0] * len(_COUNTERS)
    host_idx: list[int] = []
    bits_of: dict[frozenset[str], int] = {}  # ranks mostly carry the same columns
    for rs in ranks:
        counters = acc.stragglers.get(rs.rank)
        pending = rs.pending
        flops = np.nan if pending is None or pending["flops"] is None else pending["flops"]
        columns = frozenset(rs.columns)
        bits = bits_of.get(columns)
        if bits is None:
            bits = bits_of[columns] = sum(_COLUMN_BIT[c] for c in columns)
        int_rows.append(
            [
                rs.rank, _opt(rs.first_s), _opt(rs.last_e), _opt(rs.max_t_start), _opt(rs.horizon), rs.mem_peak_max,
                rs.mem_reserved_max, rs.mem_allocated_max, bits, pending is not None, tail_len[rs.rank], counters is not None,
                *(no_pending if pending is None else map(pending.__getitem__, _PENDING_INT)),
                *map(rs.sums.__getitem__, _SUM_KEYS),
                *(no_counters if counters is None else counters.to_json()),
            ]
        )  # fmt: skip
        float_rows.append((rs.flops, rs.frag_sum, flops))
        host_idx.append(hosts.setdefault(rs.host, len(hosts)))
    # Straggler counters of ranks without a RankState cannot exist (attribute() counts known ranks).
    extra = sorted(set(acc.stragglers) - set(acc.ranks))
    if extra:
        raise ValueError(f"straggler counters for unknown ranks {extra}")
    ints = np.array(int_rows, dtype=np.int64).reshape(len(ranks), len(INT_COLUMNS))
    floats = np.array(float_rows, dtype=np.float64).reshape(len(ranks), len(FLOAT_COLUMNS))
    pieces = np.stack([rs.piece_ns for rs in ranks]) if ranks else np.zeros((0, n_pieces, 5), dtype=np.int64)

    names = np.frombuffer(orjson.dumps(list(hosts)), dtype=np.uint8)
    return {"ints": ints, "floats": floats, "pieces": pieces, "host": np.array(host_idx, dtype=np.int64),
            "host_names": names, "tail_step": tail_step, "tail_arrival": tail_arrival, "tail_comm": tail_comm}  # fmt: skip


def state_unpack(parts: StateParts) -> RunAccumulator:
    header = parts.header
    if header.get("version") != STATE_VERSION:
        raise NotAppendable("state written by another version of the waste model")
    acc = RunAccumulator(RunConfig.from_fingerprint(header["config"]))
    r = parts.ranks
    ints, floats, pieces = r["ints"], r["floats"], r["pieces"]
    if pieces.shape[1:] != (len(acc.ctx.pieces), 5) or ints.shape[1:] != (len(INT_COLUMNS),):
        raise NotAppendable("state shaped for another configuration")
    names = orjson.loads(r["host_names"].tobytes())
    tail_len = ints[:, _I["tail_len"]]
    if tail_len.sum():  # the stored arrays are read-only buffers: the tail's own copies
        tail_rank = np.repeat(ints[:, _I["rank"]], tail_len)
        acc.tail.add(tail_rank, r["tail_step"].copy(), r["tail_arrival"].copy(), r["tail_comm"].copy())
    pieces = pieces.copy()  # one copy; every rank gets a view of its rows
    sum_at, n_scalar = _I[_SUM_KEYS[0]], len(_SCALARS)
    p_end, s_end = n_scalar + len(_PENDING_INT), sum_at + len(_SUM_KEYS)
    rows = ints.tolist()
    frows = floats.tolist()
    hosts = r["host"].tolist()
    bits = list(_COLUMN_BIT.items())
    columns_of: dict[int, frozenset[str]] = {}  # ranks mostly carry the same columns
    for i, row in enumerate(rows):
        mask = row[8]
        named = columns_of.get(mask)
        if named is None:
            named = columns_of[mask] = frozenset(c for c, bit in bits if mask & bit)
        rank = row[0]
        pending: dict[str, Any] | None = None
        if row[9]:
            pending = dict(zip(_PENDING_INT, row[n_scalar:p_end], strict=True))
            flops = frows[i][2]
            pending["flops"] = None if flops != flops else flops  # NaN: FLOPs not counted
        rs = RankState.__new__(RankState)  # every field set here (cheaper than the dataclass's defaults)
        rs.__dict__.update(
            rank=rank,
            host=names[hosts[i]],
            columns=set(named),
            pending=pending,
            first_s=_back(row[1]),
            last_e=_back(row[2]),
            max_t_start=_back(row[3]),
            horizon=_back(row[4]),
            piece_ns=pieces[i],
            sums=dict(zip(_SUM_KEYS, row[sum_at:s_end], strict=True)),
            flops=frows[i][0],
            frag_sum=frows[i][1],
            mem_peak_max=row[5],
            mem_reserved_max=row[6],
            mem_allocated_max=row[7],
        )
        if row[11]:
            acc.stragglers[rank] = StragglerCounters(*row[s_end:])
        acc.ranks[rank] = rs
    w = parts.windows
    acc.windows = WindowSums(int(header["window_level"]), w["sums"].copy(), w["peak"].copy(), w["dur_hist"].copy())
    acc.watermark = header["watermark"]
    acc.max_t_seen = header["max_t_seen"]
    acc.hosts = {k: HostSamples.from_json(v) for k, v in header["hosts"].items()}
    return acc

"""Mergeable, JSON-serialisable accumulator: the waste model's state for one run.

``analyze`` is nothing but "one accumulator, every row added once, then finalised", so a live run
that appends batches as they arrive goes through the same code as a from-scratch analysis. Every
figure that decides a category or a cent is accumulated as an integer (nanoseconds, counts), so
incremental and from-scratch results agree exactly; float aggregates (FLOPs, GPU-util means) agree
to rounding (~1e-15 relative), because float addition depends on the order of the batches.

Appending is only possible forward in time: each rank's rows must start after its last row, and a
step number must not be at or below the straggler watermark (steps already aligned across ranks).
Anything else (a replayed spool from the past, a rank that shows up late) raises
``NotAppendable``; the caller then analyses the run from scratch.
"""

from __future__ import annotations

import copy
import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phantomhub.waste.inputs import (
    MODEL_VERSION,
    OPTIONAL_INT_COLUMNS,
    FloatArray,
    IntArray,
    RunConfig,
    StepColumns,
    SystemSamples,
)
from phantomhub.waste.steps import StepBlock, StepContext, piece_totals, process_rows
from phantomhub.waste.stragglers import RunTail, StragglerCounters, attribute
from phantomhub.waste.timeline import NS_MAX, Coverage, PricePieces
from phantomhub.waste.windows import WindowSums

STATE_VERSION = MODEL_VERSION  # a state from another version raises NotAppendable
# Rows held for cross-rank alignment before aligning with the ranks seen so far anyway (bounds
# the state of a run whose world_size counts ranks that never report).
TAIL_ALIGN_LIMIT = 262_144
# Rows attributed in one vectorised pass (several ranks' batches together, see _attribute_many).
GROUP_ROWS = 32_768
MEM_COLUMNS = ("mem_allocated", "mem_reserved", "mem_peak")
_SUM_KEYS = (
    "rows",
    "live_steps",
    "nonphase_ns",
    "useful_ns",
    "inefficiency_ns",
    "data_ns",
    "comm_ns",
    "host_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "tokens",
    "samples",
    "alloc_retries",
    "flops_steps",
    "overrun_steps",
    "clipped_steps",
    "over_peak_steps",
    "zero_flops_steps",
    "mem_rows",
    "frag_rows",
)


class NotAppendable(ValueError):
    """The new data cannot be appended to this state; analyse the run from scratch."""


@dataclass
class RankState:
    rank: int
    host: str
    columns: set[str] = field(default_factory=set)
    pending: dict[str, Any] | None = None  # the last row: its end depends on the next row
    first_s: int | None = None  # start of the first step with billed time
    last_e: int | None = None  # end of the last step with billed time
    max_t_start: int | None = None
    horizon: int | None = None  # latest end of any attributed row
    # (price pieces, 5) step-category nanoseconds; rows follow RunAccumulator.ctx.pieces.
    piece_ns: IntArray = field(default_factory=lambda: np.zeros((0, 5), dtype=np.int64))
    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_SUM_KEYS, 0))
    flops: float = 0.0
    frag_sum: float = 0.0
    mem_peak_max: int = -1
    mem_reserved_max: int = -1
    mem_allocated_max: int = -1

    def to_json(self, tail: tuple[IntArray, IntArray, IntArray]) -> dict[str, Any]:
        """``tail``: this rank's rows waiting for alignment (step, arrival, comm; RunTail)."""
        step, arrival, comm = tail
        return {
            "rank": self.rank,
            "host": self.host,
            "columns": sorted(self.columns),
            "pending": self.pending,
            "first_s": self.first_s,
            "last_e": self.last_e,
            "max_t_start": self.max_t_start,
            "horizon": self.horizon,
            # Sparse: [piece index, five category sums] for the pieces this rank touched.
            "piece_ns": [[i, *self.piece_ns[i].tolist()] for i in np.flatnonzero(self.piece_ns.any(axis=1)).tolist()],
            "sums": self.sums,
            "flops": self.flops,
            "frag_sum": self.frag_sum,
            "mem_max": [self.mem_peak_max, self.mem_reserved_max, self.mem_allocated_max],
            "tail": [step.tolist(), arrival.tolist(), comm.tolist()],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], n_pieces: int) -> RankState:
        """The rank's state; its ``d["tail"]`` is the caller's to add to the run's tail."""
        rs = cls(rank=int(d["rank"]), host=str(d["host"]), columns=set(d["columns"]))
        rs.piece_ns = np.zeros((n_pieces, 5), dtype=np.int64)
        for i, *row in d["piece_ns"]:
            rs.piece_ns[int(i)] = row
        rs.pending = d["pending"]
        rs.first_s, rs.last_e = d["first_s"], d["last_e"]
        rs.max_t_start, rs.horizon = d["max_t_start"], d["horizon"]
        rs.sums = {k: int(v) for k, v in d["sums"].items()}
        rs.flops, rs.frag_sum = float(d["flops"]), float(d["frag_sum"])
        rs.mem_peak_max, rs.mem_reserved_max, rs.mem_allocated_max = (int(x) for x in d["mem_max"])
        return rs


@dataclass(frozen=True)
class RankTotals:
    """Totals over a list of ranks, each summed once in rank-list order (the same ints and floats
    as one ``sum(rs.sums[key] for rs in ranks)`` per figure, which a 1,024-rank run's finalisation
    used to run some twenty times over every rank)."""

    sums: dict[str, int]
    flops: float
    frag_sum: float
    columns: frozenset[str]  # carried by at least one rank
    common: frozenset[str]  # carried by every rank

    @classmethod
    def of(cls, ranks: Sequence[RankState]) -> RankTotals:
        rows = [rs.sums for rs in ranks]
        sums = {key: sum(map(operator.itemgetter(key), rows)) for key in _SUM_KEYS}
        carried = [rs.columns for rs in ranks]
        columns = frozenset().union(*carried)
        common = frozenset(columns.intersection(*carried)) if carried else frozenset()
        return cls(sums, sum([rs.flops for rs in ranks]), sum([rs.frag_sum for rs in ranks]), columns, common)


@dataclass
class HostSamples:
    """Per-host CPU contention sums; histograms in 1% bins make percentiles mergeable."""

    other_n: int = 0
    other_sum: float = 0.0
    other_hist: list[int] = field(default_factory=lambda: [0] * 101)
    steal_n: int = 0
    steal_sum: float = 0.0
    steal_hist: list[int] = field(default_factory=lambda: [0] * 101)
    gpu_util_n: int = 0
    gpu_util_sum: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HostSamples:
        return cls(**d)


def _filled(cols: StepColumns) -> dict[str, Any]:
    """All columns present: unmeasured stages/counters are 0, memory -1, FLOPs NaN."""
    n = len(cols)
    out: dict[str, Any] = {
        "step": cols.step,
        "t_start_ns": cols.t_start_ns,
        "dur_ns": cols.dur_ns,
    }
    for name in OPTIONAL_INT_COLUMNS:
        arr = getattr(cols, name)
        fill = -1 if name in MEM_COLUMNS else 0
        out[name] = np.full(n, fill, dtype=np.int64) if arr is None else arr
    out["flops"] = np.full(n, np.nan) if cols.flops is None else cols.flops
    return out


def _filled_many(batches: Sequence[StepColumns]) -> dict[str, Any]:
    """``_filled`` of several batches, concatenated column by column."""
    out: dict[str, Any] = {name: np.concatenate([getattr(b, name) for b in batches]) for name in ("step", "t_start_ns", "dur_ns")}
    for name in (*OPTIONAL_INT_COLUMNS, "flops"):
        parts = [getattr(b, name) for b in batches]
        fill = np.nan if name == "flops" else (-1 if name in MEM_COLUMNS else 0)
        dtype = np.float64 if name == "flops" else np.int64
        if all(p is None for p in parts):
            out[name] = np.full(len(out["step"]), fill, dtype=dtype)
            continue
        if any(p is None for p in parts):
            parts = [np.full(len(b), fill, dtype=dtype) if p is None else p for p, b in zip(parts, batches, strict=True)]
        out[name] = np.concatenate(parts)
    return out


class StepBatches(list[StepColumns]):
    """Batches of different ranks whose columns are slices, in order, of one set of columns with
    every column present (``filled``: what ``_filled_many`` of them gives, as the analysis reads
    them from the database), each batch with at least one row. ``add_steps_many`` works on
    ``filled`` and ``lengths`` as they are instead of concatenating and counting the batches again."""

    def __init__(self, batches: Sequence[StepColumns], filled: dict[str, Any], lengths: IntArray) -> None:
        super().__init__(batches)
        self.filled = filled
        self.lengths = lengths  # rows per batch, every one > 0


def _json_scalar(value: Any) -> int | float | None:
    item = value.item()
    if isinstance(item, float) and not np.isfinite(item):
        return None  # JSON has no NaN: an uncounted FLOPs value is stored as null
    scalar: int | float | None = item
    return scalar


def _pending_arrays(row: Mapping[str, Any]) -> dict[str, Any]:
    """The pending row as one-element columns, null FLOPs back to NaN."""
    return {
        k: (np.array([np.nan if v is None else v], dtype=np.float64) if k == "flops" else np.array([v], dtype=np.int64))
        for k, v in row.items()
    }


class RunAccumulator:
    """Accumulates one run's steps and samples; ``analysis()`` turns it into an Analysis."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        start = config.allocation_start_ns
        coverage = Coverage.from_phases(config.phases, start)
        pieces = PricePieces.from_segments(config.price_segments, start)
        peak_rank = None if config.peak_flops_per_gpu is None else config.peak_flops_per_gpu * config.gpus_per_rank
        self.ctx = StepContext(start, coverage, pieces, config.target_mfu, peak_rank)
        self.ranks: dict[int, RankState] = {}
        self.windows = WindowSums.empty()
        self.watermark: int | None = None
        self.stragglers: dict[int, StragglerCounters] = {}
        self.tail = RunTail()  # every rank's rows not yet aligned across ranks
        self.hosts: dict[str, HostSamples] = {}
        self.max_t_seen: int | None = None

    # -- appending -------------------------------------------------------------------------

    def add_steps(self, cols: StepColumns, *, align: bool = True) -> None:
        """Append one batch of one rank's rows (later than anything seen for that rank).

        ``align=False`` defers cross-rank straggler alignment to the end (a from-scratch analysis
        adds whole ranks one after another, and must not align before all have arrived).
        """
        self.add_steps_many([cols], align=align)

    def add_steps_many(self, batches: Sequence[StepColumns], *, align: bool = True) -> None:
        """Append batches of different ranks at once: the same result as one ``add_steps`` per
        batch, with the per-row work done in one vectorised pass over all of them (a 1,024-rank
        run's batch of one step per rank costs one pass, not 1,024). After ``NotAppendable``
        the accumulator is not to be used further (analyse from scratch, as callers do)."""
        known: StepBatches | None = batches if isinstance(batches, StepBatches) else None
        batches = list(batches) if known is not None else [cols for cols in batches if len(cols)]
        ranks = [cols.rank for cols in batches]
        if len(set(ranks)) != len(ranks):
            twice = next(r for i, r in enumerate(ranks) if r in ranks[:i])
            raise ValueError(f"rank {twice}: one batch per rank per call")
        if len(batches) > 1:
            total = int(known.lengths.sum()) if known is not None else sum(len(cols) for cols in batches)
            chunks: list[list[StepColumns]] = [batches]  # fewer rows than a chunk: the usual pass
            if total >= GROUP_ROWS:
                # In chunks of about GROUP_ROWS rows to attribute (the groups _attribute_rows
                # would make anyway): a from-scratch run's millions of rows are never all
                # copied at once.
                chunks = [[]]
                rows = 0
                for cols in batches:
                    if rows >= GROUP_ROWS:
                        chunks.append([])
                        rows = 0
                    chunks[-1].append(cols)
                    rs = self.ranks.get(cols.rank)
                    rows += len(cols) - (0 if rs is not None and rs.pending is not None else 1)
            for chunk in chunks:
                self._add_concatenated(chunk, known if len(chunks) == 1 else None)
        elif batches:
            item = self._prepare(batches[0])
            if item is not None:
                self._attribute_many([item])
        if align:
            self._align(final=False)

    def _add_concatenated(self, batches: list[StepColumns], known: StepBatches | None = None) -> None:
        """Several ranks' batches in one vectorised pass: the checks, the pending rows and the
        rows to attribute are computed on all rows at once (what ``_prepare`` does per batch).
        ``known``: the same batches, already concatenated and counted (``StepBatches``)."""
        filled = known.filled if known is not None else None
        lengths = known.lengths if known is not None else np.array([len(b) for b in batches], dtype=np.int64)
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        first = bounds[:-1]
        t = filled["t_start_ns"] if filled is not None else np.concatenate([b.t_start_ns for b in batches])
        inner = np.ones(len(t), dtype=bool)
        inner[first] = False  # row i is compared with row i-1 of the same batch
        if (np.diff(t, prepend=t[0]) < 0)[inner].any():  # some batch out of start order: sort those
            batches = [b.take(np.argsort(b.t_start_ns, kind="stable")) for b in batches]
            t = np.concatenate([b.t_start_ns for b in batches])
            filled = None
        if filled is None:
            filled = _filled_many(batches)
        step = filled["step"]
        bad = np.zeros(len(batches), dtype=bool)
        rising = np.diff(step, prepend=step[0]) > 0
        bad |= np.logical_or.reduceat(~rising & inner, first)
        if self.watermark is not None:
            bad |= step[first] <= self.watermark
        states = [self.ranks.get(b.rank) for b in batches]
        has_pending = np.array([rs is not None and rs.pending is not None for rs in states], dtype=bool)
        if has_pending.any():
            idx = np.flatnonzero(has_pending)
            p_t = np.array([states[i].pending["t_start_ns"] for i in idx], dtype=np.int64)  # type: ignore[union-attr,index]
            p_step = np.array([states[i].pending["step"] for i in idx], dtype=np.int64)  # type: ignore[union-attr,index]
            bad[idx] |= (t[first[idx]] <= p_t) | (step[first[idx]] <= p_step)
        if bad.any():  # the first offending batch, with the message the one-batch path gives
            self._prepare(batches[int(np.flatnonzero(bad)[0])])
            raise NotAppendable("rows cannot be appended")  # pragma: no cover (_prepare raised)
        for i, b in enumerate(batches):
            rs = states[i]
            if rs is None:
                rs = states[i] = self.ranks[b.rank] = RankState(rank=b.rank, host=b.host)
                rs.piece_ns = np.zeros((len(self.ctx.pieces), 5), dtype=np.int64)
            rs.host = b.host
            rs.columns.update(b.present())
        # Each rank's rows to attribute: its pending row, then all but its last new row; the
        # last new row becomes pending (its end depends on the next row).
        n_pending = has_pending.astype(np.int64)
        comb_len = lengths + n_pending
        comb_bounds = np.concatenate(([0], np.cumsum(comb_len)))
        new_at = np.repeat(comb_bounds[:-1] + n_pending - first, lengths) + np.arange(len(t))
        comb: dict[str, Any] = {} if has_pending.any() else filled  # no pending rows: nothing to insert
        p_idx = np.flatnonzero(has_pending)
        for k, v in filled.items() if has_pending.any() else ():
            out = np.empty(int(comb_bounds[-1]), dtype=v.dtype)
            out[new_at] = v
            if len(p_idx):
                pending = [states[i].pending[k] for i in p_idx.tolist()]  # type: ignore[union-attr,index]
                out[comb_bounds[p_idx]] = (
                    np.array([np.nan if x is None else x for x in pending], dtype=np.float64) if k == "flops" else pending
                )
            comb[k] = out
        ends = comb_bounds[1:] - 1
        keys = list(comb)
        columns = [v[ends].tolist() for v in comb.values()]
        flops_at = keys.index("flops")
        columns[flops_at] = [x if math.isfinite(x) else None for x in columns[flops_at]]  # JSON has no NaN
        for rs, row in zip(states, zip(*columns, strict=True), strict=True):
            rs.pending = dict(zip(keys, row, strict=True))  # type: ignore[union-attr]
        take = np.ones(len(comb["step"]), dtype=bool)
        take[ends] = False
        next_start = comb["t_start_ns"][1:][take[:-1]]
        attributed = comb_len - 1
        some = attributed > 0
        if not some.any():
            return
        rows = {k: v[take] for k, v in comb.items()}
        self._attribute_rows(
            [rs for rs, ok in zip(states, some.tolist(), strict=True) if ok],  # type: ignore[misc]
            attributed[some],
            rows,
            next_start,
        )

    def _prepare(self, cols: StepColumns) -> tuple[RankState, dict[str, Any], IntArray] | None:
        """Check one rank's batch, keep its last row pending; the rows to attribute now."""
        rs = self.ranks.get(cols.rank)
        order = np.argsort(cols.t_start_ns, kind="stable")
        if np.any(order != np.arange(len(order))):
            cols = cols.take(order)
        if np.any(np.diff(cols.step) <= 0):
            raise NotAppendable(f"rank {cols.rank}: step numbers must rise with start time")
        if self.watermark is not None and int(cols.step.min()) <= self.watermark:
            raise NotAppendable(
                f"rank {cols.rank}: step {int(cols.step.min())} is at or below the aligned watermark {self.watermark}"
            )
        if rs is None:
            rs = self.ranks[cols.rank] = RankState(rank=cols.rank, host=cols.host)
            rs.piece_ns = np.zeros((len(self.ctx.pieces), 5), dtype=np.int64)
        elif rs.pending is not None and (
            int(cols.t_start_ns[0]) <= rs.pending["t_start_ns"] or int(cols.step[0]) <= rs.pending["step"]
        ):
            raise NotAppendable(f"rank {cols.rank}: rows overlap or precede earlier rows")
        rs.host = cols.host
        rs.columns.update(cols.present())
        filled = _filled(cols)
        if rs.pending is not None:
            head_row = _pending_arrays(rs.pending)
            filled = {k: np.concatenate((head_row[k], v)) for k, v in filled.items()}
        last = len(filled["step"]) - 1
        rs.pending = {k: _json_scalar(v[last]) for k, v in filled.items()}
        if last == 0:
            return None
        return rs, {k: v[:last] for k, v in filled.items()}, filled["t_start_ns"][1:]

    def add_samples(self, samples: SystemSamples) -> None:
        """Append system samples of one host (any order; they are sums and histograms)."""
        self.add_samples_many([samples])

    def add_samples_many(self, batches: Sequence[SystemSamples]) -> None:
        """Append batches of system samples of any hosts at once: the counts and histograms of
        one ``add_samples`` per batch, exactly, and their sums (per host and per chart window,
        summed in another order: equal to float rounding), in one vectorised pass over all rows
        instead of a dozen array operations per batch (a live 8-rank run's pass brings 16
        batches: a GPU and a host series per rank)."""
        if not batches:
            return
        start = self.config.allocation_start_ns
        t = np.concatenate([b.t_ns for b in batches]) if len(batches) > 1 else batches[0].t_ns
        keep = t >= start
        if not keep.any():
            return
        self.max_t_seen = max(int(t[keep].max()), self.max_t_seen or start)
        codes: dict[str, int] = {}
        for b in batches:
            codes.setdefault(b.host, len(codes))
        code = np.repeat(np.array([codes[b.host] for b in batches], dtype=np.int64), [len(b.t_ns) for b in batches])
        names = list(codes)
        # A host gets its entry when any of its samples is kept, in the order they come.
        kept_codes, first = np.unique(code[keep], return_index=True)
        for c in kept_codes[np.argsort(first)].tolist():
            self.hosts.setdefault(names[c], HostSamples())
        n_hosts = len(names)

        def column(name: str) -> FloatArray | None:
            """The batches' column, NaN (not counted) in the rows of batches without it."""
            if all(getattr(b, name) is None for b in batches):
                return None
            parts = [getattr(b, name) for b in batches]
            return np.concatenate([np.full(len(b.t_ns), np.nan) if v is None else v for b, v in zip(batches, parts, strict=True)])

        def per_host(values: FloatArray) -> tuple[Any, list[int], list[float], IntArray]:
            ok = keep & np.isfinite(values)
            c, v = code[ok], values[ok]
            counts = np.bincount(c, minlength=n_hosts)
            sums = np.bincount(c, weights=v, minlength=n_hosts)
            return ok, counts.tolist(), sums.tolist(), c

        for name, prefix in (("cpu_other_pct", "other"), ("cpu_steal_pct", "steal")):
            values = column(name)
            if values is None:
                continue
            ok, counts, sums, c = per_host(values)
            bins = np.clip(np.floor(values[ok]), 0, 100).astype(np.int64)
            hists = np.bincount(c * 101 + bins, minlength=n_hosts * 101).reshape(n_hosts, 101)
            for h in np.flatnonzero(counts).tolist():
                hs = self.hosts[names[h]]
                setattr(hs, f"{prefix}_n", getattr(hs, f"{prefix}_n") + counts[h])
                setattr(hs, f"{prefix}_sum", getattr(hs, f"{prefix}_sum") + sums[h])
                old = getattr(hs, f"{prefix}_hist")
                setattr(hs, f"{prefix}_hist", [x + y for x, y in zip(old, hists[h].tolist(), strict=True)])
        util = column("gpu_util_pct")
        if util is not None:
            _, counts, sums, _ = per_host(util)
            for h in np.flatnonzero(counts).tolist():
                hs = self.hosts[names[h]]
                hs.gpu_util_n += counts[h]
                hs.gpu_util_sum += sums[h]
            self.windows.add_gpu_util(t, util, start)

    def _attribute_many(self, items: list[tuple[RankState, dict[str, Any], IntArray]]) -> None:
        """Attribute rows of several ranks (each item one rank's consecutive rows and their
        successors' starts) in one pass; every per-rank total is folded exactly as one rank at a
        time would (integers bit for bit: sums per rank are exact integer reductions)."""
        if not items:
            return
        lengths = np.array([len(n) for _, _, n in items], dtype=np.int64)
        names = items[0][1].keys()
        if len(items) == 1:
            cols, next_start = items[0][1], items[0][2]
        else:
            cols = {k: np.concatenate([c[k] for _, c, _ in items]) for k in names}
            next_start = np.concatenate([n for _, _, n in items])
        self._attribute_rows([rs for rs, _, _ in items], lengths, cols, next_start)

    def _attribute_rows(self, states: list[RankState], lengths: IntArray, cols: dict[str, Any], next_start: IntArray) -> None:
        """Rows of several ranks, concatenated (``lengths[i]`` rows of ``states[i]``, each > 0)."""
        # Groups of about GROUP_ROWS rows: few passes for many small batches, and a big
        # from-scratch run is still worked through in cache-sized pieces.
        cuts = [0]
        rows = 0
        for i, n in enumerate(lengths.tolist()):
            rows += n
            if rows >= GROUP_ROWS:
                cuts.append(i + 1)
                rows = 0
        if cuts[-1] != len(states):
            cuts.append(len(states))
        if len(cuts) == 2:
            self._attribute_group(states, lengths, cols, next_start)
            return
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        for a, b in itertools.pairwise(cuts):
            lo, hi = int(bounds[a]), int(bounds[b])
            self._attribute_group(states[a:b], lengths[a:b], {k: v[lo:hi] for k, v in cols.items()}, next_start[lo:hi])

    def _attribute_group(self, states: list[RankState], lengths: IntArray, cols: dict[str, Any], next_start: IntArray) -> None:
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        block = process_rows(cols, next_start, self.ctx)
        n_pieces = len(self.ctx.pieces)
        slot = np.repeat(np.arange(len(states), dtype=np.int64), lengths)
        idx, sums = piece_totals(block, self.ctx.pieces, self.ctx.coverage, offset=slot * n_pieces)
        stacked = np.concatenate([rs.piece_ns for rs in states]) if len(states) > 1 else states[0].piece_ns
        np.add.at(stacked, idx, sums)
        if len(states) > 1:
            for i, rs in enumerate(states):  # views of the fresh array: each rank writes only its rows
                rs.piece_ns = stacked[i * n_pieces : (i + 1) * n_pieces]
        self._fold_sums_many(states, block, cols, offsets)
        live = block.e_ns > block.s_ns
        first_live = np.minimum.reduceat(np.where(live, block.s_ns, NS_MAX), offsets).tolist()
        last_live = np.maximum.reduceat(np.where(live, block.e_ns, -NS_MAX), offsets).tolist()
        max_start = np.maximum.reduceat(block.t_start_ns, offsets).tolist()
        horizon = np.maximum.reduceat(block.e_ns, offsets).tolist()
        on = block.nonphase_ns > 0
        rank_of = np.repeat(np.array([rs.rank for rs in states], dtype=np.int64), lengths)
        if on.all():
            self.tail.add(rank_of, block.step, block.arrival_ns, block.cats[:, 3])
        else:
            self.tail.add(rank_of[on], block.step[on], block.arrival_ns[on], block.cats[:, 3][on])
        max_seen = self.max_t_seen
        for rs, first, last, start, end in zip(states, first_live, last_live, max_start, horizon, strict=True):
            if first < NS_MAX:
                rs.first_s = first if rs.first_s is None else min(rs.first_s, first)
                rs.last_e = max(last, rs.last_e or first)
            rs.max_t_start = max(start, rs.max_t_start or -NS_MAX)
            rs.horizon = max(end, rs.horizon or -NS_MAX)
            max_seen = max(rs.max_t_start, max_seen or rs.max_t_start)
        self.max_t_seen = max_seen
        self.windows.add_steps(block, cols, self.config.allocation_start_ns, np.arange(len(block.step)))

    @staticmethod
    def _fold_sums_many(states: list[RankState], block: StepBlock, cols: Mapping[str, Any], offsets: IntArray) -> None:
        """Per-rank sums of a multi-rank block: exact integer reductions over each rank's rows."""
        cats = block.cats
        known = np.isfinite(block.flops)
        alloc, reserved, peak = cols["mem_allocated"], cols["mem_reserved"], cols["mem_peak"]
        frag_ok = (alloc >= 0) & (reserved > 0)
        frag = np.where(frag_ok, (1.0 - alloc / np.where(reserved > 0, reserved, 1)).clip(0.0, 1.0), 0.0)
        by_key = {
            "rows": np.ones(len(block.step), dtype=np.int64),
            "live_steps": block.nonphase_ns > 0,
            "nonphase_ns": block.nonphase_ns,
            **{key: cats[:, i] for i, key in enumerate(("useful_ns", "inefficiency_ns", "data_ns", "comm_ns", "host_ns"))},
            "forward_ns": block.forward_ns,
            "backward_ns": block.backward_ns,
            "optimizer_ns": block.optimizer_ns,
            **{key: np.maximum(cols[key], 0) for key in ("tokens", "samples", "alloc_retries")},
            "flops_steps": known,
            "overrun_steps": block.overrun_rows,
            "clipped_steps": block.clipped_rows,
            "over_peak_steps": block.over_peak_rows,
            "zero_flops_steps": block.zero_flops_rows,
            "mem_rows": peak >= 0,
            "frag_rows": frag_ok,
        }
        # One (rows x keys) integer matrix, reduced per rank at once: exact integer sums, one
        # Python list of a rank's additions in _SUM_KEYS order.
        table = np.empty((len(block.step), len(_SUM_KEYS)), dtype=np.int64)
        for j, key in enumerate(_SUM_KEYS):
            table[:, j] = by_key[key]
        added: list[list[int]] = np.add.reduceat(table, offsets, axis=0).tolist()
        flops = np.add.reduceat(np.where(known, block.flops, 0.0), offsets).tolist()
        frag_sum = np.add.reduceat(frag, offsets).tolist()
        peak_max = np.maximum.reduceat(peak, offsets).tolist()
        reserved_max = np.maximum.reduceat(reserved, offsets).tolist()
        alloc_max = np.maximum.reduceat(alloc, offsets).tolist()
        for rs, add, fl, fr, pm, rm, am in zip(states, added, flops, frag_sum, peak_max, reserved_max, alloc_max, strict=True):
            s = rs.sums
            s.update(zip(_SUM_KEYS, map(operator.add, map(s.__getitem__, _SUM_KEYS), add)))
            rs.flops += fl
            rs.frag_sum += fr
            if pm > rs.mem_peak_max:
                rs.mem_peak_max = pm
            if rm > rs.mem_reserved_max:
                rs.mem_reserved_max = rm
            if am > rs.mem_allocated_max:
                rs.mem_allocated_max = am

    def align_known(self) -> None:
        """Align what the live path would have aligned by now (after rows were added with
        ``align=False``): the same counters, and a state without the tail of every row."""
        self._align(final=False)

    def _align(self, *, final: bool) -> None:
        """Fold into the straggler counters every step no known rank can still report."""
        if not self.ranks:
            return
        if final:
            bound = NS_MAX
        else:
            if len(self.ranks) < self.config.world_size and len(self.tail) < TAIL_ALIGN_LIMIT:
                return
            bound = min((rs.pending["step"] - 1) if rs.pending is not None else NS_MAX for rs in self.ranks.values())
        if self.watermark is not None and bound <= self.watermark:
            return
        ranks = sorted(self.ranks)
        rank, step, arrival, comm = self.tail.take_through(bound)
        who = np.searchsorted(np.array(ranks, dtype=np.int64), rank)
        attribute(ranks, who, step, arrival, comm, self.stragglers)
        self.watermark = bound

    # -- finishing -------------------------------------------------------------------------

    def finished(self, end_ns: int, *, in_place: bool = False) -> RunAccumulator:
        """A copy with every pending row attributed up to ``end_ns``; this state is unchanged
        (``in_place``: this state itself, which is then not to be appended to or stored; for a
        caller that has already packed it)."""
        if end_ns < self.config.allocation_start_ns:
            raise ValueError("end_ns is before allocation_start_ns")
        done = self if in_place else self._clone()
        states: list[RankState] = []
        rows: list[dict[str, Any]] = []
        for rs in done.ranks.values():
            past_end = rs.max_t_start is not None and rs.max_t_start >= end_ns
            if past_end or (rs.horizon is not None and rs.horizon > end_ns):
                raise NotAppendable(f"rank {rs.rank}: steps already analysed run past end_ns={end_ns}")
            row, rs.pending = rs.pending, None
            if row is None or row["t_start_ns"] >= end_ns:
                continue
            states.append(rs)
            rows.append(row)
        if rows:
            # Every rank's last row, cut at the end, attributed in one pass (one row per rank).
            cols: dict[str, Any] = {}
            for k in rows[0]:
                values = [row[k] for row in rows]
                if k == "flops":
                    cols[k] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
                else:
                    cols[k] = np.array(values, dtype=np.int64)
            cols["dur_ns"] = np.minimum(cols["dur_ns"], end_ns - cols["t_start_ns"])
            ones = np.ones(len(rows), dtype=np.int64)
            done._attribute_rows(states, ones, cols, np.full(len(rows), NS_MAX, dtype=np.int64))
        done._align(final=True)
        return done

    def _clone(self) -> RunAccumulator:
        """A copy sharing nothing mutable (cheaper than deepcopy: arrays that are only ever
        replaced, never written in place, are shared)."""
        twin = copy.copy(self)
        twin.ranks = {}
        for rank, rs in self.ranks.items():
            c = RankState.__new__(RankState)
            c.__dict__.update(rs.__dict__)
            c.columns = set(rs.columns)
            c.pending = None if rs.pending is None else dict(rs.pending)
            c.piece_ns = rs.piece_ns.copy()
            c.sums = dict(rs.sums)
            twin.ranks[rank] = c
        twin.tail = self.tail.copy()
        twin.windows = self.windows.copy()
        twin.stragglers = {k: StragglerCounters(*v.to_json()) for k, v in self.stragglers.items()}
        twin.hosts = {k: copy.deepcopy(v) for k, v in self.hosts.items()}
        return twin

    # -- persistence -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only (ints, floats, strings, lists, dicts)."""
        return {
            "version": STATE_VERSION,
            "config": self.config.fingerprint(),
            "ranks": [rs.to_json(self._tail_of(rs.rank)) for rs in self.ranks.values()],
            "windows": self.windows.to_json(),
            "watermark": self.watermark,
            "stragglers": {str(k): v.to_json() for k, v in self.stragglers.items()},
            "hosts": {k: v.to_json() for k, v in self.hosts.items()},
            "max_t_seen": self.max_t_seen,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunAccumulator:
        if data.get("version") != STATE_VERSION:
            raise NotAppendable("state written by another version of the waste model")
        acc = cls(RunConfig.from_fingerprint(data["config"]))
        for raw in data["ranks"]:
            rs = RankState.from_json(raw, len(acc.ctx.pieces))
            acc.ranks[rs.rank] = rs
            step, arrival, comm = (np.array(x, dtype=np.int64) for x in raw["tail"])
            acc.tail.add(np.full(len(step), rs.rank, dtype=np.int64), step, arrival, comm)
        acc.windows = WindowSums.from_json(data["windows"])
        acc.watermark = data["watermark"]
        acc.stragglers = {int(k): StragglerCounters.from_json(v) for k, v in data["stragglers"].items()}
        acc.hosts = {k: HostSamples.from_json(v) for k, v in data["hosts"].items()}
        acc.max_t_seen = data["max_t_seen"]
        return acc

    def _tail_of(self, rank: int) -> tuple[IntArray, IntArray, IntArray]:
        ranks, step, arrival, comm = self.tail.arrays()
        mine = ranks == rank
        return step[mine], arrival[mine], comm[mine]

    def matches(self, config: RunConfig) -> bool:
        """True when this state was built under ``config`` (else start a fresh accumulator)."""
        return self.config.fingerprint() == config.fingerprint()

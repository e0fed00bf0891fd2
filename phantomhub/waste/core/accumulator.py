"""Mergeable accumulator: the waste model's state for one run.

``analyze`` is nothing but "one accumulator, every row added once, then finalised", so a live run
that appends batches as they arrive goes through the same code as a from-scratch analysis. Every
figure that decides a category or a cent is accumulated as an integer (nanoseconds, counts), so
incremental and from-scratch results agree exactly; float aggregates (FLOPs, GPU-util means) agree
to rounding (~1e-15 relative), because float addition depends on the order of the batches.

Appending is only possible forward in time: each rank's rows must start after its last row, and a
step number must not be at or below the straggler watermark (steps already aligned across ranks).
Anything else (a replayed spool from the past, a rank that shows up late) raises
``NotAppendable``; the caller then analyses the run from scratch.

The state is kept as columns (``RankTable``: a row per rank), the run's straggler tail
(``RunTail``), the chart sums (``WindowSums``) and per-host sample sums (``HostSamples``). It is
stored between passes in the compact form of state.py: a small JSON header (run-wide scalars,
the configuration's fingerprint, the hosts' sums) and the rank table and chart sums as raw
binary arrays, which round-trip bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phantomhub.waste.core.inputs import (
    MODEL_VERSION,
    OPTIONAL_COLUMNS,
    OPTIONAL_INT_COLUMNS,
    FloatArray,
    IntArray,
    RunConfig,
    StepColumns,
    SystemSamples,
)
from phantomhub.waste.core.steps import StepBlock, StepContext, piece_totals, process_rows
from phantomhub.waste.core.stragglers import RunTail, StragglerCounters, attribute_sums
from phantomhub.waste.core.timeline import NS_MAX, Coverage, PricePieces
from phantomhub.waste.core.windows import WindowSums

STATE_VERSION = MODEL_VERSION  # a state from another version raises NotAppendable
# Columns of a rank's sums per price piece: the five step categories, then rework (steps.py).
PIECE_COLUMNS = 6
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
    "rework_steps",
    "rework_ns",
)


class NotAppendable(ValueError):
    """The new data cannot be appended to this state; analyse the run from scratch."""


@dataclass
class RankState:
    """One rank's state: a snapshot of its ``RankTable`` row, which finalisation reads
    (changing it changes nothing in the accumulator)."""

    rank: int
    host: str
    columns: set[str] = field(default_factory=set)
    first_s: int | None = None  # start of the first step with billed time
    last_e: int | None = None  # end of the last step with billed time
    max_t_start: int | None = None
    horizon: int | None = None  # latest end of any attributed row
    # (price pieces, 6) step-category nanoseconds, then rework; rows follow RunAccumulator.ctx.pieces.
    piece_ns: IntArray = field(default_factory=lambda: np.zeros((0, PIECE_COLUMNS), dtype=np.int64))
    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_SUM_KEYS, 0))
    flops: float = 0.0
    frag_sum: float = 0.0
    mem_peak_max: int = -1
    mem_reserved_max: int = -1
    mem_allocated_max: int = -1


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
    """Per-host CPU contention sums; histograms in 1% bins make percentiles mergeable. Stored in
    the state's JSON header (state.py: ``to_json`` / ``from_json``)."""

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


def _filled_many(batches: Sequence[StepColumns]) -> dict[str, Any]:
    """The batches' columns concatenated, every column present: unmeasured stages and counters
    0, memory -1, FLOPs NaN."""
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


# Columns of a rank's pending row (its last row: its end depends on the next row), FLOPs apart.
PENDING_INT = ("step", "t_start_ns", "dur_ns", *OPTIONAL_INT_COLUMNS)
NONE = np.iinfo(np.int64).min  # stands for None in the rank table's int columns
_COLUMN_BIT = {name: 1 << i for i, name in enumerate(OPTIONAL_COLUMNS)}
_N_COUNTERS = len(dataclasses.fields(StragglerCounters))


def _unless(mask: Any, values: Any) -> Any:
    """``values`` with 0 where ``mask`` (no copy when nothing is masked)."""
    return np.where(mask, 0, values) if mask.any() else values


def _opt(value: int) -> int | None:
    return None if value == NONE else value


class RankTable:
    """Every known rank's state as columns: a row per rank, in the order ranks were first seen.

    What a 1,024-rank run's incremental pass updates is a few array operations on these columns,
    not a Python object per rank; the stored state (state.py) is these columns as they are.
    ``states()`` gives the ranks as ``RankState`` snapshots, for finalisation."""

    def __init__(self, n_pieces: int) -> None:
        self.n_pieces = n_pieces
        self.row: dict[int, int] = {}
        self.host: list[str] = []
        self.rank = np.zeros(0, dtype=np.int64)
        self.columns = np.zeros(0, dtype=np.int64)  # bit mask of OPTIONAL_COLUMNS carried
        # first_s: start of the first step with billed time; last_e: end of the last one;
        # horizon: latest end of any attributed row (NONE: no such row yet).
        self.first_s = np.zeros(0, dtype=np.int64)
        self.last_e = np.zeros(0, dtype=np.int64)
        self.max_t_start = np.zeros(0, dtype=np.int64)
        self.horizon = np.zeros(0, dtype=np.int64)
        self.mem = np.zeros((0, 3), dtype=np.int64)  # maxima of mem_peak, mem_reserved, mem_allocated (-1: none)
        self.sums = np.zeros((0, len(_SUM_KEYS)), dtype=np.int64)
        self.flops = np.zeros(0, dtype=np.float64)
        self.frag_sum = np.zeros(0, dtype=np.float64)
        self.has_pending = np.zeros(0, dtype=bool)
        self.pending = {k: np.zeros(0, dtype=np.int64) for k in PENDING_INT}
        self.pending["flops"] = np.zeros(0, dtype=np.float64)  # NaN: not counted
        self.piece_ns = np.zeros((0, n_pieces, PIECE_COLUMNS), dtype=np.int64)  # step-category and rework ns per price piece
        self.counters = np.zeros((0, _N_COUNTERS), dtype=np.int64)  # StragglerCounters, in its order
        self.has_counters = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.rank)

    _DEFAULTS: dict[str, int | float | bool] = {
        "columns": 0, "first_s": NONE, "last_e": NONE, "max_t_start": NONE, "horizon": NONE, "mem": -1, "sums": 0,
        "flops": 0.0, "frag_sum": 0.0, "has_pending": False, "piece_ns": 0, "counters": 0, "has_counters": False,
    }  # fmt: skip

    def rows_of(self, ranks: Sequence[int], hosts: Sequence[str]) -> IntArray:
        """The row of each rank (new rows for ranks not seen yet); each rank's host is set."""
        row = self.row
        new = [(r, h) for r, h in zip(ranks, hosts, strict=True) if r not in row]
        if new:
            n, k = len(self), len(new)
            for name, fill in self._DEFAULTS.items():
                old = getattr(self, name)
                setattr(self, name, np.concatenate((old, np.full((k, *old.shape[1:]), fill, dtype=old.dtype))))
            for name, old in self.pending.items():
                self.pending[name] = np.concatenate((old, np.zeros(k, dtype=old.dtype)))
            self.rank = np.concatenate((self.rank, np.array([r for r, _ in new], dtype=np.int64)))
            for i, (r, _) in enumerate(new):
                row[r] = n + i
            self.host.extend(h for _, h in new)
        rows = np.fromiter(map(row.__getitem__, ranks), dtype=np.int64, count=len(ranks))
        host = self.host
        for i, h in zip(rows.tolist(), hosts, strict=True):
            host[i] = h
        return rows

    def take(self, order: IntArray) -> RankTable:
        """The rows in ``order`` (every row once) as a new table."""
        out = RankTable(self.n_pieces)
        for name in ("rank", *self._DEFAULTS):
            setattr(out, name, getattr(self, name)[order])
        out.pending = {k: v[order] for k, v in self.pending.items()}
        out.host = [self.host[i] for i in order.tolist()]
        out.row = {r: i for i, r in enumerate(out.rank.tolist())}
        return out

    def copy(self) -> RankTable:
        return self.take(np.arange(len(self)))

    def states(self, rows: IntArray | None = None) -> list[RankState]:
        """``RankState`` snapshots of ``rows`` (all, in table order, by default)."""
        if rows is None:
            rows = np.arange(len(self))
        names: dict[int, frozenset[str]] = {}
        out = []
        first_s, last_e = self.first_s[rows].tolist(), self.last_e[rows].tolist()
        max_t, horizon, mem = self.max_t_start[rows].tolist(), self.horizon[rows].tolist(), self.mem[rows].tolist()
        sums, flops, frag = self.sums[rows].tolist(), self.flops[rows].tolist(), self.frag_sum[rows].tolist()
        for j, (i, mask) in enumerate(zip(rows.tolist(), self.columns[rows].tolist(), strict=True)):
            named = names.get(mask)
            if named is None:
                named = names[mask] = frozenset(c for c, bit in _COLUMN_BIT.items() if mask & bit)
            rs = RankState.__new__(RankState)  # every field set here (cheaper than the dataclass's defaults)
            rs.__dict__.update(
                rank=int(self.rank[i]), host=self.host[i], columns=set(named), first_s=_opt(first_s[j]),
                last_e=_opt(last_e[j]), max_t_start=_opt(max_t[j]), horizon=_opt(horizon[j]), piece_ns=self.piece_ns[i],
                sums=dict(zip(_SUM_KEYS, sums[j], strict=True)), flops=flops[j], frag_sum=frag[j],
                mem_peak_max=mem[j][0], mem_reserved_max=mem[j][1], mem_allocated_max=mem[j][2],
            )  # fmt: skip
            out.append(rs)
        return out


class RunAccumulator:
    """Accumulates one run's steps and samples; ``analysis_from`` (model.py) turns it into an
    Analysis."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        start = config.allocation_start_ns
        coverage = Coverage.from_phases(config.phases, start)
        pieces = PricePieces.from_segments(config.price_segments, start)
        peak_rank = None if config.peak_flops_per_gpu is None else config.peak_flops_per_gpu * config.gpus_per_rank
        self.ctx = StepContext(start, coverage, pieces, config.target_mfu, peak_rank, config.rework_through_step)
        self.table = RankTable(len(pieces))
        self.windows = WindowSums.empty()
        self.watermark: int | None = None
        self.tail = RunTail()  # every rank's rows not yet aligned across ranks
        self.hosts: dict[str, HostSamples] = {}
        self.max_t_seen: int | None = None

    @property
    def ranks(self) -> dict[int, RankState]:
        """Every known rank's state, a snapshot (changing it changes nothing here)."""
        return {rs.rank: rs for rs in self.table.states()}

    @property
    def stragglers(self) -> dict[int, StragglerCounters]:
        """Straggler counters of the ranks that took part in an alignment, a snapshot."""
        t = self.table
        rows = np.flatnonzero(t.has_counters)
        return {r: StragglerCounters(*c) for r, c in zip(t.rank[rows].tolist(), t.counters[rows].tolist(), strict=True)}

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
        if batches:
            total = int(known.lengths.sum()) if known is not None else sum(len(cols) for cols in batches)
            chunks: list[list[StepColumns]] = [batches]  # fewer rows than a chunk: the usual pass
            if total >= GROUP_ROWS and len(batches) > 1:
                # In chunks of about GROUP_ROWS rows to attribute (the groups _attribute_rows
                # would make anyway): a from-scratch run's millions of rows are never all
                # copied at once.
                chunks = [[]]
                rows = 0
                pending = self.table.has_pending
                for cols in batches:
                    if rows >= GROUP_ROWS:
                        chunks.append([])
                        rows = 0
                    chunks[-1].append(cols)
                    i = self.table.row.get(cols.rank)
                    rows += len(cols) - (0 if i is not None and pending[i] else 1)
            for chunk in chunks:
                self._add_concatenated(chunk, known if len(chunks) == 1 else None)
        if align:
            self._align(final=False)

    def _refusal(self, cols: StepColumns) -> str:
        """Why one rank's batch cannot be appended (the first reason that applies)."""
        step = cols.step[np.argsort(cols.t_start_ns, kind="stable")]
        if np.any(np.diff(step) <= 0):
            return f"rank {cols.rank}: step numbers must rise with start time"
        if self.watermark is not None and int(step.min()) <= self.watermark:
            return f"rank {cols.rank}: step {int(step.min())} is at or below the aligned watermark {self.watermark}"
        return f"rank {cols.rank}: rows overlap or precede earlier rows"

    def _add_concatenated(self, batches: list[StepColumns], known: StepBatches | None = None) -> None:
        """Several ranks' batches in one vectorised pass: the checks, the pending rows and the
        rows to attribute are computed on all rows at once. ``known``: the same batches, already
        concatenated and counted (``StepBatches``)."""
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
        table = self.table
        known_rows = [table.row.get(b.rank) for b in batches]
        if any(i is not None for i in known_rows):
            at = np.array([-1 if i is None else i for i in known_rows], dtype=np.int64)
            seen = at >= 0
            waiting = np.zeros(len(batches), dtype=bool)
            waiting[seen] = table.has_pending[at[seen]]
            p, head = at[waiting], first[waiting]
            bad[waiting] |= (t[head] <= table.pending["t_start_ns"][p]) | (step[head] <= table.pending["step"][p])
        if bad.any():  # the first offending batch, with its reason
            raise NotAppendable(self._refusal(batches[int(np.flatnonzero(bad)[0])]))
        rows = table.rows_of([b.rank for b in batches], [b.host for b in batches])
        bits: dict[tuple[str, ...], int] = {}
        masks = np.zeros(len(batches), dtype=np.int64)
        for j, b in enumerate(batches):
            present = b.present()
            mask = bits.get(present)
            if mask is None:
                mask = bits[present] = sum(_COLUMN_BIT[c] for c in present)
            masks[j] = mask
        table.columns[rows] |= masks
        has_pending = table.has_pending[rows]
        # Each rank's rows to attribute: its pending row, then all but its last new row; the
        # last new row becomes pending (its end depends on the next row).
        n_pending = has_pending.astype(np.int64)
        comb_len = lengths + n_pending
        comb_bounds = np.concatenate(([0], np.cumsum(comb_len)))
        comb: dict[str, Any] = filled
        if has_pending.any():
            new_at = np.repeat(comb_bounds[:-1] + n_pending - first, lengths) + np.arange(len(t))
            p_idx = np.flatnonzero(has_pending)
            p_rows = rows[p_idx]
            comb = {}
            for k, v in filled.items():
                out = np.empty(int(comb_bounds[-1]), dtype=v.dtype)
                out[new_at] = v
                out[comb_bounds[p_idx]] = table.pending[k][p_rows]
                comb[k] = out
        ends = comb_bounds[1:] - 1
        for k, v in comb.items():
            table.pending[k][rows] = v[ends]
        table.has_pending[rows] = True
        take = np.ones(len(comb["step"]), dtype=bool)
        take[ends] = False
        next_start = comb["t_start_ns"][1:][take[:-1]]
        attributed = comb_len - 1
        some = attributed > 0
        if not some.any():
            return
        self._attribute_rows(rows[some], attributed[some], {k: v[take] for k, v in comb.items()}, next_start)

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

    def _attribute_rows(self, rows: IntArray, lengths: IntArray, cols: dict[str, Any], next_start: IntArray) -> None:
        """Rows of several ranks, concatenated (``lengths[i]`` rows of table row ``rows[i]``, each
        > 0, every table row at most once)."""
        # Groups of about GROUP_ROWS rows: few passes for many small batches, and a big
        # from-scratch run is still worked through in cache-sized pieces.
        cuts = [0]
        n = 0
        for i, k in enumerate(lengths.tolist()):
            n += k
            if n >= GROUP_ROWS:
                cuts.append(i + 1)
                n = 0
        if cuts[-1] != len(rows):
            cuts.append(len(rows))
        if len(cuts) == 2:
            self._attribute_group(rows, lengths, cols, next_start)
            return
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        for a, b in itertools.pairwise(cuts):
            lo, hi = int(bounds[a]), int(bounds[b])
            self._attribute_group(rows[a:b], lengths[a:b], {k: v[lo:hi] for k, v in cols.items()}, next_start[lo:hi])

    def _attribute_group(self, rows: IntArray, lengths: IntArray, cols: dict[str, Any], next_start: IntArray) -> None:
        """Attribute the rows and fold them into their ranks' columns: every per-rank total is
        an exact integer reduction over that rank's rows (FLOPs and fragmentation sums: one float
        addition per rank and call, as before the table)."""
        table = self.table
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        block = process_rows(cols, next_start, self.ctx)
        n_pieces = len(self.ctx.pieces)
        slot = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
        idx, sums = piece_totals(block, self.ctx.pieces, self.ctx.coverage, offset=slot * n_pieces)
        target = table.piece_ns.reshape(-1, PIECE_COLUMNS)
        np.add.at(target[:, : sums.shape[1]], rows[idx // n_pieces] * n_pieces + idx % n_pieces, sums)
        self._fold_sums(rows, block, cols, offsets)
        live = block.e_ns > block.s_ns
        first_live = np.minimum.reduceat(np.where(live, block.s_ns, NS_MAX), offsets)
        last_live = np.maximum.reduceat(np.where(live, block.e_ns, -NS_MAX), offsets)
        stepped = first_live < NS_MAX
        if stepped.any():
            at = rows[stepped]
            old_first, old_last = table.first_s[at], table.last_e[at]
            table.first_s[at] = np.where(old_first == NONE, first_live[stepped], np.minimum(old_first, first_live[stepped]))
            table.last_e[at] = np.maximum(old_last, last_live[stepped])  # NONE is below any end
        table.max_t_start[rows] = np.maximum(table.max_t_start[rows], np.maximum.reduceat(block.t_start_ns, offsets))
        table.horizon[rows] = np.maximum(table.horizon[rows], np.maximum.reduceat(block.e_ns, offsets))
        latest = int(table.max_t_start[rows].max())
        self.max_t_seen = latest if self.max_t_seen is None else max(self.max_t_seen, latest)
        on = block.nonphase_ns > 0
        rank_of = np.repeat(table.rank[rows], lengths)
        if on.all():
            self.tail.add(rank_of, block.step, block.arrival_ns, block.cats[:, 3])
        else:
            self.tail.add(rank_of[on], block.step[on], block.arrival_ns[on], block.cats[:, 3][on])
        # Rework rows are not work of this attempt: the chart windows see none of them.
        shown = np.arange(len(block.step)) if self.ctx.rework_through_step is None else np.flatnonzero(~block.rework_rows)
        self.windows.add_steps(block, cols, self.config.allocation_start_ns, shown)

    def _fold_sums(self, rows: IntArray, block: StepBlock, cols: Mapping[str, Any], offsets: IntArray) -> None:
        """Per-rank sums of a multi-rank block: exact integer reductions over each rank's rows."""
        table = self.table
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
            **{key: np.maximum(cols[key], 0) for key in ("alloc_retries",)},
            # Tokens and samples of rework rows were already counted by an earlier attempt.
            **{key: _unless(block.rework_rows, np.maximum(cols[key], 0)) for key in ("tokens", "samples")},
            "flops_steps": known,
            "overrun_steps": block.overrun_rows,
            "clipped_steps": block.clipped_rows,
            "over_peak_steps": block.over_peak_rows,
            "zero_flops_steps": block.zero_flops_rows,
            "mem_rows": peak >= 0,
            "frag_rows": frag_ok,
            "rework_steps": block.rework_rows,
            "rework_ns": block.rework_ns,
        }
        # One (rows x keys) integer matrix, reduced per rank at once.
        matrix = np.empty((len(block.step), len(_SUM_KEYS)), dtype=np.int64)
        for j, key in enumerate(_SUM_KEYS):
            matrix[:, j] = by_key[key]
        table.sums[rows] += np.add.reduceat(matrix, offsets, axis=0)
        table.flops[rows] += np.add.reduceat(np.where(known, block.flops, 0.0), offsets)
        table.frag_sum[rows] += np.add.reduceat(frag, offsets)
        mem = np.stack([np.maximum.reduceat(x, offsets) for x in (peak, reserved, alloc)], axis=1)
        table.mem[rows] = np.maximum(table.mem[rows], mem)

    def align_known(self) -> None:
        """Align what the live path would have aligned by now (after rows were added with
        ``align=False``): the same counters, and a state without the tail of every row."""
        self._align(final=False)

    def _align(self, *, final: bool) -> None:
        """Fold into the straggler counters every step no known rank can still report."""
        table = self.table
        if not len(table):
            return
        if final:
            bound = NS_MAX
        else:
            if len(table) < self.config.world_size and len(self.tail) < TAIL_ALIGN_LIMIT:
                return
            bound = int(np.where(table.has_pending, table.pending["step"] - 1, NS_MAX).min())
        if self.watermark is not None and bound <= self.watermark:
            return
        rank, step, arrival, comm = self.tail.take_through(bound)
        order = np.argsort(table.rank, kind="stable")  # the rows by rank
        added = attribute_sums(len(table), order[np.searchsorted(table.rank[order], rank)], step, arrival, comm)
        if added is not None:
            table.counters += added
            table.has_counters[:] = True
        self.watermark = bound

    # -- finishing -------------------------------------------------------------------------

    def finished(self, end_ns: int, *, in_place: bool = False) -> RunAccumulator:
        """A copy with every pending row attributed up to ``end_ns``; this state is unchanged
        (``in_place``: this state itself, which is then not to be appended to or stored; for a
        caller that has already packed it)."""
        if end_ns < self.config.allocation_start_ns:
            raise ValueError("end_ns is before allocation_start_ns")
        done = self if in_place else self._clone()
        table = done.table
        past = (table.max_t_start >= end_ns) | (table.horizon > end_ns)  # NONE (no row) is below any end
        if past.any():
            rank = int(table.rank[int(np.flatnonzero(past)[0])])
            raise NotAppendable(f"rank {rank}: steps already analysed run past end_ns={end_ns}")
        rows = np.flatnonzero(table.has_pending & (table.pending["t_start_ns"] < end_ns))
        table.has_pending[:] = False
        if len(rows):
            # Every rank's last row, cut at the end, attributed in one pass (one row per rank).
            cols = {k: v[rows] for k, v in table.pending.items()}
            cols["dur_ns"] = np.minimum(cols["dur_ns"], end_ns - cols["t_start_ns"])
            ones = np.ones(len(rows), dtype=np.int64)
            done._attribute_rows(rows, ones, cols, np.full(len(rows), NS_MAX, dtype=np.int64))
        done._align(final=True)
        return done

    def _clone(self) -> RunAccumulator:
        """A copy sharing nothing mutable."""
        twin = copy.copy(self)
        twin.table = self.table.copy()
        twin.tail = self.tail.copy()
        twin.windows = self.windows.copy()
        twin.hosts = {k: copy.deepcopy(v) for k, v in self.hosts.items()}
        return twin

    def matches(self, config: RunConfig) -> bool:
        """True when this state was built under ``config`` (else start a fresh accumulator)."""
        return self.config.fingerprint() == config.fingerprint()

"""Per-step attribution for one rank, vectorised: each step's billed time split into categories.

A step occupies [t_start, t_start + dur), cut short at the next step's start (so no nanosecond is
counted twice), clipped to the billed span and stripped of any phase time (eval, checkpoint),
which belongs to idle. What is left, ``nonphase_ns``, is split:

    data_ns -> data_stall, comm_ns -> comm_exposed, forward+backward+optimizer -> compute,
    the rest (time no stage measured) -> host_overhead.

When the measured stages add up to more than ``nonphase_ns`` (clock skew, or time cut off by a
phase or the billing edges), they are scaled down in proportion and host_overhead is zero: the
removed time is assumed to be the unmeasured tail of the step first, the stages only after it.

Rework (a job's later attempt redoing steps an earlier attempt computed, docs/waste-model.md,
"Jobs"): a row whose step number is at or below ``rework_through_step`` keeps none of that split.
Its non-phase time goes whole to ``rework_ns`` (the idle label ``rework``), its FLOPs are not
credited (NaN), and it is not a live step: MFU, useful compute, the sums per step and the chart
windows see none of it. Phase time inside it keeps its phase label.

Compute splits into useful_compute = min(compute, flops / (target_mfu x peak of the rank's GPUs))
and compute_inefficiency = the rest, per step, so a fast step cannot hide a slow one.

A step's FLOPs are credited in proportion to its measured work that survives those cuts:
``flops x min(1, nonphase / min(measured stages, dur))`` (all of them when the stages fit, none
when no non-phase time is left, all of them when no stage was measured). So FLOPs done before the
allocation, in time a later row claims, or in a step wholly inside a phase are not counted against
billed time. ``over_peak`` counts rows whose credited FLOPs still exceed the peak over their step
time: only impossible inputs (a wrong FLOP count or dtype) do that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from phantomhub.waste.core.inputs import FloatArray, IntArray
from phantomhub.waste.core.timeline import Coverage, PricePieces, split_exact

# Column order of StepBlock.cats (STEP_CATEGORIES).
USEFUL, INEFF, DATA, COMM, HOST = range(5)


@dataclass(frozen=True)
class StepContext:
    allocation_start_ns: int
    coverage: Coverage
    pieces: PricePieces
    target_mfu: float
    # Peak FLOP/s of everything one rank drives (peak per GPU x GPUs per rank), None if unknown.
    peak_flops_per_rank: float | None
    # Rows numbered at or below this redo an earlier attempt's work (rework), None: none do.
    rework_through_step: int | None = None


@dataclass(frozen=True, eq=False)
class StepBlock:
    """Attribution of a run of consecutive rows of one rank."""

    step: IntArray
    t_start_ns: IntArray
    s_ns: IntArray
    e_ns: IntArray
    nonphase_ns: IntArray
    cats: IntArray  # (n, 5): useful, inefficiency, data, comm, host
    rework_ns: IntArray  # (n,): a rework row's non-phase time (then its cats are 0), else 0
    rework_rows: npt.NDArray[np.bool_]  # rows numbered at or below rework_through_step
    forward_ns: IntArray
    backward_ns: IntArray
    optimizer_ns: IntArray
    flops: FloatArray  # FLOPs credited to the kept time (see the module doc); NaN where not counted
    # Per row: stages scaled down; shortened by the next row, a phase or the billing edges;
    # credited FLOPs above the peak over the step time (bad inputs); 0 FLOPs (not counted).
    overrun_rows: npt.NDArray[np.bool_]
    clipped_rows: npt.NDArray[np.bool_]
    over_peak_rows: npt.NDArray[np.bool_]
    zero_flops_rows: npt.NDArray[np.bool_]

    @property
    def overrun(self) -> int:
        return int(self.overrun_rows.sum())

    @property
    def clipped(self) -> int:
        return int(self.clipped_rows.sum())

    @property
    def over_peak(self) -> int:
        return int(self.over_peak_rows.sum())

    @property
    def zero_flops(self) -> int:
        return int(self.zero_flops_rows.sum())

    @property
    def piece_cats(self) -> IntArray:
        """(n, 6): the five step categories, then rework: what the price pieces accumulate."""
        return np.column_stack((self.cats, self.rework_ns))

    @property
    def compute_ns(self) -> IntArray:
        return self.cats[:, USEFUL] + self.cats[:, INEFF]

    @property
    def arrival_ns(self) -> IntArray:
        """Time a rank spent before it could enter the gradient sync (all but comm)."""
        return self.nonphase_ns - self.cats[:, COMM]


def _col(cols: Mapping[str, IntArray | None], name: str, n: int) -> IntArray:
    arr = cols.get(name)
    if arr is None:
        return np.zeros(n, dtype=np.int64)
    return np.maximum(arr, 0)


def process_rows(cols: Mapping[str, np.ndarray | None], next_start_ns: IntArray, ctx: StepContext) -> StepBlock:
    """Attribute rows sorted by t_start; ``next_start_ns`` is each row's successor's start."""
    t = np.asarray(cols["t_start_ns"], dtype=np.int64)
    n = len(t)
    dur = np.maximum(np.asarray(cols["dur_ns"], dtype=np.int64), 0)
    raw_end = t + dur
    eff_end = np.minimum(raw_end, next_start_ns)
    s = np.maximum(t, ctx.allocation_start_ns)
    e = np.maximum(eff_end, s)
    span = e - s
    nonphase = span - ctx.coverage.covered_between(s, e)

    stages = np.stack(
        [
            _col(cols, "data_ns", n),
            _col(cols, "forward_ns", n),
            _col(cols, "backward_ns", n),
            _col(cols, "optimizer_ns", n),
            _col(cols, "comm_ns", n),
        ],
        axis=1,
    )
    measured = stages.sum(axis=1)
    over = measured > nonphase
    if over.any():
        factor = nonphase[over] / measured[over]
        stages[over] = np.floor(stages[over] * factor[:, None]).astype(np.int64)
    host = nonphase - stages.sum(axis=1)
    bad = host < 0
    if bad.any():  # float rounding guard: take the excess from the largest stage
        rows = np.flatnonzero(bad)
        biggest = np.argmax(stages[rows], axis=1)
        stages[rows, biggest] += host[rows]
        host[rows] = 0
    data, fwd, bwd, opt, comm = (stages[:, i] for i in range(5))
    compute = fwd + bwd + opt

    raw_flops = cols.get("flops")
    flops = np.full(n, np.nan) if raw_flops is None else np.asarray(raw_flops, dtype=np.float64)
    # No training step does zero FLOPs: a 0 is a counter that recognised no op, not a measurement.
    zero_flops = flops == 0
    known = np.isfinite(flops) & (flops > 0)
    # Share of the row's measured work (or of the whole row when nothing was measured) kept.
    work = np.minimum(measured, dur)
    with np.errstate(divide="ignore", invalid="ignore"):
        kept = np.where(work > 0, np.minimum(nonphase / work, 1.0), 1.0)
    kept = np.where(nonphase > 0, kept, 0.0)
    flops = np.where(known, flops * kept, np.nan)
    if ctx.peak_flops_per_rank is None:
        useful = compute
    else:
        with np.errstate(invalid="ignore"):
            need_ns = np.rint(flops * 1e9 / (ctx.target_mfu * ctx.peak_flops_per_rank))
        capped = np.minimum(compute.astype(np.float64), np.where(known, need_ns, np.inf))
        useful = capped.astype(np.int64)
    cats = np.stack([useful, compute - useful, data, comm, host], axis=1)
    over_peak = np.zeros(n, dtype=bool)
    if ctx.peak_flops_per_rank is not None:
        # Slack of 1e-9 so float rounding of a step at exactly 100% is not flagged.
        limit = ctx.peak_flops_per_rank * nonphase / 1e9 * (1 + 1e-9)
        over_peak = known & (flops > limit)
    clipped = nonphase < dur
    rework_ns = np.zeros(n, dtype=np.int64)
    redo = np.zeros(n, dtype=bool)
    if ctx.rework_through_step is not None:
        redo = np.asarray(cols["step"], dtype=np.int64) <= ctx.rework_through_step
        if redo.any():
            rework_ns = np.where(redo, nonphase, 0)
            nonphase = np.where(redo, 0, nonphase)
            cats[redo] = 0
            fwd, bwd, opt = (np.where(redo, 0, x) for x in (fwd, bwd, opt))
            flops = np.where(redo, np.nan, flops)
            for flags in (over, clipped, over_peak, zero_flops):
                flags[redo] = False
    return StepBlock(
        step=np.asarray(cols["step"], dtype=np.int64),
        t_start_ns=t,
        s_ns=s,
        e_ns=e,
        nonphase_ns=nonphase,
        cats=cats,
        rework_ns=rework_ns,
        rework_rows=redo,
        forward_ns=fwd,
        backward_ns=bwd,
        optimizer_ns=opt,
        flops=flops,
        overrun_rows=over,
        clipped_rows=clipped,
        over_peak_rows=over_peak,
        zero_flops_rows=zero_flops,
    )


def split_in_two(cats: IntArray, first_ns: IntArray) -> IntArray:
    """Share of each row's categories that falls before a price change, ``first_ns`` in total.

    Largest remainder per row, in exact integer arithmetic (Python ints: value x weight can pass
    2**63). The rest of the row goes after the change, so row and piece totals both stay exact.
    """
    total = cats.sum(axis=1)
    num = cats.astype(object) * first_ns.astype(object)[:, None]
    den = np.maximum(total, 1).astype(object)[:, None]
    part: IntArray = (num // den).astype(np.int64)
    # Remainders as floats only rank the categories; ties fall to the lower category index.
    frac = (num % den).astype(np.float64) / den.astype(np.float64)
    short = first_ns - part.sum(axis=1)
    order = np.argsort(-frac, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(cats.shape[1])[None, :].repeat(len(cats), axis=0), axis=1)
    part += (rank < short[:, None]).astype(np.int64)
    return part


def piece_totals(
    block: StepBlock, pieces: PricePieces, coverage: Coverage, offset: IntArray | None = None
) -> tuple[IntArray, IntArray]:
    """Category nanoseconds of the block per price piece: (piece indexes, (n, 5) sums, or (n, 6)
    with rework when a row has some: ``StepBlock.piece_cats``).

    Rows inside one piece are summed in bulk. Rows that straddle a price change are cut at it so
    each piece gets exactly the step time (outside phases) that fell inside it, with the row's
    category mix kept on both sides: vectorised for one change, ``split_exact`` for several.
    An index may appear more than once; add with ``np.add.at``. ``offset`` (per row, rising) is
    added to each row's piece indexes: a block of several ranks' rows, each rank's offset its slot
    x the number of pieces, gives indexes into the ranks' stacked (slot x piece, 6) totals.
    """
    idx_parts: list[IntArray] = []
    val_parts: list[IntArray] = []
    # The rework column only when a row has some (a run outside a job never does): five columns
    # are what every other pass adds up.
    cats = block.piece_cats if block.rework_ns.any() else block.cats
    width = cats.shape[1]
    live = (block.nonphase_ns > 0) | (block.rework_ns > 0)
    s, e = block.s_ns, block.e_ns
    first_piece = pieces.index(s)
    last_piece = pieces.index(np.maximum(e - 1, s))
    shift = np.zeros(len(s), dtype=np.int64) if offset is None else offset
    spans = np.where(live, last_piece - first_piece, 0)
    keys = pieces.starts

    def add(piece_idx: IntArray, values: IntArray) -> None:
        # piece_idx is sorted: sum runs of equal pieces in bulk.
        bounds = np.flatnonzero(np.diff(piece_idx, prepend=-1))
        idx_parts.append(piece_idx[bounds])
        val_parts.append(np.add.reduceat(values, bounds, axis=0))

    simple = np.flatnonzero(live & (spans == 0))
    if len(simple):
        add(first_piece[simple] + shift[simple], cats[simple])
    two = np.flatnonzero(spans == 1)
    if len(two):
        cut = keys[first_piece[two] + 1]
        before = coverage.uncovered_between(s[two], cut)
        part = split_in_two(cats[two], before)
        add(first_piece[two] + shift[two], part)
        add(first_piece[two] + 1 + shift[two], cats[two] - part)
    ends = pieces.ends()
    for i in np.flatnonzero(spans > 1).tolist():
        js = list(range(int(first_piece[i]), int(last_piece[i]) + 1))
        weights = [coverage.uncovered(max(int(s[i]), int(keys[j])), min(int(e[i]), int(ends[j]))) for j in js]
        parts = split_exact([int(v) for v in cats[i]], weights)
        idx_parts.append(np.array(js, dtype=np.int64) + shift[i])
        val_parts.append(np.array(parts, dtype=np.int64).reshape(len(js), width))
    if not idx_parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=np.int64)
    return np.concatenate(idx_parts), np.concatenate(val_parts)

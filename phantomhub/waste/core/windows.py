"""Time-bucketed sums for the run page's charts (at most MAX_WINDOWS buckets).

Buckets are aligned to the allocation start and are ``BASE_NS x 2**level`` wide. When a growing
(live) run needs more than MAX_WINDOWS buckets, neighbours are merged pairwise and the level goes up
by one, so a bucket at any level is exactly the union of two at the level below: accumulating in
batches and accumulating at once give the same buckets.

A step's time, stage times, FLOPs, tokens and samples are **spread** over the buckets its kept span
``[s, e)`` overlaps, in proportion to the overlap; ``steps`` is the matching step-equivalents
(each step adds the share of its span inside the bucket). A window's FLOP rate is therefore never
above the rate of the steps running in it. Point-in-time figures (allocator stats at step end,
allocator retries, the step-start count) go to the bucket of the step's start, GPU utilisation to
the bucket of its sample. Every figure is a sum over pieces of steps, so merging two buckets gives
the sum a coarser bucket would have got (to float rounding for the spread figures).

The final width is the coarser of what the span needs and what the steps need: at least the 90th
percentile of the steps' kept durations (``duration_level``, from a mergeable histogram of
power-of-two duration levels), so a typical window holds a whole step or more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from phantomhub.waste.core.inputs import FloatArray, IntArray
from phantomhub.waste.core.steps import COMM, DATA, HOST, StepBlock

MAX_WINDOWS = 2000
BASE_NS = 1_000_000  # 1 ms: the finest width, for short test runs
DURATION_LEVELS = 64  # histogram bins of step-duration levels (2**63 ns is the int64 limit)
DURATION_QUANTILE = (9, 10)  # windows at least as wide as 9 in 10 steps

FIELDS: tuple[str, ...] = (
    "steps",  # step-equivalents: sum over steps of the share of their span in the window
    "step_starts",
    "step_ns",
    "data_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "comm_ns",
    "host_ns",
    "tokens",
    "samples",
    "flops",
    "mem_allocated_sum",
    "mem_reserved_sum",
    "mem_rows",
    "alloc_retries",
    "gpu_util_sum",
    "gpu_util_samples",
)
_F = {name: i for i, name in enumerate(FIELDS)}


def duration_levels(dur_ns: IntArray) -> IntArray:
    """Smallest level whose bucket width is at least each (positive) duration."""
    q = (np.maximum(dur_ns, 1) - 1) // BASE_NS
    # frexp's exponent is the bit length for integers below 2**53 (q < 2**44 here).
    _, exponent = np.frexp(q.astype(np.float64))
    levels: IntArray = np.clip(exponent, 0, DURATION_LEVELS - 1).astype(np.int64)
    return levels


@dataclass
class WindowSums:
    level: int
    sums: FloatArray  # (len(FIELDS), n)
    peak: FloatArray  # (n,) max mem_peak bytes, -1 = none
    # Steps with step time by duration level (see duration_levels): exact integer counts.
    dur_hist: IntArray = dataclasses.field(default_factory=lambda: np.zeros(DURATION_LEVELS, dtype=np.int64))

    @classmethod
    def empty(cls) -> WindowSums:
        return cls(0, np.zeros((len(FIELDS), 0)), np.zeros(0))

    def copy(self) -> WindowSums:
        return WindowSums(self.level, self.sums.copy(), self.peak.copy(), self.dur_hist.copy())

    @property
    def width_ns(self) -> int:
        return BASE_NS << self.level

    def _coarsen(self) -> None:
        n = self.sums.shape[1]
        if n % 2:
            self.sums = np.pad(self.sums, ((0, 0), (0, 1)))
            self.peak = np.pad(self.peak, (0, 1), constant_values=-1.0)
        self.sums = self.sums.reshape(len(FIELDS), -1, 2).sum(axis=2)
        self.peak = self.peak.reshape(-1, 2).max(axis=1)
        self.level += 1

    def duration_level(self) -> int:
        """Smallest level at least as wide as DURATION_QUANTILE of the steps (0 without steps)."""
        total = int(self.dur_hist.sum())
        if total == 0:
            return 0
        num, den = DURATION_QUANTILE
        cum = np.cumsum(self.dur_hist)
        return int(np.flatnonzero(cum * den >= total * num)[0])

    def coarsen_to(self, level: int) -> None:
        while self.level < level:
            self._coarsen()

    def fit(self, offset_ns: int) -> None:
        """Coarsen until an instant ``offset_ns`` after the start has a bucket; grow to hold it."""
        while offset_ns // self.width_ns >= MAX_WINDOWS:
            self._coarsen()
        need = int(offset_ns // self.width_ns) + 1
        n = self.sums.shape[1]
        if need > n:
            self.sums = np.pad(self.sums, ((0, 0), (0, need - n)))
            self.peak = np.pad(self.peak, (0, need - n), constant_values=-1.0)

    def _buckets(self, offsets: IntArray) -> IntArray:
        self.fit(int(offsets.max()))
        return (offsets // self.width_ns).astype(np.int64)

    def add_steps(self, block: StepBlock, cols: Mapping[str, Any], start_ns: int, take: IntArray) -> None:
        """Add rows ``take`` of ``block`` (and their raw ``cols``) to their buckets."""
        if len(take) == 0:
            return
        a = block.s_ns[take] - start_ns  # >= 0: steps are clipped to the allocation start
        b = block.e_ns[take] - start_ns
        span = b - a
        self.fit(int(max(a.max(), (b - 1).max())))
        width = self.width_ns
        n = self.sums.shape[1]
        nonphase = block.nonphase_ns[take]
        live = nonphase > 0
        self.dur_hist += np.bincount(duration_levels(span[live]), minlength=DURATION_LEVELS)

        # Point-in-time figures: the bucket of the step's start.
        idx = a // width

        def at_start(name: str, values: Any) -> None:
            self.sums[_F[name]] += np.bincount(idx, weights=values, minlength=n)

        at_start("step_starts", np.ones(len(take)))
        at_start("alloc_retries", np.maximum(cols["alloc_retries"][take], 0))
        # Memory columns use -1 for "not reported" (bytes are never negative).
        alloc, reserved = cols["mem_allocated"][take], cols["mem_reserved"][take]
        known = (alloc >= 0) & (reserved >= 0)
        at_start("mem_allocated_sum", np.where(known, alloc, 0))
        at_start("mem_reserved_sum", np.where(known, reserved, 0))
        at_start("mem_rows", known.astype(np.float64))
        peak = cols["mem_peak"][take]
        if (peak >= 0).any():
            np.maximum.at(self.peak, idx, peak.astype(np.float64))

        # Figures over the step's span, weighted by the overlap with each bucket: the bucket of
        # the start gets its share here (all of it for a row inside one bucket, and a zero-length
        # row lands whole there); the few rows that reach further get one piece per later bucket.
        last = np.where(span > 0, (b - 1) // width, idx)
        first_end = np.minimum(b, (idx + 1) * width)
        share0 = np.where(span > 0, (first_end - a) / np.maximum(span, 1), 1.0)
        multi = np.flatnonzero(last > idx)
        more = last[multi] - idx[multi]
        row = np.repeat(multi, more)
        k = np.repeat(idx[multi] + 1, more) + np.arange(len(row)) - np.repeat(np.cumsum(more) - more, more)
        share = (np.minimum(b[row], (k + 1) * width) - k * width) / np.maximum(span[row], 1)
        cats = block.cats[take]

        def spread(name: str, values: Any) -> None:
            v = np.asarray(values, dtype=np.float64)
            total = np.bincount(idx, weights=v * share0, minlength=n)
            if len(row):
                total += np.bincount(k, weights=v[row] * share, minlength=n)
            self.sums[_F[name]] += total

        spread("steps", live)
        spread("step_ns", nonphase)
        spread("data_ns", cats[:, DATA])
        spread("forward_ns", block.forward_ns[take])
        spread("backward_ns", block.backward_ns[take])
        spread("optimizer_ns", block.optimizer_ns[take])
        spread("comm_ns", cats[:, COMM])
        spread("host_ns", cats[:, HOST])
        for name in ("tokens", "samples"):
            spread(name, np.maximum(cols[name][take], 0))
        flops = block.flops[take]
        spread("flops", np.where(np.isfinite(flops), flops, 0.0))

    def add_gpu_util(self, t_ns: IntArray, util_pct: FloatArray, start_ns: int) -> None:
        ok = (t_ns >= start_ns) & np.isfinite(util_pct)
        if not ok.any():
            return
        idx = self._buckets(t_ns[ok] - start_ns)
        n = self.sums.shape[1]
        self.sums[_F["gpu_util_sum"]] += np.bincount(idx, weights=util_pct[ok], minlength=n)
        self.sums[_F["gpu_util_samples"]] += np.bincount(idx, minlength=n)

    def field(self, name: str) -> FloatArray:
        row: FloatArray = self.sums[_F[name]]
        return row

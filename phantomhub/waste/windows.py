"""Time-bucketed sums for the run page's charts (at most MAX_WINDOWS buckets).

Buckets are aligned to the allocation start and are ``BASE_NS x 2**level`` wide. When a growing
(live) run needs more than MAX_WINDOWS buckets, neighbours are merged pairwise and the level goes up
by one, so a bucket at any level is exactly the union of two at the level below: accumulating in
batches and accumulating at once give the same buckets. A step falls in the bucket of its start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from phantomhub.waste.inputs import FloatArray, IntArray
from phantomhub.waste.steps import COMM, DATA, HOST, INEFF, USEFUL, StepBlock

MAX_WINDOWS = 2000
BASE_NS = 1_000_000  # 1 ms: the finest width, for short test runs

FIELDS: tuple[str, ...] = (
    "steps",
    "step_ns",
    "data_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "comm_ns",
    "host_ns",
    "useful_ns",
    "inefficiency_ns",
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


def level_for(span_ns: int) -> int:
    """Smallest level whose buckets cover ``span_ns`` in at most MAX_WINDOWS buckets."""
    level = 0
    while (BASE_NS << level) * MAX_WINDOWS < span_ns:
        level += 1
    return level


@dataclass
class WindowSums:
    level: int
    sums: FloatArray  # (len(FIELDS), n)
    peak: FloatArray  # (n,) max mem_peak bytes, -1 = none

    @classmethod
    def empty(cls) -> WindowSums:
        return cls(0, np.zeros((len(FIELDS), 0)), np.zeros(0))

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
        offsets = np.maximum(block.t_start_ns[take], start_ns) - start_ns
        idx = self._buckets(offsets)
        n = self.sums.shape[1]
        cats = block.cats[take]

        def add(name: str, values: Any) -> None:
            self.sums[_F[name]] += np.bincount(idx, weights=values, minlength=n)

        add("steps", np.ones(len(take)))
        add("step_ns", block.nonphase_ns[take])
        add("data_ns", cats[:, DATA])
        add("forward_ns", block.forward_ns[take])
        add("backward_ns", block.backward_ns[take])
        add("optimizer_ns", block.optimizer_ns[take])
        add("comm_ns", cats[:, COMM])
        add("host_ns", cats[:, HOST])
        add("useful_ns", cats[:, USEFUL])
        add("inefficiency_ns", cats[:, INEFF])
        for name in ("tokens", "samples", "alloc_retries"):
            add(name, np.maximum(cols[name][take], 0))
        flops = block.flops[take]
        add("flops", np.where(np.isfinite(flops), flops, 0.0))
        # Memory columns use -1 for "not reported" (bytes are never negative).
        alloc, reserved = cols["mem_allocated"][take], cols["mem_reserved"][take]
        known = (alloc >= 0) & (reserved >= 0)
        add("mem_allocated_sum", np.where(known, alloc, 0))
        add("mem_reserved_sum", np.where(known, reserved, 0))
        add("mem_rows", known.astype(np.float64))
        peak = cols["mem_peak"][take]
        if (peak >= 0).any():
            np.maximum.at(self.peak, idx, peak.astype(np.float64))

    def add_gpu_util(self, t_ns: IntArray, util_pct: FloatArray, start_ns: int) -> None:
        ok = (t_ns >= start_ns) & np.isfinite(util_pct)
        if not ok.any():
            return
        idx = self._buckets(t_ns[ok] - start_ns)
        n = self.sums.shape[1]
        self.sums[_F["gpu_util_sum"]] += np.bincount(idx, weights=util_pct[ok], minlength=n)
        self.sums[_F["gpu_util_samples"]] += np.bincount(idx, minlength=n)

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "sums": self.sums.tolist(), "peak": self.peak.tolist()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WindowSums:
        sums = np.asarray(data["sums"], dtype=np.float64).reshape(len(FIELDS), -1)
        return cls(int(data["level"]), sums, np.asarray(data["peak"], dtype=np.float64))

    def field(self, name: str) -> FloatArray:
        row: FloatArray = self.sums[_F[name]]
        return row

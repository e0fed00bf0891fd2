"""Interval bookkeeping on the run's clock: phase coverage and price pieces.

All arithmetic is on integer nanoseconds so that category totals add up exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from phantomhub.waste.core.inputs import IntArray, Phase, PriceSegment
from phantomhub.waste.core.money import largest_remainder

# Stands for "no end yet" (a live run's last piece, a row with no next row).
NS_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True, eq=False)
class Coverage:
    """Disjoint labelled intervals (phases) with O(log n) 'covered time before t' look-ups."""

    names: tuple[str, ...]
    starts: IntArray
    ends: IntArray
    # cum[i] = total covered time before starts[i].
    cum: IntArray

    @classmethod
    def from_phases(cls, phases: Sequence[Phase], lo_ns: int) -> Coverage:
        """Phases clipped to start at ``lo_ns``, sorted, overlaps removed.

        Where two phases overlap, the one that started first keeps the shared time, so no
        nanosecond is labelled twice.
        """
        kept: list[tuple[str, int, int]] = []
        cursor = lo_ns
        for ph in sorted(phases, key=lambda p: (p.start_ns, p.end_ns, p.name)):
            start = max(ph.start_ns, cursor)
            if ph.end_ns > start:
                kept.append((ph.name, start, ph.end_ns))
                cursor = ph.end_ns
        starts = np.array([k[1] for k in kept], dtype=np.int64)
        ends = np.array([k[2] for k in kept], dtype=np.int64)
        lengths = ends - starts
        cum = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        return cls(tuple(k[0] for k in kept), starts, ends, cum[: len(kept)])

    def only(self, name: str) -> Coverage:
        """The intervals labelled ``name`` alone."""
        mask = np.array([n == name for n in self.names], dtype=bool)
        starts, ends = self.starts[mask], self.ends[mask]
        cum = np.concatenate(([0], np.cumsum(ends - starts)[:-1])).astype(np.int64)
        return Coverage(tuple(n for n in self.names if n == name), starts, ends, cum[: len(starts)])

    def uncovered_between(self, a: IntArray, b: IntArray) -> IntArray:
        """Nanoseconds of [a, b) outside every interval (zero where b <= a)."""
        a = np.asarray(a, dtype=np.int64)
        b = np.maximum(np.asarray(b, dtype=np.int64), a)
        return (b - a) - self.covered_between(a, b)

    def covered_before(self, t: IntArray) -> IntArray:
        """Covered nanoseconds in (-inf, t) for every t."""
        t = np.asarray(t, dtype=np.int64)
        if len(self.starts) == 0:
            return np.zeros_like(t)
        i = np.searchsorted(self.starts, t, side="right") - 1
        ic = np.maximum(i, 0)
        inside = np.clip(t - self.starts[ic], 0, self.ends[ic] - self.starts[ic])
        return np.where(i >= 0, self.cum[ic] + inside, 0).astype(np.int64)

    def covered_between(self, a: IntArray, b: IntArray) -> IntArray:
        """Covered nanoseconds in [a, b) (zero where b <= a)."""
        a = np.asarray(a, dtype=np.int64)
        b = np.maximum(np.asarray(b, dtype=np.int64), a)
        return self.covered_before(b) - self.covered_before(a)

    def uncovered(self, a: int, b: int) -> int:
        """Nanoseconds of [a, b) outside every phase."""
        if b <= a:
            return 0
        got = self.covered_between(np.array([a]), np.array([b]))
        return int(b - a - int(got[0]))

    def by_name_within(self, a: int, b: int) -> dict[str, int]:
        """Covered nanoseconds of [a, b) per phase name."""
        out: dict[str, int] = {}
        for name, s, e in zip(self.names, self.starts.tolist(), self.ends.tolist(), strict=True):
            overlap = min(e, b) - max(s, a)
            if overlap > 0:
                out[name] = out.get(name, 0) + overlap
        return out


@dataclass(frozen=True, eq=False)
class PricePieces:
    """[lo, +inf) cut at every price change. Piece k = [starts[k], starts[k+1]).

    Gaps between segments, and time after the last one, are pieces with price None (unpriced):
    their GPU-seconds are still categorised, but cost nothing and are reported as unpriced.
    """

    starts: IntArray
    prices: tuple[Fraction | None, ...]

    @classmethod
    def from_segments(cls, segments: Sequence[PriceSegment], lo_ns: int) -> PricePieces:
        ordered = sorted(segments, key=lambda s: s.start_ns)
        for prev, nxt in itertools.pairwise(ordered):
            if nxt.start_ns < prev.end_ns:
                raise ValueError(f"price segments overlap: [{prev.start_ns}, {prev.end_ns}) and [{nxt.start_ns}, {nxt.end_ns})")
        starts: list[int] = [lo_ns]
        prices: list[Fraction | None] = [None]
        for seg in ordered:
            if seg.end_ns <= lo_ns:
                continue
            start = max(seg.start_ns, lo_ns)
            if start == starts[-1]:
                prices[-1] = seg.price()
            else:
                starts.append(start)
                prices.append(seg.price())
            starts.append(seg.end_ns)
            prices.append(None)
        return cls(np.array(starts, dtype=np.int64), tuple(prices))

    def __len__(self) -> int:
        return len(self.starts)

    def ends(self) -> IntArray:
        return np.append(self.starts[1:], NS_MAX).astype(np.int64)

    def index(self, t: IntArray) -> IntArray:
        """Piece holding each instant t (t >= lo)."""
        return (np.searchsorted(self.starts, t, side="right") - 1).astype(np.int64)

    def keys(self) -> list[int]:
        return [int(s) for s in self.starts]


def split_exact(values: list[int], weights: list[int]) -> list[list[int]]:
    """Split integer ``values`` over len(weights) parts: rows sum to values, columns to weights.

    Requires sum(values) == sum(weights). Each part takes its share of every value in proportion
    (largest remainder), so a step cut by a price change keeps its category mix on both sides and
    every nanosecond stays integral.
    """
    total = sum(values)
    if total != sum(weights):
        raise ValueError("split_exact: totals differ")
    remaining = list(values)
    out: list[list[int]] = []
    for j, w in enumerate(weights):
        if j == len(weights) - 1:
            out.append(remaining)
            break
        pool = sum(remaining)
        if pool == 0 or w == 0:
            out.append([0] * len(values))
            continue
        part = largest_remainder([Fraction(v * w, pool) for v in remaining], w)
        remaining = [r - p for r, p in zip(remaining, part, strict=True)]
        out.append(part)
    return out

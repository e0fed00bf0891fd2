"""Straggler attribution: whose slowness the other ranks' exposed comm time is waiting for.

In data-parallel training every rank meets the others at the gradient all-reduce once per step.
A rank's *arrival* is the step time it spent before the sync (everything but exposed comm). For
each step number reported by two or more ranks:

- the step *straggles* when the latest arrival is at least ``STRAGGLE_MIN_EXCESS`` (5%) above the
  median arrival: below that, differences are ordinary jitter and blame would be noise;
- in a straggling step every other rank waits ``min(its comm_ns, latest arrival - its arrival)``:
  the sync cannot finish before the last rank arrives, and a rank cannot have waited longer than
  the exposed comm it measured. That wait is attributed to the latest rank (split evenly when
  several ranks tie, remainders of a nanosecond dropped), so it is a sub-attribution of
  comm_exposed, never extra time;
- a rank is *slow* in a step when its arrival is at least 5% above the step's median; a rank is
  flagged a straggler when it is slow in at least ``STRAGGLER_MIN_SLOW_SHARE`` (half) of the
  aligned steps it took part in, i.e. persistently, not by bad luck.

All counters are integers, so the accumulation is exact and independent of batch boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from phantomhub.waste.core.inputs import IntArray

STRAGGLE_MIN_EXCESS = 0.05
STRAGGLER_MIN_SLOW_SHARE = 0.5


@dataclass
class StragglerCounters:
    """Per-rank integer totals over aligned steps (in the rank table's ``counters`` columns and
    the stored state in this field order)."""

    aligned_steps: int = 0  # steps this rank shared with at least one other rank
    slow_steps: int = 0  # of which it arrived >= 5% after the median
    blamed_steps: int = 0  # straggling steps in which it arrived last
    caused_wait_ns: int = 0  # others' comm wait attributed to it (rank-ns)
    waited_ns: int = 0  # its own comm wait attributed to someone else
    excess2_ns: int = 0  # 2 x sum over blamed steps of (its arrival - median arrival)


@dataclass
class RunTail:
    """Rows of every rank waiting to be aligned (steps not yet known to be complete): pieces of
    (rank, step, arrival, comm) columns in the order they were added, each rank's rows rising.

    One set of columns for the whole run, not a list per rank: a 1,024-rank run adds one piece a
    pass, and alignment takes what is complete with one filter, not a pass over 1,024 lists."""

    rank: list[IntArray] = field(default_factory=list)
    step: list[IntArray] = field(default_factory=list)
    arrival: list[IntArray] = field(default_factory=list)
    comm: list[IntArray] = field(default_factory=list)

    def add(self, rank: IntArray, step: IntArray, arrival: IntArray, comm: IntArray) -> None:
        if len(step):
            self.rank.append(rank)
            self.step.append(step)
            self.arrival.append(arrival)
            self.comm.append(comm)

    def __len__(self) -> int:
        return sum(len(s) for s in self.step)

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """(rank, step, arrival, comm), in the order added (one piece each after this call)."""
        if not self.step:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty
        if len(self.step) > 1:
            self.rank, self.step, self.arrival, self.comm = (
                [np.concatenate(x)] for x in (self.rank, self.step, self.arrival, self.comm)
            )
        return self.rank[0], self.step[0], self.arrival[0], self.comm[0]

    def by_rank(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """The rows ordered by rank, each rank's rows in the order added: (rank, step, arrival, comm)."""
        rank, step, arrival, comm = self.arrays()
        if len(rank) and np.any(rank[1:] < rank[:-1]):
            order = np.argsort(rank, kind="stable")
            return rank[order], step[order], arrival[order], comm[order]
        return rank, step, arrival, comm

    def take_through(self, watermark: int) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """Remove the rows with step <= ``watermark`` and return them (rank, step, arrival, comm),
        in the order added; the rows left keep their order."""
        rank, step, arrival, comm = self.arrays()
        done = step <= watermark
        if done.all():  # the usual case: every waiting row is complete
            self.rank, self.step, self.arrival, self.comm = [], [], [], []
            return rank, step, arrival, comm
        keep = ~done
        self.rank, self.step, self.arrival, self.comm = [rank[keep]], [step[keep]], [arrival[keep]], [comm[keep]]
        if not len(self.step[0]):
            self.rank, self.step, self.arrival, self.comm = [], [], [], []
        return rank[done], step[done], arrival[done], comm[done]

    def copy(self) -> RunTail:
        return RunTail(list(self.rank), list(self.step), list(self.arrival), list(self.comm))


def order_by_step_then_arrival(step: IntArray, arrival: IntArray) -> IntArray:
    """Same order as ``np.lexsort((arrival, step))``, faster in the usual case.

    The rows are one run of rising steps per rank, so a stable sort by step is a cheap merge; when
    every step has the same number of ranks, the per-step sort by arrival is a row-wise sort of a
    (steps x ranks) matrix. Ties keep input order either way, so both paths agree exactly.
    """
    by_step = np.argsort(step, kind="stable")
    sorted_step = step[by_step]
    starts = np.flatnonzero(np.diff(sorted_step, prepend=sorted_step[0] - 1))
    sizes = np.diff(np.append(starts, len(step)))
    k = int(sizes[0])
    if not np.all(sizes == k):
        return np.lexsort((arrival, step)).astype(np.int64)
    grid = by_step.reshape(-1, k)
    within = np.argsort(arrival[grid], axis=1, kind="stable")
    return np.take_along_axis(grid, within, axis=1).ravel().astype(np.int64)


def attribute(
    ranks: list[int], who: IntArray, step: IntArray, arrival: IntArray, comm: IntArray, counters: dict[int, StragglerCounters]
) -> None:
    """Fold complete steps of every rank into ``counters``: row ``j`` (step, arrival, comm)
    belongs to ``ranks[who[j]]`` (``attribute_sums``)."""
    added = attribute_sums(len(ranks), who, step, arrival, comm)
    if added is None:
        return
    for rank, row in zip(ranks, added.tolist(), strict=True):
        c = counters.setdefault(rank, StragglerCounters())
        c.aligned_steps += row[0]
        c.slow_steps += row[1]
        c.blamed_steps += row[2]
        c.caused_wait_ns += row[3]
        c.waited_ns += row[4]
        c.excess2_ns += row[5]


def attribute_sums(n: int, who: IntArray, step: IntArray, arrival: IntArray, comm: IntArray) -> IntArray | None:
    """What complete steps add to the straggler counters of ``n`` ranks: an (n, 6) integer matrix
    in ``StragglerCounters`` order, row ``j`` (step, arrival, comm) belonging to rank ``who[j]``;
    None when no step was shared by two ranks. The rows may come in any order: every counter
    depends on the values of a step's rows, not on which of two equal arrivals comes first."""
    if not len(step):
        return None
    order = order_by_step_then_arrival(step, arrival)
    step, arrival, comm, who = step[order], arrival[order], comm[order], who[order]

    starts = np.flatnonzero(np.diff(step, prepend=step[0] - 1))
    sizes = np.diff(np.append(starts, len(step)))
    multi = sizes >= 2
    if not multi.any():
        return None
    lo = starts + (sizes - 1) // 2
    hi = starts + sizes // 2
    median2 = arrival[lo] + arrival[hi]  # twice the median, kept integral
    latest = arrival[starts + sizes - 1]
    straggles = multi & (2 * latest >= (1 + STRAGGLE_MIN_EXCESS) * median2) & (latest > 0)

    g_median2 = np.repeat(median2, sizes)
    g_latest = np.repeat(latest, sizes)
    g_multi = np.repeat(multi, sizes)
    g_straggles = np.repeat(straggles, sizes)
    is_latest = arrival == g_latest
    slow = g_multi & (2 * arrival >= (1 + STRAGGLE_MIN_EXCESS) * g_median2) & (arrival > 0)

    wait = np.where(g_straggles & ~is_latest, np.minimum(comm, g_latest - arrival), 0)
    group_wait = np.add.reduceat(wait, starts)
    tied = np.add.reduceat(is_latest.astype(np.int64), starts)
    share = np.where(straggles, group_wait // np.maximum(tied, 1), 0)
    blamed = g_straggles & is_latest
    g_share = np.repeat(share, sizes)
    g_excess2 = np.repeat(2 * latest - median2, sizes)

    # Integer sums (exact at any size; a float bincount rounds once a sum passes 2**53).
    out = np.zeros((n, 6), dtype=np.int64)
    for j, values in enumerate((g_multi, slow, blamed, np.where(blamed, g_share, 0), wait, np.where(blamed, g_excess2, 0))):
        np.add.at(out[:, j], who, values.astype(np.int64, copy=False))
    return out

"""The ledger: every rank's clock split by price piece into step categories and idle causes.

For each price piece [lo, hi) clipped to the billed span and each rank, the piece's nanoseconds
are: the step categories accumulated there, the phases, start-up (before the rank's first step),
tear-down (after its last), and the gap that is left, which is never negative because step rows
never overlap. Rank columns are numpy vectors over pieces; sums over ranks are Python integers, so
totals are exact however long the run and however many ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from phantomhub.waste.accumulator import RankState, RunAccumulator
from phantomhub.waste.inputs import STEP_CATEGORIES
from phantomhub.waste.money import NS_PER_HOUR, usd_for

RANK_LABELS: tuple[str, ...] = (*STEP_CATEGORIES, "startup", "gap", "teardown", "no_steps")
_STARTUP, _GAP, _TEARDOWN, _NO_STEPS = range(5, 9)


@dataclass(frozen=True)
class Ledger:
    pieces: list[tuple[int, int, Fraction | None]]  # (lo, hi, usd_per_gpu_hour) within the span
    labels: list[str]  # step categories, then idle causes present in this run
    total_ns: dict[str, int]  # rank-nanoseconds over all ranks and pieces
    usd_exact: dict[str, Fraction]
    rank_ns: list[dict[str, int]]  # per rank slot
    rank_usd: list[dict[str, float]]  # per rank slot, exact shares as floats
    cost_exact: Fraction
    unpriced_ns: int


def ledger_build(acc: RunAccumulator, end_ns: int, slots: list[RankState | None], gpu_per_slot: Fraction) -> Ledger:
    cov = acc.ctx.coverage
    start = acc.config.allocation_start_ns
    all_lo = acc.ctx.pieces.starts
    all_hi = np.minimum(acc.ctx.pieces.ends(), end_ns)
    keep = all_hi > all_lo
    lo, hi = all_lo[keep], all_hi[keep]
    prices = [p for p, k in zip(acc.ctx.pieces.prices, keep.tolist(), strict=True) if k]
    price_f = np.array([0.0 if p is None else float(p) for p in prices])
    span = hi - lo

    phase_cols = {f"phase:{n}": cov.only(n).covered_between(lo, hi) for n in sorted(set(cov.names))}
    phase_cols = {k: v for k, v in phase_cols.items() if v.any()}
    free = span - cov.covered_between(lo, hi)

    total: Any = np.zeros((len(lo), len(RANK_LABELS)), dtype=object)
    rank_ns: list[dict[str, int]] = []
    rank_usd: list[dict[str, float]] = []
    used = np.zeros(len(RANK_LABELS), dtype=bool)
    used[:_STARTUP] = True  # step categories always appear, if only as zeros
    usd_per_ns = price_f * float(gpu_per_slot) / NS_PER_HOUR
    for rs in slots:
        m = np.zeros((len(lo), len(RANK_LABELS)), dtype=np.int64)
        if rs is None or rs.first_s is None or rs.last_e is None:
            m[:, _NO_STEPS] = free
            used[_NO_STEPS] = True
        else:
            if rs.piece_ns[~keep].any():
                raise RuntimeError(f"rank {rs.rank}: step time outside the billed span")
            m[:, :5] = rs.piece_ns[keep]
            m[:, _STARTUP] = cov.uncovered_between(np.maximum(lo, start), np.minimum(hi, rs.first_s))
            m[:, _TEARDOWN] = cov.uncovered_between(np.maximum(lo, rs.last_e), hi)
            m[:, _GAP] = free - m[:, :5].sum(axis=1) - m[:, _STARTUP] - m[:, _TEARDOWN]
            if (m[:, _GAP] < 0).any():
                raise RuntimeError(f"rank {rs.rank}: time counted twice")
            used[:_NO_STEPS] = True
        total += m.astype(object)
        ns = dict(zip(RANK_LABELS, (int(v) for v in m.sum(axis=0)), strict=True))
        usd = dict(zip(RANK_LABELS, (float(v) for v in usd_per_ns @ m), strict=True))
        for label, col in phase_cols.items():
            ns[label] = int(col.sum())
            usd[label] = float(usd_per_ns @ col)
        rank_ns.append(ns)
        rank_usd.append(usd)

    labels = [lbl for lbl, u in zip(RANK_LABELS, used, strict=True) if u]
    total_ns: dict[str, int] = {}
    usd_exact: dict[str, Fraction] = {}
    columns: dict[str, list[int]] = {lbl: [int(v) for v in total[:, RANK_LABELS.index(lbl)]] for lbl in labels}
    for label, phase_col in phase_cols.items():
        columns[label] = [int(v) * len(slots) for v in phase_col]
    for label, values in columns.items():
        total_ns[label] = sum(values)
        usd_exact[label] = sum((usd_for(ns * gpu_per_slot, p) for ns, p in zip(values, prices, strict=True)), Fraction(0))
    gpu_count = acc.config.gpu_count
    return Ledger(
        pieces=list(zip(lo.tolist(), hi.tolist(), prices, strict=True)),
        labels=[
            *(lbl for lbl in labels if lbl != "no_steps"),
            *sorted(phase_cols),
            *(["no_steps"] if "no_steps" in labels else []),
        ],
        total_ns=total_ns,
        usd_exact=usd_exact,
        rank_ns=rank_ns,
        rank_usd=rank_usd,
        cost_exact=sum((usd_for(gpu_count * int(s), p) for s, p in zip(span, prices, strict=True)), Fraction(0)),
        unpriced_ns=int(sum(int(s) for s, p in zip(span, prices, strict=True) if p is None)),
    )

"""The ledger: every rank's clock split by price piece into step categories and idle causes.

For each price piece [lo, hi) clipped to the billed span and each rank, the piece's nanoseconds
are: the step categories accumulated there, rework (a job's steps an earlier attempt already
computed), the phases, start-up (before the rank's first step), tear-down (after its last), and
the gap that is left, which is never negative because step rows never overlap. In a job's
attempt, start-up and tear-down are labelled ``restart`` when the configuration says they are a
restart's (``RunConfig.restart_before_first_step`` / ``restart_after_last_step``), and so is a
rank without steps. Rank columns are numpy vectors over pieces; sums over ranks are Python integers, so
totals are exact however long the run and however many ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from phantomhub.waste.core.accumulator import RankState, RunAccumulator
from phantomhub.waste.core.inputs import STEP_CATEGORIES
from phantomhub.waste.core.money import NS_PER_HOUR, usd_for

RANK_LABELS: tuple[str, ...] = (*STEP_CATEGORIES, "rework", "startup", "gap", "teardown", "no_steps")
_REWORK, _STARTUP, _GAP, _TEARDOWN, _NO_STEPS = range(5, 10)
# A job's lost work (docs/waste-model.md, "Jobs"): cause -> the idle labels it is made of.
LOST_CAUSES: dict[str, tuple[str, ...]] = {
    "rework": ("rework",),
    "restart": ("restart",),
    "checkpoint": ("phase:checkpoint", "phase:restore"),
}


@dataclass(frozen=True)
class Ledger:
    pieces: list[tuple[int, int, Fraction | None]]  # (lo, hi, usd_per_gpu_hour) within the span
    labels: list[str]  # step categories, then idle causes present in this run
    total_ns: dict[str, int]  # rank-nanoseconds over all ranks and pieces
    usd_exact: dict[str, Fraction]
    rank_ns: list[list[int]]  # per rank slot, per category (CATEGORIES order; idle: every idle cause)
    rank_usd: list[list[float]]  # the same, exact shares as floats
    cost_exact: Fraction
    unpriced_ns: int
    # Per rank slot, per lost cause (LOST_CAUSES): rank-nanoseconds and exact dollars as floats.
    rank_lost_ns: list[dict[str, int]]
    rank_lost_usd: list[dict[str, float]]
    # The restart label's two sides: "before" the first step (start-up, or a rank without steps
    # after an earlier attempt) and "after" the last (tear-down after a failure): rank-ns and dollars.
    restart_sides: dict[str, tuple[int, Fraction]]


def _rank_matrix(acc: RunAccumulator, slots: list[RankState | None], keep: Any, lo: Any, hi: Any, free: Any) -> tuple[Any, Any]:
    """(slots, pieces, labels) nanoseconds, all ranks at once, and which labels occur."""
    cov = acc.ctx.coverage
    start = acc.config.allocation_start_ns
    m = np.zeros((len(slots), len(lo), len(RANK_LABELS)), dtype=np.int64)
    used = np.zeros(len(RANK_LABELS), dtype=bool)
    used[:_REWORK] = True  # step categories always appear, if only as zeros
    stepped = [i for i, rs in enumerate(slots) if rs is not None and rs.first_s is not None and rs.last_e is not None]
    if len(stepped) < len(slots):
        stepped_set = set(stepped)
        m[[i for i in range(len(slots)) if i not in stepped_set], :, _NO_STEPS] = free
        used[_NO_STEPS] = True
    if not stepped:
        return m, used
    ranks = [rs for rs in (slots[i] for i in stepped) if rs is not None]
    pieces = np.stack([rs.piece_ns for rs in ranks])
    outside = pieces[:, ~keep].any(axis=(1, 2))
    if outside.any():
        raise RuntimeError(f"rank {ranks[int(np.flatnonzero(outside)[0])].rank}: step time outside the billed span")
    first = np.array([[rs.first_s] for rs in ranks], dtype=np.int64)
    last = np.array([[rs.last_e] for rs in ranks], dtype=np.int64)
    sub = np.zeros((len(ranks), len(lo), len(RANK_LABELS)), dtype=np.int64)
    sub[:, :, :_STARTUP] = pieces[:, keep]
    low, high = np.broadcast_to(lo, sub.shape[:2]), np.broadcast_to(hi, sub.shape[:2])
    sub[:, :, _STARTUP] = cov.uncovered_between(np.maximum(low, start), np.minimum(high, first))
    sub[:, :, _TEARDOWN] = cov.uncovered_between(np.maximum(low, last), high)
    sub[:, :, _GAP] = free - sub[:, :, :_STARTUP].sum(axis=2) - sub[:, :, _STARTUP] - sub[:, :, _TEARDOWN]
    twice = (sub[:, :, _GAP] < 0).any(axis=1)
    if twice.any():
        raise RuntimeError(f"rank {ranks[int(np.flatnonzero(twice)[0])].rank}: time counted twice")
    m[stepped] = sub
    used[_STARTUP:_NO_STEPS] = True
    used[_REWORK] = bool(sub[:, :, _REWORK].any())
    return m, used


def _label_of(config: Any) -> dict[str, str]:
    """The idle labels of a job's attempt: start-up, tear-down and a rank without steps are a
    restart's when the configuration says so (docs/waste-model.md, "Jobs")."""
    before, after = config.restart_before_first_step, config.restart_after_last_step
    return {
        "startup": "restart" if before else "startup",
        "teardown": "restart" if after else "teardown",
        "no_steps": "restart" if before or after else "no_steps",
    }


def ledger_build(acc: RunAccumulator, end_ns: int, slots: list[RankState | None], gpu_per_slot: Fraction) -> Ledger:
    cov = acc.ctx.coverage
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

    m, used = _rank_matrix(acc, slots, keep, lo, hi, free)
    # Exact totals over ranks: int64 while it cannot overflow, Python integers beyond.
    if len(slots) * (int(span.max()) if len(span) else 0) < 2**62:
        total: Any = m.sum(axis=0)
    else:
        total = m.astype(object).sum(axis=0)
    usd_per_ns = price_f * float(gpu_per_slot) / NS_PER_HOUR
    per_rank_ns = m.sum(axis=1)
    per_rank_usd = np.matmul(usd_per_ns, m)
    phase_ns = [int(col.sum()) for col in phase_cols.values()]
    phase_usd = [float(usd_per_ns @ col) for col in phase_cols.values()]
    # Per rank and category, all ranks at once: a step category is its label; idle adds its
    # causes in label order, then the run's phases (every rank carries them), as a sum over one
    # rank's labels in that order would (the same float additions, so the same bits).
    idle_ns: Any = per_rank_ns[:, _REWORK : _NO_STEPS + 1].astype(object).sum(axis=1) + sum(phase_ns)
    idle_usd = np.zeros(len(slots))
    for j in range(_REWORK, _NO_STEPS + 1):
        idle_usd = idle_usd + per_rank_usd[:, j]
    for u in phase_usd:
        idle_usd = idle_usd + u
    rank_ns = [[*row, int(idle)] for row, idle in zip(per_rank_ns[:, :_REWORK].tolist(), idle_ns.tolist(), strict=True)]
    rank_usd = np.column_stack((0.0 + per_rank_usd[:, :_REWORK], idle_usd)).tolist()

    relabel = _label_of(acc.config)
    # Per rank, the lost causes: rework, the restart labels, the checkpoint phases (every rank's clock).
    restart_cols = [RANK_LABELS.index(k) for k, v in relabel.items() if v == "restart"]
    ckpt = [(phase_ns[i], phase_usd[i]) for i, lbl in enumerate(phase_cols) if lbl in LOST_CAUSES["checkpoint"]]
    ckpt_ns, ckpt_usd = sum(n for n, _ in ckpt), sum(u for _, u in ckpt)
    rank_lost_ns = [
        {"rework": int(row[_REWORK]), "restart": int(sum(row[j] for j in restart_cols)), "checkpoint": ckpt_ns}
        for row in per_rank_ns.tolist()
    ]
    rank_lost_usd = [
        {"rework": float(row[_REWORK]), "restart": float(sum(row[j] for j in restart_cols)), "checkpoint": float(ckpt_usd)}
        for row in per_rank_usd.tolist()
    ]

    labels = [lbl for lbl, u in zip(RANK_LABELS, used, strict=True) if u]
    total_ns: dict[str, int] = {}
    usd_exact: dict[str, Fraction] = {}
    columns: dict[str, list[int]] = {}
    sides: dict[str, tuple[int, Fraction]] = {"before": (0, Fraction(0)), "after": (0, Fraction(0))}
    for lbl in labels:
        col = [int(v) for v in total[:, RANK_LABELS.index(lbl)]]
        name = relabel.get(lbl, lbl)
        columns[name] = [a + b for a, b in zip(columns[name], col, strict=True)] if name in columns else col
        if name == "restart":
            side = "after" if lbl == "teardown" or (lbl == "no_steps" and not acc.config.restart_before_first_step) else "before"
            ns, usd = sides[side]
            part = sum((usd_for(v * gpu_per_slot, p) for v, p in zip(col, prices, strict=True)), Fraction(0))
            sides[side] = (ns + sum(col), usd + part)
    for label, phase_col in phase_cols.items():
        columns[label] = [int(v) * len(slots) for v in phase_col]
    for label, values in columns.items():
        total_ns[label] = sum(values)
        usd_exact[label] = sum((usd_for(ns * gpu_per_slot, p) for ns, p in zip(values, prices, strict=True)), Fraction(0))
    gpu_count = acc.config.gpu_count
    ordered = [
        *(relabel.get(lbl, lbl) for lbl in labels if lbl != "no_steps"),
        *sorted(phase_cols),
        *([relabel["no_steps"]] if "no_steps" in labels else []),
    ]
    return Ledger(
        pieces=list(zip(lo.tolist(), hi.tolist(), prices, strict=True)),
        labels=list(dict.fromkeys(ordered)),
        total_ns=total_ns,
        usd_exact=usd_exact,
        rank_ns=rank_ns,
        rank_usd=rank_usd,
        cost_exact=sum((usd_for(gpu_count * int(s), p) for s, p in zip(span, prices, strict=True)), Fraction(0)),
        unpriced_ns=int(sum(int(s) for s, p in zip(span, prices, strict=True) if p is None)),
        rank_lost_ns=rank_lost_ns,
        rank_lost_usd=rank_lost_usd,
        restart_sides=sides,
    )

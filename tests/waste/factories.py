"""Synthetic runs of known composition for the waste-model tests (plain numpy, no database)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from phantomhub.waste.core.model import Analysis, RunConfig, StepColumns

S = 10**9  # nanoseconds per second
MS = 10**6


def steps(
    *,
    rank: int = 0,
    host: str = "node-0",
    starts_ns: Sequence[int],
    dur_ns: Sequence[int] | int,
    **columns: Any,
) -> StepColumns:
    """Rows for one rank; scalar column values are repeated for every row."""
    n = len(starts_ns)

    def col(value: Any) -> Any:
        return np.full(n, value) if np.isscalar(value) else np.asarray(value)

    return StepColumns(
        rank=rank,
        host=host,
        step=np.arange(n),
        t_start_ns=np.asarray(starts_ns, dtype=np.int64),
        dur_ns=col(dur_ns),
        **{k: col(v) for k, v in columns.items()},
    )


def cents_by_category(analysis: Analysis) -> dict[str, int]:
    return {c.category: c.usd_cents for c in analysis.categories}


def gpu_seconds_by_category(analysis: Analysis) -> dict[str, float]:
    return {c.category: c.gpu_seconds for c in analysis.categories}


def exact_cost_usd(config: RunConfig, end_ns: int) -> Fraction:
    """The run's cost straight from the price segments, independent of the model's code."""
    total = Fraction(0)
    for seg in config.price_segments:
        lo = max(seg.start_ns, config.allocation_start_ns)
        hi = min(seg.end_ns, end_ns)
        if hi > lo:
            total += Fraction(config.gpu_count * (hi - lo)) * seg.price() / (3600 * S)
    return total


def round_half_up_cents(usd: Fraction) -> int:
    return int((usd * 100 + Fraction(1, 2)) // 1)

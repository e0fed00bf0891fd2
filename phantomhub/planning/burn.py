"""A live run's spend rate, read from its stored analysis. Pure: the budget forecast (layer 7,
planning) and the alert rules above it (alerts/figures.py re-exports it) read the same rate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def run_usd_per_hour(result: Mapping[str, Any]) -> float:
    """The run's spend rate: its cost so far over its priced hours (gpu_count × its price).

    From unrounded figures: the exact dollars the analysis keeps beside the cost rounded to cents
    (``explain.cost_usd.inputs.exact_usd``), over the hours a price covers, so a short run's
    rounding never reads $38.51/h for a $38.40/h price. An analysis without the exact figure
    falls back to the rounded cost."""
    hours = float(result.get("run_hours") or 0.0)
    gpu_count = float(result.get("gpu_count") or 0.0)
    if gpu_count > 0:
        hours -= float(result.get("unpriced_gpu_seconds") or 0.0) / gpu_count / 3600
    if hours <= 0:
        return 0.0
    inputs = ((result.get("explain") or {}).get("cost_usd") or {}).get("inputs") or {}
    exact = inputs.get("exact_usd")
    usd = float(exact) if isinstance(exact, (int, float)) else float(result.get("cost_usd") or 0.0)
    return usd / hours

"""An alert's run rate comes from unrounded dollars over priced hours, not the cost rounded to cents."""

from __future__ import annotations

import pytest

from phantomhub.alerts.figures import run_usd_per_hour


def _result(*, cost_cents: int, exact_usd: float, run_hours: float, gpu_count: int = 8, unpriced_gpu_s: float = 0.0) -> dict:
    return {
        "cost_usd": cost_cents / 100,
        "run_hours": run_hours,
        "gpu_count": gpu_count,
        "unpriced_gpu_seconds": unpriced_gpu_s,
        "explain": {"cost_usd": {"value": cost_cents / 100, "inputs": {"exact_usd": exact_usd}}},
    }


def test_the_rate_of_a_short_run_is_its_price_not_its_rounded_cost_over_hours() -> None:
    # 8 GPUs at $4.80 for 47 s: $0.50133…, rounded to $0.50; the rounded cost over the hours
    # reads $38.30/h, the exact dollars the price's $38.40/h.
    hours = 47 / 3600
    exact = 8 * 4.80 * hours
    r = _result(cost_cents=round(exact * 100), exact_usd=exact, run_hours=hours)
    assert (r["cost_usd"] / hours) != pytest.approx(38.40, abs=0.005)
    assert run_usd_per_hour(r) == pytest.approx(38.40, abs=1e-9)


def test_time_no_price_covers_does_not_dilute_the_rate() -> None:
    hours = 2.0
    priced_h = 1.5  # the first half hour of all 8 GPUs had no price
    exact = 8 * 4.80 * priced_h
    r = _result(cost_cents=round(exact * 100), exact_usd=exact, run_hours=hours, unpriced_gpu_s=8 * 0.5 * 3600)
    assert run_usd_per_hour(r) == pytest.approx(38.40)


def test_an_analysis_without_exact_dollars_falls_back_to_the_rounded_cost() -> None:
    r = {"cost_usd": 76.80, "run_hours": 2.0, "gpu_count": 8}
    assert run_usd_per_hour(r) == pytest.approx(38.40)
    assert run_usd_per_hour({"cost_usd": 1.0, "run_hours": 0}) == 0.0

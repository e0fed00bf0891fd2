"""The month-end forecast (phantomhub/planning/forecast.py) against an independent computation:
numpy's mean and sample deviation, and the normal distribution's own quantiles (statistics.
NormalDist), on generated months. No database: pure."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phantomhub.planning.forecast import ForecastInput, month_forecast
from tests.examples import examples

SETTINGS = settings(max_examples=examples(300), deadline=None)
DAY_USD = st.floats(min_value=0, max_value=50_000, allow_nan=False, allow_infinity=False)


@st.composite
def months(draw: st.DrawFn) -> tuple[ForecastInput, int]:
    """A month of 28 to 31 days seen on one of its days: the days before it closed, today partly
    spent, some runs burning."""
    length = draw(st.integers(28, 31))
    today = draw(st.integers(1, length))  # day of the month, 1-based
    closed = draw(st.lists(DAY_USD, min_size=today - 1, max_size=today - 1))
    given_ = ForecastInput(
        closed_days_usd=closed,
        today_usd=draw(DAY_USD),
        burn_usd_per_hour=draw(st.floats(0, 5_000, allow_nan=False)),
        hours_left_today=draw(st.floats(0, 24, allow_nan=False)),
        days_left=length - today,
    )
    return given_, length


def oracle(given_: ForecastInput) -> tuple[float, float, float]:
    """point, p10, p90 computed another way: numpy's statistics, NormalDist's quantiles."""
    closed = np.asarray(given_.closed_days_usd, dtype=np.float64)
    k, n = closed.size, given_.days_left
    spent = float(closed.sum()) + given_.today_usd
    rate = float(closed.mean()) if k else given_.burn_usd_per_hour * 24
    spread = float(closed.std(ddof=1)) if k >= 2 else rate
    point = spent + given_.burn_usd_per_hour * given_.hours_left_today + n * rate
    sd_total = spread * math.sqrt(n * (1 + n / max(k, 1)))
    if sd_total == 0:
        return point, point, point
    dist = NormalDist(point, sd_total)
    return point, max(dist.inv_cdf(0.1), spent), dist.inv_cdf(0.9)


def close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= 1e-6 * max(scale, 1.0)


@SETTINGS
@given(months())
def test_the_forecast_matches_an_independent_computation(month: tuple[ForecastInput, int]) -> None:
    given_, _ = month
    got = month_forecast(given_)
    point, p10, p90 = oracle(given_)
    scale = abs(point) + abs(p90)
    assert close(got.point_usd, point, scale)
    assert close(got.p10_usd, p10, scale)
    assert close(got.p90_usd, p90, scale)


@SETTINGS
@given(months())
def test_the_interval_holds_the_point_and_never_falls_below_the_spend(month: tuple[ForecastInput, int]) -> None:
    given_, _ = month
    got = month_forecast(given_)
    spent = math.fsum(given_.closed_days_usd) + given_.today_usd
    assert got.spent_usd == pytest.approx(spent)
    assert spent - 1e-6 <= got.p10_usd <= got.point_usd + 1e-6 <= got.p90_usd + 2e-6


@SETTINGS
@given(st.integers(2, 30), DAY_USD, st.integers(0, 29))
def test_a_month_of_equal_days_is_forecast_exactly(k: int, day: float, n: int) -> None:
    got = month_forecast(ForecastInput(closed_days_usd=[day] * k, days_left=n))
    assert got.point_usd == pytest.approx(day * (k + n))
    assert got.p10_usd == pytest.approx(got.point_usd) and got.p90_usd == pytest.approx(got.point_usd)


@SETTINGS
@given(st.lists(DAY_USD, min_size=28, max_size=31))
def test_a_month_seen_after_its_end_is_its_total(days: list[float]) -> None:
    got = month_forecast(ForecastInput(closed_days_usd=days))
    assert got.point_usd == pytest.approx(math.fsum(days))
    assert got.p10_usd == got.point_usd == got.p90_usd


def test_the_first_day_forecasts_from_the_live_burn() -> None:
    got = month_forecast(ForecastInput(closed_days_usd=[], today_usd=10, burn_usd_per_hour=2, hours_left_today=5, days_left=29))
    assert got.basis == "live_burn"
    assert got.point_usd == pytest.approx(10 + 2 * 5 + 29 * 48)
    assert got.p90_usd > got.point_usd  # a month with no closed day is uncertain


@pytest.mark.parametrize(
    ("field", "value"),
    [("closed_days_usd", [-1.0]), ("closed_days_usd", [math.nan]), ("today_usd", -1.0), ("burn_usd_per_hour", math.inf)],
)
def test_impossible_inputs_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        month_forecast(ForecastInput(**{"closed_days_usd": [], field: value}))  # type: ignore[arg-type]

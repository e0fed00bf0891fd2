"""The month-end forecast of a budget's spend: pure (no Django, no database, no clock), so it is
property-tested against an independent computation (tests/planning/test_forecast_properties.py)
and backtested on the demo's months (bench/forecast_backtest.py). docs/budgets.md, "Forecast".

Inputs, in billed GPU dollars (the `cost_usd` finance totals):
- the month's closed days so far (every day before today, a day without spend as 0);
- today's spend so far;
- the live runs' current burn ($/h, each running run's cost so far over its priced hours);
- the hours left today and the whole days left after today.

The point forecast is what is spent, plus the live burn for the rest of today, plus each day left
at the mean of the closed days (at the live burn × 24 while no day has closed):

    point = sum(closed) + today + burn × hours_left + days_left × mean(closed)

The interval treats the days left as independent draws from the closed days' spread: the sum of
n of them has variance n·s², and the mean they are drawn around is itself uncertain by s²/k, which
n days multiply to n²·s²/k (the prediction interval of a sum of n new observations):

    half-width = z × s × sqrt(n + n² / k),   z = 1.2816 (the normal's 10th/90th percentile)
    p10 = max(point − half-width, spent so far),   p90 = point + half-width

With fewer than two closed days there is no spread to measure: s is taken as the mean itself (a
coefficient of variation of 1), and k as 1, so the first days of a month show a wide interval.
The lower end never goes below what is already spent: spend does not go back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# The standard normal's 90th percentile: p10 and p90 lie this many standard deviations either side.
Z_P90 = 1.2815515655446004


@dataclass(frozen=True)
class ForecastInput:
    closed_days_usd: Sequence[float]  # each closed day of the month so far, a day without spend as 0
    today_usd: float = 0.0  # today's spend so far (0 for a month seen after its end)
    burn_usd_per_hour: float = 0.0  # the live runs' current spend rate
    hours_left_today: float = 0.0
    days_left: int = 0  # whole days after today until the month's end


@dataclass(frozen=True)
class Forecast:
    spent_usd: float  # closed days + today so far
    point_usd: float
    p10_usd: float
    p90_usd: float
    daily_mean_usd: float  # the rate the days left are forecast at
    daily_sd_usd: float  # the spread the interval is built from
    basis: str  # "closed_days" (the mean of the closed days) or "live_burn" (no day closed yet)


def month_forecast(given: ForecastInput) -> Forecast:
    closed = [float(x) for x in given.closed_days_usd]
    if any(x < 0 or not math.isfinite(x) for x in closed):
        raise ValueError("closed_days_usd: every day must be a finite amount, at least 0")
    for name in ("today_usd", "burn_usd_per_hour", "hours_left_today"):
        value = float(getattr(given, name))
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"{name}: must be a finite amount, at least 0")
    if given.days_left < 0:
        raise ValueError("days_left: must be at least 0")
    k = len(closed)
    spent = math.fsum(closed) + given.today_usd
    if k:
        mean, basis = math.fsum(closed) / k, "closed_days"
    else:
        mean, basis = given.burn_usd_per_hour * 24, "live_burn"
    if k >= 2:
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in closed) / (k - 1))
    else:
        sd = mean
    n = given.days_left
    point = spent + given.burn_usd_per_hour * given.hours_left_today + n * mean
    half = Z_P90 * sd * math.sqrt(n + n * n / max(k, 1))
    return Forecast(
        spent_usd=spent,
        point_usd=point,
        p10_usd=max(point - half, spent),
        p90_usd=point + half,
        daily_mean_usd=mean,
        daily_sd_usd=sd,
        basis=basis,
    )

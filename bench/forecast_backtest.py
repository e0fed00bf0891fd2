"""Backtest of the budget forecast (phantomhub/planning/forecast.py) on the demo's 90 days.

Seeds the demo organization (`manage.py seeddemo --skip-training`: a few hundred generated runs
over the last 90 days, posted through the ingest API and analysed) into a fresh PostgreSQL
database, then, for every calendar month the data covers from its first day to its last, and for
the whole organization and each team, forecasts the month's billed dollars as seen after day 7,
14 and 21 (those days closed; nothing of the later days known; no live burn, which a past month
no longer has) and compares the forecast with the month's actual total: the absolute % error of
the point, and whether the actual fell inside [p10, p90]. Prints the table and writes
bench/results/forecast_backtest.json.

    .venv/bin/python bench/forecast_backtest.py [--database-url postgres://postgres@127.0.0.1:5432/ph_budgets] [--runs 300]
    .venv/bin/python bench/forecast_backtest.py --no-seed   # the database as it is (already seeded)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import brokerless_django  # noqa: E402

CHECK_DAYS = (7, 14, 21)
ORG_FIELDS = ("month", "actual_usd", "point_usd", "p10_usd", "p90_usd", "abs_pct_error", "inside")


def month_days(first: date) -> list[date]:
    nxt = date(first.year + (first.month == 12), first.month % 12 + 1, 1)
    return [first + timedelta(days=i) for i in range((nxt - first).days)]


def backtest(daily: dict[str, dict[date, float]], months: list[date]) -> list[dict[str, Any]]:
    """Per scope, month and check day: the forecast, the actual, the error, inside or not."""
    from phantomhub.planning.forecast import ForecastInput, month_forecast

    rows = []
    for scope, by_day in sorted(daily.items()):
        for first in months:
            days = month_days(first)
            spend = [by_day.get(d, 0.0) for d in days]
            actual = sum(spend)
            if actual <= 0:
                continue  # no spend to forecast (a % error is undefined)
            for seen in CHECK_DAYS:
                got = month_forecast(ForecastInput(closed_days_usd=spend[:seen], days_left=len(days) - seen))
                rows.append(
                    {
                        "scope": scope,
                        "month": f"{first:%Y-%m}",
                        "day": seen,
                        "actual_usd": round(actual, 2),
                        "point_usd": round(got.point_usd, 2),
                        "p10_usd": round(got.p10_usd, 2),
                        "p90_usd": round(got.p90_usd, 2),
                        "abs_pct_error": round(abs(got.point_usd - actual) / actual * 100, 2),
                        "inside": got.p10_usd <= actual <= got.p90_usd,
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_budgets"),
    )
    parser.add_argument("--runs", type=int, default=300, help="the demo's generated runs (seeddemo's default)")
    parser.add_argument("--no-seed", action="store_true", help="read the database as it is")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "forecast_backtest.json"))
    args = parser.parse_args()
    started = time.monotonic()
    if args.no_seed:
        os.environ.update({"PHANTOMHUB_DATABASE_URL": args.database_url, "DJANGO_SETTINGS_MODULE": "phantomhub.settings"})
        import django

        django.setup()
    else:
        brokerless_django(args.database_url)
        from django.core.management import call_command

        call_command("seeddemo", "--skip-training", "--runs", str(args.runs))
    from phantomhub.waste.models import ProjectDay

    daily: dict[str, dict[date, float]] = defaultdict(lambda: defaultdict(float))
    for day, team, cost in ProjectDay.objects.values_list("day", "project__team__slug", "cost_usd"):
        daily["org"][day] += float(cost)
        daily[f"team {team}"][day] += float(cost)
    first_day, last_day = min(daily["org"]), max(daily["org"])
    today = datetime.now(UTC).date()
    months = []
    cursor = date(first_day.year, first_day.month, 1)
    while cursor <= last_day:
        days = month_days(cursor)
        if days[0] >= first_day and days[-1] < today:  # whole months only, and over
            months.append(cursor)
        cursor = days[-1] + timedelta(days=1)
    rows = backtest(daily, months)
    summary = []
    for seen in CHECK_DAYS:
        at = [r for r in rows if r["day"] == seen]
        org = [r for r in at if r["scope"] == "org"]
        summary.append(
            {
                "day": seen,
                "forecasts": len(at),
                "mean_abs_pct_error": round(statistics.fmean(r["abs_pct_error"] for r in at), 2) if at else None,
                "median_abs_pct_error": round(statistics.median(r["abs_pct_error"] for r in at), 2) if at else None,
                "inside_share": round(sum(r["inside"] for r in at) / len(at), 3) if at else None,
                "org": [{k: r[k] for k in ORG_FIELDS} for r in org],
            }
        )
    print(f"data {first_day}..{last_day}; whole months: {', '.join(f'{m:%Y-%m}' for m in months) or 'none'}")
    print(f"{'seen after':>10} {'forecasts':>9} {'mean |err|':>10} {'median':>8} {'inside p10-p90':>15}")
    for s in summary:
        label = f"day {s['day']}"
        print(
            f"{label:>10} {s['forecasts']:>9} {s['mean_abs_pct_error']:>9}% {s['median_abs_pct_error']:>7}% "
            f"{s['inside_share']:>15}"
        )
    print("\norganization total:")
    print(f"{'month':>8} {'day':>4} {'actual $':>12} {'point $':>12} {'p10 $':>12} {'p90 $':>12} {'|err| %':>8} inside")
    for r in (r for r in rows if r["scope"] == "org"):
        print(
            f"{r['month']:>8} {r['day']:>4} {r['actual_usd']:>12,.2f} {r['point_usd']:>12,.2f} {r['p10_usd']:>12,.2f} "
            f"{r['p90_usd']:>12,.2f} {r['abs_pct_error']:>8.2f} {r['inside']}"
        )
    out = {
        "bench": "forecast_backtest",
        "at": datetime.now(UTC).isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "data": {"first_day": first_day.isoformat(), "last_day": last_day.isoformat(), "runs": args.runs},
        "months": [f"{m:%Y-%m}" for m in months],
        "summary": summary,
        "rows": rows,
        "seconds": round(time.monotonic() - started, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

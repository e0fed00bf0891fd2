"""A run's per-day rows (RunDay) and the per-project day rollups (ProjectDay) built from them.

The analysis pass (waste/services.py) writes a run's RunDay rows with `run_days` and marks their
days; `rollups_rebuild` (from the sweep, waste/sweeps.py) rebuilds each marked day's ProjectDay
rows from RunDay, so every page that sums days sums the same rows (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from phantomhub.pricing.selectors import PriceSegment as PriceSegmentRow
from phantomhub.telemetry.bounds import moment_of, ns_of
from phantomhub.telemetry.models import Run
from phantomhub.waste.core.model import CATEGORIES, Analysis, RunConfig
from phantomhub.waste.core.money import cents_allocate
from phantomhub.waste.models import ProjectDay, RollupPending, RunAnalysis, RunDay


def _day_span_ns(day: date, start: int, end: int) -> tuple[int, int]:
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return max(start, ns_of(midnight)), min(end, ns_of(midnight + timedelta(days=1)))


def _day_weights(config: RunConfig, analysis: Analysis) -> tuple[dict[date, Fraction], dict[date, Fraction]]:
    """Each UTC day's share of the run's billed dollars (price × time) and of its billed time.

    Categories are spread over days in proportion to the dollars of each day: a day's category
    mix is the run's mix (documented approximation; the per-day totals are exact).
    """
    start, end = analysis.allocation_start_ns, analysis.end_ns
    segments = [(s.start_ns, s.end_ns, s.price()) for s in config.price_segments]
    dollars: dict[date, Fraction] = {}
    time: dict[date, Fraction] = {}
    day = moment_of(start).date()
    span = max(end - start, 1)
    while True:
        lo, hi = _day_span_ns(day, start, end)
        if lo >= end and dollars:
            break
        dollars[day] = sum((Fraction(max(0, min(hi, b) - max(lo, a))) * p for a, b, p in segments), Fraction(0))
        time[day] = Fraction(max(0, hi - lo), span)
        day += timedelta(days=1)
    if sum(dollars.values()) == 0:
        dollars = dict(time)
    return dollars, time


def run_days(
    run: Run,
    team_id: int,
    row: RunAnalysis,
    analysis: Analysis,
    config: RunConfig,
    price_rows: list[PriceSegmentRow],
    old_days: set[date] | None = None,
) -> tuple[list[RunDay], bool, list[date]]:
    """The run's RunDay rows, whether it no longer covers a day it had rows for (its other rows
    are then deleted), and the days to mark for a rollup (both). ``old_days`` (the days the
    stored state says were written last time) saves reading them."""
    weights, time_weights = _day_weights(config, analysis)
    days = sorted(weights)
    keys = [d.isoformat() for d in days]
    by_cat = {
        fig.category: cents_allocate(fig.usd_cents, {k: weights[d] for k, d in zip(keys, days)}) for fig in analysis.categories
    }
    # The run's recoverable cents follow its dollars over the days, so days sum to the run exactly.
    recoverable = cents_allocate(round(analysis.recoverable_usd * 100), {k: weights[d] for k, d in zip(keys, days)})
    # A job's lost work likewise (docs/waste-model.md, "Jobs"): its per-cause split stays in the result.
    lost = cents_allocate(analysis.lost.usd_cents, {k: weights[d] for k, d in zip(keys, days)})
    if old_days is None:
        old_days = set(RunDay.objects.filter(run=run).values_list("day", flat=True))
    rows = []
    for key, day in zip(keys, days):
        cats = {name: by_cat[name][key] / 100 for name in CATEGORIES}
        cost_cents = sum(by_cat[name][key] for name in CATEGORIES)
        waste_cents = cost_cents - by_cat["useful_compute"][key]
        seconds = float(time_weights[day]) * analysis.billed_gpu_seconds
        rows.append(
            RunDay(
                run_id=run.pk,
                day=day,
                project_id=run.project_id,
                team_id=team_id,
                gpu_key=row.gpu_key,
                gpu_seconds=seconds,
                cost_usd=Decimal(cost_cents) / 100,
                waste_usd=Decimal(waste_cents) / 100,
                price_entry_ids=_entries_on(day, analysis, price_rows),
                categories_usd=cats,
                recoverable_usd=Decimal(recoverable[key]) / 100,
                lost_usd=Decimal(lost[key]) / 100,
                mfu_gpu_seconds=(analysis.mfu or 0.0) * seconds,
                mfu_known_gpu_seconds=seconds if analysis.mfu is not None else 0.0,
            )
        )
    return rows, bool(old_days - set(days)), sorted(old_days | set(days))


def _entries_on(day: date, analysis: Analysis, price_rows: list[PriceSegmentRow]) -> list[int]:
    """Price-book entries that priced some of this run's time on this day (for finance)."""
    lo, hi = _day_span_ns(day, analysis.allocation_start_ns, analysis.end_ns)
    return sorted(
        {seg.entry_id for seg in price_rows if seg.entry_id is not None and ns_of(seg.start) < hi and ns_of(seg.end) > lo}
    )


def rollups_mark(days: Iterable[date]) -> None:
    """Mark days for a rollup rebuild (one upsert for all of them)."""
    now = timezone.now()
    RollupPending.objects.bulk_create(
        [RollupPending(day=day, marked_at=now) for day in sorted(set(days))],
        update_conflicts=True,
        unique_fields=["day"],
        update_fields=["marked_at"],
    )


def rollups_rebuild(*, days: Iterable[date] | None = None) -> list[date]:
    """Rebuild ProjectDay rows for pending days (or the given ones) from RunDay."""
    if days is None:  # every sweep asks: the statement as text (SQLite hands back ISO text)
        with connection.cursor() as cursor:
            cursor.execute("SELECT day FROM waste_rolluppending")
            days = [d if isinstance(d, date) else date.fromisoformat(d) for (d,) in cursor.fetchall()]
    done: list[date] = []
    for day in sorted(set(days)):
        with transaction.atomic():
            # One rebuilder of a day at a time. SQLite has no advisory locks and needs none: a
            # writing transaction holds the whole database.
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [4242, day.toordinal()])
            RollupPending.objects.filter(day=day).delete()
            _rollup_day(day)
        done.append(day)
    return done


def _rollup_day(day: date) -> None:
    groups: dict[int, dict[str, Any]] = {}
    for rd in RunDay.objects.filter(day=day).order_by("project_id"):
        g = groups.setdefault(
            rd.project_id,
            {"team_id": rd.team_id, "runs": 0, "gpu_seconds": 0.0, "cost": Decimal(0), "cats": dict.fromkeys(CATEGORIES, 0.0),
             "waste": Decimal(0), "recoverable": Decimal(0), "lost": Decimal(0), "mfu_gs": 0.0, "mfu_known": 0.0},
        )  # fmt: skip
        g["runs"] += 1
        g["gpu_seconds"] += rd.gpu_seconds
        g["cost"] += rd.cost_usd
        for name in CATEGORIES:
            g["cats"][name] += float(rd.categories_usd.get(name, 0))
        g["recoverable"] += rd.recoverable_usd
        g["lost"] += rd.lost_usd
        g["waste"] += rd.waste_usd
        g["mfu_gs"] += rd.mfu_gpu_seconds
        g["mfu_known"] += rd.mfu_known_gpu_seconds
    ProjectDay.objects.filter(day=day).delete()
    ProjectDay.objects.bulk_create(
        [
            ProjectDay(
                day=day,
                project_id=pid,
                team_id=g["team_id"],
                runs=g["runs"],
                gpu_seconds=g["gpu_seconds"],
                cost_usd=g["cost"],
                categories_usd={k: round(v, 2) for k, v in g["cats"].items()},
                waste_usd=g["waste"],
                recoverable_usd=g["recoverable"],
                lost_usd=g["lost"],
                mfu_gpu_seconds=g["mfu_gs"],
                mfu_known_gpu_seconds=g["mfu_known"],
            )
            for pid, g in groups.items()
        ]
    )

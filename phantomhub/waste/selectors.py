"""Reads of analyses for the API: the shape integrations rely on."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import orjson
from django.db.models import Count, Q, Sum
from django.utils import timezone

from phantomhub.telemetry.models import Run
from phantomhub.waste.core.model import CATEGORIES
from phantomhub.waste.models import RunAnalysis, RunDay

RECURRENCE_DAYS = 30


def analysis_row(*, run: Run) -> RunAnalysis | None:
    """The stored analysis without the incremental state (large, and of no use to readers)."""
    row = RunAnalysis.objects.filter(run=run).defer("state", "rank_rows", "rank_last_step").first()
    return row if row is not None and row.analysed_at is not None else None


def analysis_failure(*, run: Run, row: RunAnalysis | None = None) -> dict[str, Any] | None:
    """The last failed analysis of the run's current telemetry, if any: {message, failures, retry_at}."""
    if row is None:
        row = RunAnalysis.objects.filter(run=run).only("error", "failures", "failed_seq", "retry_at").first()
    if row is None or not row.error or row.failed_seq != run.ingest_seq:
        return None
    return {
        "message": row.error,
        "failures": row.failures,
        "retry_at": row.retry_at.isoformat() if row.retry_at else None,
    }


def analysis_view(*, run: Run, explain: bool, row: RunAnalysis | None = None) -> dict[str, Any] | None:
    row = row or analysis_row(run=run)
    if row is None:
        return None
    assert row.analysed_at is not None
    result = row.result
    categories = {fig["category"]: _with_peer_names(fig) for fig in result["categories"]}
    names = _run_names({pid for fig in categories.values() for pid in fig["evidence"]["peer_run_ids"]})
    for fig in categories.values():
        fig["evidence"]["peer_runs"] = [{"id": pid, "name": names.get(pid, "")} for pid in fig["evidence"]["peer_run_ids"]]
    view: dict[str, Any] = {
        "run_id": str(run.pk),
        "cost_usd": float(row.cost_usd),
        # Unrounded dollars, for rates and shares (rounded once, for display) and runs under a cent.
        "cost_exact_usd": _exact_usd(result, "cost_usd", float(row.cost_usd)),
        "usd_per_gpu_hour": usd_per_gpu_hour(result),
        "gpu_seconds": result["billed_gpu_seconds"],
        "gpu_hours": row.gpu_hours,
        "unpriced_gpu_seconds": result["unpriced_gpu_seconds"],
        "mfu": result["mfu"],
        "mfu_step_time": result["mfu_step_time"],
        "target_mfu": result["target_mfu"],
        "peak_known": result["peak_known"],
        "gpu_util_pct": (result.get("host") or {}).get("gpu_util_pct_mean"),
        "waste_usd": float(row.waste_usd),
        "recoverable_usd": float(row.recoverable_usd),
        "recoverable_low_usd": result["recoverable_low_usd"],
        "recoverable_high_usd": result["recoverable_high_usd"],
        "usd_per_month_at_run_rate": result["usd_per_month_at_run_rate"],
        "categories": {
            name: {
                "gpu_seconds": categories[name]["gpu_seconds"],
                "usd": categories[name]["usd_cents"] / 100,
                "usd_exact": _exact_usd(result, f"categories.{name}.usd", categories[name]["usd_cents"] / 100),
                "share": categories[name]["share"],
                "cap": categories[name]["cap"],
                "recoverable_usd": categories[name]["recoverable_usd"],
                "recoverable_low_usd": categories[name]["recoverable_low_usd"],
                "recoverable_high_usd": categories[name]["recoverable_high_usd"],
                "evidence": categories[name]["evidence"],
            }
            for name in CATEGORIES
        },
        "dropped_rows": result.get("dropped_rows") or {"non_rising_start": 0, "reused_step": 0},
        "idle": result["idle"],
        "ranks": rank_figures_of(row),
        "stragglers": result["stragglers"],
        "memory": result["memory"],
        "host": result["host"],
        "recommendations": recommendations_with_recurrence(run=run, row=row),
        "warnings": result["warnings"],
        "analysed_at": row.analysed_at.isoformat(),
        "analysis_error": analysis_failure(run=run, row=row),
        "complete": row.complete and row.analysed_seq >= run.ingest_seq,
    }
    if explain:
        view["explain"] = result["explain"]
    return view


def _exact_usd(result: dict[str, Any], key: str, rounded: float) -> float:
    """A figure's dollars before rounding to cents, as its explanation keeps them (``exact_usd``);
    the rounded figure where an older analysis kept none."""
    inputs = ((result.get("explain") or {}).get(key) or {}).get("inputs") or {}
    exact = inputs.get("exact_usd")
    return float(exact) if isinstance(exact, (int, float)) else rounded


def usd_per_gpu_hour(result: dict[str, Any]) -> float | None:
    """The run's price per GPU-hour from unrounded figures: exact dollars over priced GPU-hours
    (billed time no price covers costs nothing and is left out), so a short run's rounded cost
    does not move it ($0.78 for an $0.82 price)."""
    priced_s = float(result.get("billed_gpu_seconds") or 0.0) - float(result.get("unpriced_gpu_seconds") or 0.0)
    if priced_s <= 0:
        return None
    return _exact_usd(result, "cost_usd", float(result.get("cost_usd") or 0.0)) / (priced_s / 3600)


def rank_figures_of(row: RunAnalysis) -> list[dict[str, Any]]:
    """The analysis's per-rank figures: their own column, or (an analysis stored before it) the
    result's ``ranks``."""
    if row.rank_figures is None:
        return list(row.result.get("ranks", []))
    figures = orjson.loads(row.rank_figures)
    assert isinstance(figures, list)
    return figures


def analysis_series(*, run: Run, row: RunAnalysis | None = None) -> dict[str, Any] | None:
    row = row or analysis_row(run=run)
    return None if row is None else dict(row.result["windows"])


def _with_peer_names(fig: dict[str, Any]) -> dict[str, Any]:
    return {**fig, "evidence": dict(fig["evidence"])}  # a copy: the stored result stays as it is


def _run_names(ids: set[str]) -> dict[str, str]:
    """Names of the peer runs an analysis cites (same project as the run: visible to its readers)."""
    if not ids:
        return {}
    return {str(pk): name for pk, name in Run.objects.filter(pk__in=ids).values_list("pk", "name")}


def recurrence_as_of(*, run: Run, row: RunAnalysis, now: datetime | None = None) -> tuple[datetime, bool]:
    """Where a run's trailing 30 days end, and whether its project is live: as of ``now`` when any
    of the project's runs was billed in the 30 days before it, else when the run ended. Every
    monthly figure of a run (recommendations', the baseline's) reads the same window."""
    now = now or timezone.now()
    end = run.finished_at or row.analysed_at or run.last_seen_at
    assert end is not None
    live_since = (now - timedelta(days=RECURRENCE_DAYS)).date()
    live = RunDay.objects.filter(project_id=row.project_id, day__gt=live_since, day__lte=now.date()).exists()
    return (now if live else end), live


def recurrence(*, run: Run, row: RunAnalysis, now: datetime | None = None) -> dict[str, Any]:
    """How often this run's work recurs: the project's GPU-hours over a trailing 30 days (RunDay
    rows, so the same figures as leaderboards and finance).

    For a live project (any of its runs billed in the 30 days before ``now``) the window is the
    30 days as of reading, so the runs that came after this one count; for a project that has
    gone quiet it is the 30 days before the run ended. A run with no other run of its project in
    that window is one-off: it gets no monthly figure."""
    as_of, live = recurrence_as_of(run=run, row=row, now=now)
    since = (as_of - timedelta(days=RECURRENCE_DAYS)).date()
    agg = RunDay.objects.filter(project_id=row.project_id, day__gt=since, day__lte=as_of.date()).aggregate(
        gpu_seconds=Sum("gpu_seconds"), others=Count("run_id", distinct=True, filter=~Q(run_id=run.pk))
    )
    others = int(agg["others"] or 0)
    return {
        "kind": "recurring" if others else "one_off",
        "basis": "as_of_now" if live else "before_run_end",
        "as_of": as_of.isoformat(),
        "project_gpu_hours_30d": float(agg["gpu_seconds"] or 0.0) / 3600,
        "other_runs_30d": others,
        "run_gpu_hours": row.gpu_hours,
    }


def project_usd_exact(*, project_id: int, since: date, until: date) -> float:
    """The project's dollars over the days (since, until], unrounded: each run-day's share of its
    run's exact dollars by GPU time (its RunDay cents are rounded per run and day, and a month of
    short runs rounded to cents reads a rate a few cents off the price: $4.78 for $4.80)."""
    days = list(
        RunDay.objects.filter(project_id=project_id, day__gt=since, day__lte=until).values_list(
            "run_id", "gpu_seconds", "cost_usd"
        )
    )
    runs = {
        run_id: (billed, exact)
        for run_id, billed, exact in RunAnalysis.objects.filter(run_id__in={d[0] for d in days}).values_list(
            "run_id", "result__billed_gpu_seconds", "result__explain__cost_usd__inputs__exact_usd"
        )
    }
    total = 0.0
    for run_id, gpu_seconds, cost in days:
        billed, exact = runs.get(run_id, (None, None))
        if isinstance(billed, (int, float)) and billed > 0 and isinstance(exact, (int, float)):
            total += float(exact) * float(gpu_seconds) / float(billed)
        else:
            total += float(cost)
    return total


def recommendations_with_recurrence(*, run: Run, row: RunAnalysis) -> list[dict[str, Any]]:
    """Stored recommendations with a monthly saving where the work recurs:
    saving_usd / run GPU-hours x the project's GPU-hours over the trailing 30 days."""
    recs = list(row.recommendations)
    if not recs:
        return recs
    rec = recurrence(run=run, row=row)
    out = []
    for r in recs:
        saving = r.get("saving_usd")
        monthly = None
        if saving is not None and rec["kind"] == "recurring" and row.gpu_hours > 0:
            monthly = saving / row.gpu_hours * rec["project_gpu_hours_30d"]
        out.append({**r, "saving_usd_per_month": monthly, "recurrence": rec})
    return out

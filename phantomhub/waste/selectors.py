"""Reads of analyses for the API: the shape integrations rely on."""

from __future__ import annotations

from typing import Any

from phantomhub.telemetry.models import Run
from phantomhub.waste.model import CATEGORIES
from phantomhub.waste.models import RunAnalysis


def analysis_row(*, run: Run) -> RunAnalysis | None:
    """The stored analysis without the incremental state (large, and of no use to readers)."""
    row = RunAnalysis.objects.filter(run=run).defer("state", "rank_rows", "rank_last_step").first()
    return row if row is not None and row.analysed_at is not None else None


def analysis_view(*, run: Run, explain: bool, row: RunAnalysis | None = None) -> dict[str, Any] | None:
    row = row or analysis_row(run=run)
    if row is None:
        return None
    assert row.analysed_at is not None
    result = row.result
    categories = {fig["category"]: fig for fig in result["categories"]}
    view: dict[str, Any] = {
        "run_id": str(run.pk),
        "cost_usd": float(row.cost_usd),
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
        "usd_per_month_at_run_rate": result["usd_per_month_at_run_rate"],
        "categories": {
            name: {
                "gpu_seconds": categories[name]["gpu_seconds"],
                "usd": categories[name]["usd_cents"] / 100,
                "share": categories[name]["share"],
                "recoverability": categories[name]["recoverability"],
                "recoverable_usd": categories[name]["recoverable_usd"],
            }
            for name in CATEGORIES
        },
        "idle": result["idle"],
        "ranks": result["ranks"],
        "stragglers": result["stragglers"],
        "memory": result["memory"],
        "host": result["host"],
        "recommendations": row.recommendations,
        "warnings": result["warnings"],
        "analysed_at": row.analysed_at.isoformat(),
        "complete": row.complete and row.analysed_seq >= run.ingest_seq,
    }
    if explain:
        view["explain"] = result["explain"]
    return view


def analysis_series(*, run: Run, row: RunAnalysis | None = None) -> dict[str, Any] | None:
    row = row or analysis_row(run=run)
    return None if row is None else dict(row.result["windows"])

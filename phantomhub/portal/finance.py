"""Reads for the finance review: a month's spend per team and project, footed to the cent, and
the price-book entries that priced it. Like every portal read, from the daily rollups only."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count, QuerySet

from phantomhub.accounts.models import Project
from phantomhub.accounts.selectors import projects_visible
from phantomhub.fleet.reconcile import invoice_reconcile
from phantomhub.portal.footing import largest_remainder
from phantomhub.portal.periods import Period
from phantomhub.portal.selectors import AGG, categories_by, categories_total, figures_from_sums, pick
from phantomhub.pricing.models import PriceEntry
from phantomhub.waste.model import CATEGORIES
from phantomhub.waste.models import ProjectDay, RunDay

_FIN_MONEY = ("cost_usd", "waste_usd", "recoverable_usd")


def _footed(rows: list[dict[str, Any]], totals: dict[str, Any]) -> None:
    """Make every column add up to its total row (largest remainder; portal/footing.py): money to
    the cent, GPU-hours to the thousandth. Money is stored in cents, so only float dust moves."""
    for key, digits in [("gpu_hours", 3), *((name, 2) for name in _FIN_MONEY)]:
        for row, value in zip(rows, largest_remainder([r[key] for r in rows], totals[key], digits), strict=True):
            row[key] = value
    for name in CATEGORIES:
        column = [r["categories_usd"][name] for r in rows]
        for row, value in zip(rows, largest_remainder(column, totals["categories_usd"][name], 2), strict=True):
            row["categories_usd"][name] = value


def _price_entries(ids: set[int]) -> list[dict[str, Any]]:
    entries = PriceEntry.objects.filter(pk__in=ids).order_by("gpu", "provider", "region", "tier", "effective_from")
    return [
        {
            "id": e.pk,
            "gpu": e.gpu,
            "provider": e.provider,
            "region": e.region,
            "tier": e.tier,
            "usd_per_gpu_hour": str(e.usd_per_gpu_hour),
            "effective_from": e.effective_from.isoformat(),
            "effective_to": e.effective_to.isoformat() if e.effective_to else None,
            "is_example": e.is_example,
        }
        for e in entries
    ]


def _entries_used(period: Period, projects: QuerySet[Project] | None = None) -> dict[int, set[int]]:
    """Per project, the price-book entries that priced its runs in the period."""
    days = RunDay.objects.filter(day__gte=period.start, day__lte=period.end)
    if projects is not None:
        days = days.filter(project__in=projects)
    used: dict[int, set[int]] = defaultdict(set)
    for project_id, ids in days.values_list("project_id", "price_entry_ids"):
        used[project_id].update(ids)
    return used


def finance_review(*, period: Period) -> dict[str, Any]:
    """The month's review for the whole organization (callers filter rows by visibility)."""
    days = ProjectDay.objects.filter(day__gte=period.start, day__lte=period.end)
    runs = {
        row["project_id"]: row["n"]
        for row in RunDay.objects.filter(day__gte=period.start, day__lte=period.end)
        .values("project_id")
        .annotate(n=Count("run_id", distinct=True))
    }
    categories = categories_by(days, "project_id")
    per_project = {
        row["project_id"]: figures_from_sums(row, runs.get(row["project_id"], 0))
        for row in days.values("project_id").annotate(**AGG)
    }
    projects = {p.pk: p for p in Project.objects.filter(pk__in=per_project).select_related("team")}
    used = _entries_used(period)
    money = ("runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd")
    rows = sorted(
        (
            {
                "team": projects[pid].team.slug,
                "team_name": projects[pid].team.label,
                "project": projects[pid].slug,
                "project_name": projects[pid].label,
                **pick(figures, *money),
                "categories_usd": categories[pid],
                "price_entry_ids": sorted(used.get(pid, ())),
            }
            for pid, figures in per_project.items()
        ),
        key=lambda r: (r["team"], r["project"]),
    )
    totals = pick(figures_from_sums(days.aggregate(**AGG), sum(r["runs"] for r in rows)), *money)
    totals |= {"categories_usd": categories_total(days)}
    _footed(rows, totals)
    return {
        "month": period.label,
        "rows": rows,
        "totals": totals,
        "price_entries": _price_entries(set().union(*used.values()) if used else set()),
        # The imported invoice against the fleet's measured GPU cost, per team (phantomhub/fleet/reconcile.py).
        "invoice": invoice_reconcile(period=period),
    }


def finance_rows_visible(review: dict[str, Any], principal: Any, period: Period) -> dict[str, Any]:
    """Restrict a (possibly frozen) review to the projects the principal may see: its rows, their
    totals, and the price-book entries that priced those rows only."""
    visible_projects = projects_visible(principal)
    visible = set(visible_projects.values_list("slug", flat=True))
    rows = [row for row in review["rows"] if row["project"] in visible]
    if len(rows) == len(review["rows"]):
        return review
    if all("price_entry_ids" in row for row in rows):
        ids = {i for row in rows for i in row["price_entry_ids"]}
    else:  # a month closed before rows named their prices: what priced the visible projects
        ids = set().union(set(), *_entries_used(period, visible_projects).values())
    entries = [e for e in review["price_entries"] if e["id"] in ids]
    totals: dict[str, Any] = {"runs": 0, "gpu_hours": 0.0, "cost_usd": 0.0, "waste_usd": 0.0, "recoverable_usd": 0.0,
                              "categories_usd": dict.fromkeys(CATEGORIES, 0.0)}  # fmt: skip
    for row in rows:
        for key in ("runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd"):
            totals[key] += row[key]
        for name in CATEGORIES:
            totals["categories_usd"][name] += row["categories_usd"][name]
    totals = {k: (round(v, 3 if k == "gpu_hours" else 2) if isinstance(v, float) else v) for k, v in totals.items()}
    totals["categories_usd"] = {k: round(v, 2) for k, v in totals["categories_usd"].items()}
    return {**review, "rows": rows, "totals": totals, "price_entries": entries, "invoice": _invoice_visible(review, rows)}


def _invoice_visible(review: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The invoice rows of the teams whose projects are visible (unattributed and unmatched stay hidden)."""
    invoice = review.get("invoice")
    if invoice is None:
        return None
    teams = {row["team"] for row in rows}
    kept = [row for row in invoice["rows"] if row["team"] in teams]
    totals = {k: round(sum(row[k] for row in kept), 2) for k in ("billed_usd", "measured_usd", "unexplained_usd")}
    return {**invoice, "rows": kept, "totals": totals, "unmatched_billed_usd": None}

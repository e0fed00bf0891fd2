"""Reads for the portal. Every figure comes from RunAnalysis, RunDay and ProjectDay — the derived
tables analysis writes — never from raw steps, so pages cost the same however much telemetry
is stored."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Count, DecimalField, F, Max, Q, QuerySet, Sum, Value
from django.db.models.functions import NullIf

from phantomhub.accounts.models import Project, Team
from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError, invalid
from phantomhub.portal.periods import Period
from phantomhub.pricing.models import PriceEntry
from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste.model import CATEGORIES
from phantomhub.waste.models import ProjectDay, RunAnalysis, RunDay

SORTS = {"recoverable_usd", "cost_usd", "mfu", "waste_share", "started_at"}


def _money(value: Decimal | float | None) -> float:
    return round(float(value or 0), 2)


def sort_parse(text: str | None, default: str = "-recoverable_usd") -> tuple[str, bool]:
    text = text or default
    field = text.lstrip("-")
    if field not in SORTS:
        raise invalid("sort", f"must be one of {', '.join(sorted(SORTS))}, optionally prefixed with '-'")
    return field, text.startswith("-")


# -- runs ------------------------------------------------------------------------------------


def run_row(run: Run, analysis: RunAnalysis | None) -> dict[str, Any]:
    return {
        "id": str(run.pk),
        "name": run.name,
        "team": run.project.team.slug,
        "project": run.project.slug,
        "status": run.status,
        "gpu_model": run.gpu_model,
        "gpu_key": analysis.gpu_key if analysis else run.gpu_model,
        "gpu_count": run.gpu_count,
        "tags": run.tags,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "gpu_hours": round(analysis.gpu_hours, 3) if analysis else None,
        "cost_usd": _money(analysis.cost_usd) if analysis else None,
        "waste_usd": _money(analysis.waste_usd) if analysis else None,
        "recoverable_usd": _money(analysis.recoverable_usd) if analysis else None,
        "waste_share": round(analysis.waste_share, 4) if analysis else None,
        "mfu": analysis.mfu if analysis else None,
        "analysed": bool(analysis and analysis.analysed_at),
    }


def runs_visible(principal: Any) -> QuerySet[Run]:
    return Run.objects.filter(project__in=projects_visible(principal))


def runs_list(*, principal: Any, filters: dict[str, str], sort: str | None, page: int, page_size: int) -> dict[str, Any]:
    runs = (
        runs_visible(principal)
        .select_related("project", "project__team", "analysis")
        .defer("config", "environment", "analysis__result", "analysis__recommendations", "analysis__state",
               "analysis__rank_rows", "analysis__rank_last_step")
    )  # fmt: skip
    if filters.get("team"):
        runs = runs.filter(project__team__slug=filters["team"])
    if filters.get("project"):
        runs = runs.filter(project__slug=filters["project"])
    if filters.get("status"):
        if filters["status"] not in RunStatus.values:
            raise invalid("status", f"must be one of {', '.join(RunStatus.values)}")
        runs = runs.filter(status=filters["status"])
    if filters.get("gpu"):
        runs = runs.filter(Q(analysis__gpu_key=filters["gpu"]) | Q(gpu_model=filters["gpu"]))
    if filters.get("tag"):
        if connection.vendor == "postgresql":
            runs = runs.filter(tags__contains=[filters["tag"]])
        else:  # SQLite has no JSON containment; match the quoted element in the JSON text
            runs = runs.filter(tags__icontains=f'"{filters["tag"]}"')
    if filters.get("from"):
        runs = runs.filter(started_at__date__gte=filters["from"])
    if filters.get("to"):
        runs = runs.filter(started_at__date__lte=filters["to"])
    if filters.get("q"):
        runs = runs.filter(name__icontains=filters["q"])
    field, desc = sort_parse(sort)
    key = F("started_at") if field == "started_at" else F(f"analysis__{field}")
    runs = runs.order_by(key.desc(nulls_last=True) if desc else key.asc(nulls_last=True), "-started_at", "id")
    count = runs.count()
    offset = (page - 1) * page_size
    rows = [run_row(run, getattr(run, "analysis", None)) for run in runs[offset : offset + page_size]]
    return {"count": count, "page": page, "page_size": page_size, "results": rows}


# -- rollup aggregates -----------------------------------------------------------------------


def _run_days(principal: Any, period: Period) -> QuerySet[RunDay]:
    return RunDay.objects.filter(project__in=projects_visible(principal), day__gte=period.start, day__lte=period.end)


def _project_days(principal: Any, period: Period) -> QuerySet[ProjectDay]:
    return ProjectDay.objects.filter(project__in=projects_visible(principal), day__gte=period.start, day__lte=period.end)


# Sums done by the database: pages stay fast however many runs a period holds.
AGG = {
    "gpu_seconds": Sum("gpu_seconds"),
    "cost": Sum("cost_usd"),
    "waste": Sum("waste_usd"),
    "recoverable": Sum("recoverable_usd"),
    "mfu_gs": Sum("mfu_gpu_seconds"),
    "mfu_known": Sum("mfu_known_gpu_seconds"),
}


def _agg_figures(row: dict[str, Any], runs: int) -> dict[str, Any]:
    cost = float(row.get("cost") or 0)
    waste = float(row.get("waste") or 0)
    mfu_known = row.get("mfu_known") or 0
    return {
        "runs": runs,
        "gpu_hours": round((row.get("gpu_seconds") or 0) / 3600, 3),
        "cost_usd": round(cost, 2),
        "waste_usd": round(waste, 2),
        "recoverable_usd": _money(row.get("recoverable")),
        "waste_share": round(waste / cost, 4) if cost else None,
        "mfu": round((row.get("mfu_gs") or 0) / mfu_known, 4) if mfu_known else None,
    }


_RUN_ORDER = {
    "recoverable_usd": F("recoverable"),
    "cost_usd": F("cost"),
    "waste_share": F("waste") / NullIf(F("cost"), Value(0, output_field=DecimalField())),
    "mfu": F("mfu_gs") / NullIf(F("mfu_known"), Value(0.0)),
    "started_at": Max("run__started_at"),
}


def _grouped(
    kind: str,
    principal: Any,
    period: Period,
    only: set[Any] | None = None,
    order: tuple[str, bool, int] | None = None,
) -> dict[Any, dict[str, Any]]:
    """Figures per team, project or run over the period. For runs, `order` (field, descending,
    limit) sorts and cuts in the database, so a period with thousands of runs stays cheap."""
    if kind == "runs":
        days = _run_days(principal, period)
        if only is not None:
            days = days.filter(run_id__in=only)
        rows = days.values("run_id").annotate(**AGG)
        if order is not None:
            field, desc, limit = order
            rows = rows.annotate(sort_key=_RUN_ORDER[field]).order_by(
                F("sort_key").desc(nulls_last=True) if desc else F("sort_key").asc(nulls_last=True), "run_id"
            )[:limit]
        return {row["run_id"]: _agg_figures(row, 1) for row in rows}
    group = "team_id" if kind == "teams" else "project_id"
    counts = _run_days(principal, period).values(group).annotate(n=Count("run_id", distinct=True))
    runs = {row[group]: row["n"] for row in counts}
    groups = _project_days(principal, period).values(group).annotate(**AGG)
    return {row[group]: _agg_figures(row, runs.get(row[group], 0)) for row in groups}


def _sorted(rows: list[dict[str, Any]], field: str, desc: bool) -> list[dict[str, Any]]:
    present = [r for r in rows if r.get(field) is not None]
    missing = [r for r in rows if r.get(field) is None]
    return sorted(present, key=lambda r: r[field], reverse=desc) + missing


def leaderboard(*, principal: Any, kind: str, period: Period, sort: str | None, limit: int = 100) -> dict[str, Any]:
    if kind not in ("teams", "projects", "runs"):
        raise ApiError("not_found", f"no leaderboard {kind!r} (teams, projects, runs)", status_code=404)
    field, desc = sort_parse(sort)
    if field == "started_at" and kind != "runs":
        raise invalid("sort", "started_at sorts runs only")
    previous = period.previous()
    now = _grouped(kind, principal, period, order=(field, desc, limit) if kind == "runs" else None)
    rows = [{"id": group_id, **figures} for group_id, figures in now.items()]
    if field == "started_at":
        starts = dict(Run.objects.filter(pk__in=now).values_list("id", "started_at"))
        for row in rows:
            row["started_at"] = starts[row["id"]].isoformat()
    rows = _sorted(rows, field, desc)[:limit]
    ids = {row["id"] for row in rows}
    before = _grouped(kind, principal, previous, only=ids if kind == "runs" else None)
    names = _names(kind, ids)
    out = []
    for row in rows:
        group_id = row.pop("id")
        prev = before.get(group_id)
        change = None
        if prev is not None:
            change = {
                name: (round(row[name] - prev[name], 4) if row[name] is not None and prev[name] is not None else None)
                for name in ("cost_usd", "recoverable_usd", "waste_share", "mfu")
            }
        out.append({**names[group_id], **row, "previous": prev, "change": change})
    return {"period": period.as_dict(), "previous": previous.as_dict(), "rows": out}


def _names(kind: str, ids: set[Any]) -> dict[Any, dict[str, Any]]:
    if kind == "teams":
        return {t.pk: {"key": t.slug, "name": t.name} for t in Team.objects.filter(pk__in=ids)}
    if kind == "projects":
        return {
            p.pk: {"key": p.slug, "name": p.name, "team": p.team.slug}
            for p in Project.objects.filter(pk__in=ids).select_related("team")
        }
    runs = Run.objects.filter(pk__in=ids).select_related("project", "project__team")
    runs = runs.only("id", "name", "status", "gpu_model", "started_at", "project__slug", "project__team__slug")
    return {
        r.pk: {"key": str(r.pk), "name": r.name or str(r.pk)[:8], "team": r.project.team.slug, "project": r.project.slug,
               "status": r.status, "gpu_model": r.gpu_model, "started_at": r.started_at.isoformat()}
        for r in runs
    }  # fmt: skip


def _pick(figures: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: figures[name] for name in names}


def _categories_by(days: QuerySet[ProjectDay], key: str | None = None) -> dict[Any, dict[str, float]]:
    """The six categories' dollars summed per `key` (one group, None, when no key is given)."""
    sums: dict[Any, dict[str, float]] = defaultdict(lambda: dict.fromkeys(CATEGORIES, 0.0))
    fields = ("categories_usd",) if key is None else (key, "categories_usd")
    for row in days.values_list(*fields):
        group = sums[None if key is None else row[0]]
        for name in CATEGORIES:
            group[name] += float(row[-1].get(name, 0))
    return {k: {name: round(v, 2) for name, v in cats.items()} for k, cats in sums.items()}


def _categories(days: QuerySet[ProjectDay]) -> dict[str, float]:
    return _categories_by(days).get(None, dict.fromkeys(CATEGORIES, 0.0))


def _by_day(days: QuerySet[ProjectDay]) -> list[dict[str, Any]]:
    categories = _categories_by(days, "day")
    return [
        {"day": row["day"].isoformat(), "cost_usd": _money(row["cost"]), "waste_usd": _money(row["waste"]),
         "recoverable_usd": _money(row["recoverable"]),
         "categories_usd": categories[row["day"]]}
        for row in days.values("day").annotate(**AGG).order_by("day")
    ]  # fmt: skip


def _totals(days: QuerySet[ProjectDay], run_days: QuerySet[RunDay]) -> dict[str, Any]:
    return _agg_figures(days.aggregate(**AGG), run_days.values("run_id").distinct().count())


def overview(*, principal: Any, period: Period) -> dict[str, Any]:
    days, previous = _project_days(principal, period), _project_days(principal, period.previous())
    run_days = _run_days(principal, period)
    by_gpu = [
        {"gpu": row["gpu_key"] or "unknown", **_pick(_agg_figures(row, 0), "gpu_hours", "cost_usd", "recoverable_usd")}
        for row in run_days.values("gpu_key").annotate(**AGG)
    ]  # fmt: skip
    return {
        "period": period.as_dict(),
        "totals": _totals(days, run_days),
        "previous_totals": _totals(previous, _run_days(principal, period.previous())),
        "by_day": _by_day(days),
        "by_category": _categories(days),
        "by_gpu": sorted(by_gpu, key=lambda row: -row["cost_usd"]),
        "worst_runs": leaderboard(principal=principal, kind="runs", period=period, sort="-recoverable_usd", limit=10)["rows"],
    }


def _scoped(
    principal: Any, period: Period, team: Team | None, project: Project | None
) -> tuple[QuerySet[ProjectDay], QuerySet[RunDay]]:
    days, run_days = _project_days(principal, period), _run_days(principal, period)
    if team is not None:
        days, run_days = days.filter(team=team), run_days.filter(team=team)
    if project is not None:
        days, run_days = days.filter(project=project), run_days.filter(project=project)
    return days, run_days


def scope_summary(*, principal: Any, period: Period, team: Team | None = None, project: Project | None = None) -> dict[str, Any]:
    days, run_days = _scoped(principal, period, team, project)
    runs = {row["project_id"]: row["n"] for row in run_days.values("project_id").annotate(n=Count("run_id", distinct=True))}
    per_project = {
        row["project_id"]: _agg_figures(row, runs.get(row["project_id"], 0)) for row in days.values("project_id").annotate(**AGG)
    }
    names = _names("projects", set(per_project))
    top = [
        (row["run_id"], _agg_figures(row, 1)) for row in run_days.values("run_id").annotate(**AGG).order_by("-recoverable")[:10]
    ]
    run_names = _names("runs", {rid for rid, _ in top})
    return {
        "period": period.as_dict(),
        "totals": _totals(days, run_days),
        "previous_totals": _totals(*_scoped(principal, period.previous(), team, project)),
        "by_day": _by_day(days),
        "by_category": _categories(days),
        "projects": sorted(({**names[pid], **fig} for pid, fig in per_project.items()), key=lambda r: -r["recoverable_usd"]),
        "top_runs": [{**run_names[rid], **fig} for rid, fig in top],
    }


def teams_visible(*, principal: Any) -> list[dict[str, Any]]:
    """Teams and projects the principal may see, for filters and navigation."""
    projects = projects_visible(principal).select_related("team").order_by("team__slug", "slug")
    teams: dict[str, dict[str, Any]] = {}
    for project in projects:
        team = teams.setdefault(project.team.slug, {"slug": project.team.slug, "name": project.team.name, "projects": []})
        team["projects"].append({"slug": project.slug, "name": project.name})
    return list(teams.values())


# -- finance ---------------------------------------------------------------------------------


def finance_review(*, period: Period) -> dict[str, Any]:
    """The month's review for the whole organization (callers filter rows by visibility)."""
    days = ProjectDay.objects.filter(day__gte=period.start, day__lte=period.end)
    runs = {
        row["project_id"]: row["n"]
        for row in RunDay.objects.filter(day__gte=period.start, day__lte=period.end)
        .values("project_id")
        .annotate(n=Count("run_id", distinct=True))
    }
    categories = _categories_by(days, "project_id")
    per_project = {
        row["project_id"]: _agg_figures(row, runs.get(row["project_id"], 0)) for row in days.values("project_id").annotate(**AGG)
    }
    projects = {p.pk: p for p in Project.objects.filter(pk__in=per_project).select_related("team")}
    money = ("runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd")
    rows = sorted(
        (
            {
                "team": projects[pid].team.slug,
                "project": projects[pid].slug,
                **_pick(figures, *money),
                "categories_usd": categories[pid],
            }
            for pid, figures in per_project.items()
        ),
        key=lambda r: (r["team"], r["project"]),
    )
    totals = _pick(_agg_figures(days.aggregate(**AGG), sum(r["runs"] for r in rows)), *money)
    used: set[int] = set()
    for ids in RunDay.objects.filter(day__gte=period.start, day__lte=period.end).values_list("price_entry_ids", flat=True):
        used.update(ids)
    entries = PriceEntry.objects.filter(pk__in=used)
    return {
        "month": period.label,
        "rows": rows,
        "totals": totals | {"categories_usd": _categories(days)},
        "price_entries": [
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
            for e in entries.order_by("gpu", "provider", "region", "tier", "effective_from")
        ],
    }


def finance_rows_visible(review: dict[str, Any], principal: Any) -> dict[str, Any]:
    """Restrict a (possibly frozen) review to the projects the principal may see."""
    visible = set(projects_visible(principal).values_list("slug", flat=True))
    rows = [row for row in review["rows"] if row["project"] in visible]
    if len(rows) == len(review["rows"]):
        return review
    totals: dict[str, Any] = {"runs": 0, "gpu_hours": 0.0, "cost_usd": 0.0, "waste_usd": 0.0, "recoverable_usd": 0.0,
                              "categories_usd": dict.fromkeys(CATEGORIES, 0.0)}  # fmt: skip
    for row in rows:
        for key in ("runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd"):
            totals[key] += row[key]
        for name in CATEGORIES:
            totals["categories_usd"][name] += row["categories_usd"][name]
    totals = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in totals.items()}
    totals["categories_usd"] = {k: round(v, 2) for k, v in totals["categories_usd"].items()}
    return {**review, "rows": rows, "totals": totals}

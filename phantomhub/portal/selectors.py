"""Reads for the portal. Every figure comes from RunAnalysis, RunDay and ProjectDay — the derived
tables analysis writes — never from raw steps, so pages cost the same however much telemetry
is stored."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from typing import Any, cast

from django.db.models import Count, F, Max, QuerySet, Sum

from phantomhub.accounts.models import Project, Team
from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError, invalid
from phantomhub.periods import Period
from phantomhub.portal import sums
from phantomhub.portal.models import ProjectDayRead, RunDayRead
from phantomhub.portal.run_list import (  # noqa: F401 (the runs list lives there; names kept here for callers)
    PERIOD_SORTS,
    SORTS,
    _money,
    billed_span,
    lost_usd,
    run_billed_end,
    run_row,
    runs_all,
    runs_list,
    runs_visible,
    sort_parse,
)
from phantomhub.telemetry.models import Run
from phantomhub.waste.core.model import CATEGORIES
from phantomhub.waste.models import ProjectDay, RunDay


@dataclass(frozen=True)
class Visible:
    """The projects a principal may see, read once per page: every selector below filters by these
    ids instead of repeating the visibility subquery (and its profile lookup) in each statement."""

    project_ids: tuple[int, ...]

    # The rollups as pages read them: a closed month's days from its frozen copy, other days live
    # (portal.models RunDayRead, ProjectDayRead: the same columns, so typed as the rollups).
    def run_days(self) -> QuerySet[RunDay]:
        return cast("QuerySet[RunDay]", RunDayRead.objects.filter(project_id__in=self.project_ids))

    def project_days(self) -> QuerySet[ProjectDay]:
        return cast("QuerySet[ProjectDay]", ProjectDayRead.objects.filter(project_id__in=self.project_ids))


def visible_for(principal: Any) -> Visible:
    """The principal's projects by accounts' rule (projects_visible), as ids."""
    if isinstance(principal, Visible):
        return principal
    return Visible(tuple(sorted(set(projects_visible(principal).values_list("pk", flat=True)))))


# -- rollup aggregates -----------------------------------------------------------------------


def _run_days(visible: Visible, period: Period) -> QuerySet[RunDay]:
    return visible.run_days().filter(day__gte=period.start, day__lte=period.end)


def _project_days(visible: Visible, period: Period) -> QuerySet[ProjectDay]:
    return visible.project_days().filter(day__gte=period.start, day__lte=period.end)


# Sums done by the database: pages stay fast however many runs a period holds.
SUMMED = sums.SUMMED
AGG = {name: Sum(column) for name, column in SUMMED.items()}


def figures_from_sums(row: dict[str, Any], runs: int) -> dict[str, Any]:
    cost = float(row.get("cost") or 0)
    waste = float(row.get("waste") or 0)
    mfu_known = row.get("mfu_known") or 0
    return {
        "runs": runs,
        "gpu_hours": round((row.get("gpu_seconds") or 0) / 3600, 3),
        "cost_usd": round(cost, 2),
        "waste_usd": round(waste, 2),
        "recoverable_usd": _money(row.get("recoverable")),
        # A job's lost work (rework, restarts, checkpoints): part of idle, not beside it.
        "lost_usd": _money(row.get("lost")),
        "waste_share": round(waste / cost, 4) if cost else None,
        "mfu": round((row.get("mfu_gs") or 0) / mfu_known, 4) if mfu_known else None,
    }


def _runs_grouped(visible: Visible, period: Period, order: tuple[str, bool, int] | None) -> dict[Any, dict[str, Any]]:
    """Figures per run over the period. `order` (field, descending, limit) sorts and cuts in the
    database, so a period with thousands of runs stays cheap."""
    if order is None or order[0] in sums.RUN_ORDER:
        in_period = sums.Scope(visible.project_ids, since=period.start, until=period.end)
        rows = sums.day_sums(model=RunDay, scope=in_period, group="run_id", windows={"": None}, order=order)
        return {row["run_id"]: figures_from_sums(sums.unprefixed(row, ""), 1) for row in rows}
    _, desc, limit = order  # started_at: the run's, not a sum
    by = _run_days(visible, period).values("run_id").annotate(**AGG, sort_key=Max("run__allocation_start"))
    by = by.order_by(F("sort_key").desc(nulls_last=True) if desc else F("sort_key").asc(nulls_last=True), "run_id")
    return {row["run_id"]: figures_from_sums(row, 1) for row in by[:limit]}


def _groups_with_previous(
    kind: str, visible: Visible, period: Period
) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]], dict[Any, date]]:
    """Teams' or projects' figures over the period and over the previous one, and each one's first
    day with billed time (all days of the rollups, not only the periods'): one statement over the
    daily rollups and one over the run-days (for the run counts)."""
    group = "team_id" if kind == "teams" else "project_id"
    previous = period.previous()
    windows: dict[str, Period | None] = {"now_": period, "prev_": previous}
    counted = sums.Scope(visible.project_ids, since=previous.start, until=period.end)
    runs = {
        row[group]: (row["now_runs"], row["prev_runs"]) for row in sums.distinct_runs(scope=counted, group=group, windows=windows)
    }
    rows = sums.day_sums(model=ProjectDay, scope=sums.Scope(visible.project_ids), group=group, windows=windows, first=True)
    now: dict[Any, dict[str, Any]] = {}
    before: dict[Any, dict[str, Any]] = {}
    first: dict[Any, date] = {}
    for row in rows:
        key = row[group]
        first[key] = row["first"]
        runs_now, runs_prev = runs.get(key, (0, 0))
        if row["now_rows"]:
            now[key] = figures_from_sums(sums.unprefixed(row, "now_"), runs_now)
        if row["prev_rows"]:
            before[key] = figures_from_sums(sums.unprefixed(row, "prev_"), runs_prev)
    return now, before, first


def _runs_previous(visible: Visible, previous: Period, ids: set[Any]) -> tuple[dict[Any, dict[str, Any]], dict[Any, date]]:
    """The runs' figures over the previous period and their first billed days, in one statement."""
    of_runs = sums.Scope(visible.project_ids, run_ids=tuple(sorted(ids)))
    rows = sums.day_sums(model=RunDay, scope=of_runs, group="run_id", windows={"prev_": previous}, first=True)
    before: dict[Any, dict[str, Any]] = {}
    first: dict[Any, date] = {}
    for row in rows:
        first[row["run_id"]] = row["first"]
        if row["prev_rows"]:
            before[row["run_id"]] = figures_from_sums(sums.unprefixed(row, "prev_"), 1)
    return before, first


def _sorted(rows: list[dict[str, Any]], field: str, desc: bool) -> list[dict[str, Any]]:
    present = [r for r in rows if r.get(field) is not None]
    missing = [r for r in rows if r.get(field) is None]
    return sorted(present, key=lambda r: r[field], reverse=desc) + missing


def compared(period: Period, data_from: date | None, previous: Period | None = None) -> bool:
    """A previous period is compared with only where it is complete: the scope had billed time on
    or before its first day. Otherwise its figures cover part of it (or nothing) and a change
    against them is an artefact of when the data starts, not a change in spending."""
    return data_from is not None and data_from <= (previous or period.previous()).start


def _change(row: dict[str, Any], prev: dict[str, Any]) -> dict[str, Any]:
    return {
        name: (round(row[name] - prev[name], 4) if row[name] is not None and prev[name] is not None else None)
        for name in ("cost_usd", "recoverable_usd", "waste_share", "mfu")
    }


def leaderboard(
    *, principal: Any, kind: str, period: Period, sort: str | None, limit: int | None = 100, page: int = 1
) -> dict[str, Any]:
    """Teams, projects or runs over the period, sorted, `limit` rows a page (None: every row, as
    the CSV has them). `count` says how many rows the whole board has and `totals` what they add
    up to, so a page never passes for the whole board."""
    if kind not in ("teams", "projects", "runs"):
        raise ApiError("not_found", f"no leaderboard {kind!r} (teams, projects, runs, people)", status_code=404)
    field, desc = sort_parse(sort)
    if field == "started_at" and kind != "runs":
        raise invalid("sort", "started_at sorts runs only")
    visible = visible_for(principal)
    previous = period.previous()
    if kind == "runs":
        order = (field, desc, page * limit) if limit is not None else None
        now = _runs_grouped(visible, period, order)
    else:
        now, before, first = _groups_with_previous(kind, visible, period)
    rows = [{"id": group_id, **figures} for group_id, figures in now.items()]
    if field == "started_at":
        starts = dict(Run.objects.filter(pk__in=now).values_list("id", "allocation_start"))
        for row in rows:
            row["started_at"] = starts[row["id"]].isoformat()
    rows = _sorted(rows, field, desc)
    totals = _board_totals(visible, period)
    count = totals["runs"] if kind == "runs" else len(rows)
    if limit is not None:
        rows = rows[(page - 1) * limit : page * limit]
    ids = {row["id"] for row in rows}
    if kind == "runs":
        before, first = _runs_previous(visible, previous, ids)
    names = _names(kind, ids)
    out = []
    for row in rows:
        group_id = row.pop("id")
        data_from = first.get(group_id)
        prev = (before.get(group_id) or figures_from_sums({}, 0)) if compared(period, data_from, previous) else None
        change = _change(row, prev) if prev is not None else None
        out.append({**names[group_id], **row, "data_from": _iso(data_from), "previous": prev, "change": change})
    if kind != "runs":
        _fleet_columns(kind, period, rows=out, ids=[row["key"] for row in out])
    else:
        for row in out:
            row["period_cost_usd"] = row["cost_usd"]  # a run's figures here are its period's
    size = limit or max(count, 1)
    return {
        "period": period.as_dict(),
        "previous": previous.as_dict(),
        "count": count,
        "page": page,
        "page_size": size,
        "pages": max(1, -(-count // size)),
        "totals": totals,
        "rows": out,
    }


def _board_totals(visible: Visible, period: Period) -> dict[str, Any]:
    """Every row of a board over the period added up, in one statement over the run-days (what the
    daily rollups finance reads add up, to the cent), with the distinct runs billed in the period."""
    in_period = sums.Scope(visible.project_ids, since=period.start, until=period.end)
    (row,) = sums.day_sums(model=RunDay, scope=in_period, group=None, windows={"": None}, runs=True)
    return figures_from_sums(sums.unprefixed(row, ""), row["runs"] or 0)


def _fleet_columns(kind: str, period: Period, *, rows: list[dict[str, Any]], ids: list[str]) -> None:
    """GPU time no run measured, from the node collectors (phantomhub/fleet), beside each row's run
    figures and never inside them: `fleet` holds busy-uninstrumented and idle-held dollars."""
    from phantomhub.fleet.selectors import fleet_by_project, fleet_by_team

    model = Team if kind == "teams" else Project
    pks = dict(model.objects.filter(slug__in=ids).values_list("slug", "pk"))
    figures = (fleet_by_team if kind == "teams" else fleet_by_project)(period)
    for row in rows:
        pk = pks.get(row["key"])
        fleet = figures.get(pk, {}) if pk is not None else {}
        row["fleet"] = {
            "uninstrumented_usd": fleet.get("uninstrumented_usd", 0.0),
            "idle_held_usd": fleet.get("idle_held_usd", 0.0),
        }


def _iso(day: date | None) -> str | None:
    return day.isoformat() if day else None


def _names(kind: str, ids: set[Any]) -> dict[Any, dict[str, Any]]:
    if kind == "teams":
        return {t.pk: {"key": t.slug, "name": t.label} for t in Team.objects.filter(pk__in=ids)}
    if kind == "projects":
        return {
            p.pk: {"key": p.slug, "name": p.label, "team": p.team.slug, "team_name": p.team.label}
            for p in Project.objects.filter(pk__in=ids).select_related("team")
        }
    # Plain tuples, not model instances: a board names 100 runs, and three instances per run were
    # a good part of its CPU. `label` is display_name or slug (accounts.models).
    rows = Run.objects.filter(pk__in=ids).values_list(
        "id", "name", "status", "gpu_model", "gpu_count", "allocation_start",
        "project__slug", "project__display_name", "project__team__slug", "project__team__display_name",
        "analysis__cost_usd",
    )  # fmt: skip
    # `whole_cost_usd`: the whole run's cost, beside the period's figures a board row carries.
    return {
        pk: {"key": str(pk), "name": name or str(pk)[:8], "team": team, "team_name": team_label or team,
             "project": project, "project_name": project_label or project, "status": status,
             "gpu_model": gpu_model, "gpu_count": gpu_count, "started_at": started.isoformat(),
             "whole_cost_usd": _money(whole) if whole is not None else None}
        for pk, name, status, gpu_model, gpu_count, started, project, project_label, team, team_label, whole in rows
    }  # fmt: skip


def pick(figures: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: figures[name] for name in names}


def categories_by(days: QuerySet[ProjectDay], key: str | None = None) -> dict[Any, dict[str, float]]:
    """The six categories' dollars summed per `key` (one group, None, when no key is given)."""
    sums: dict[Any, dict[str, float]] = defaultdict(lambda: dict.fromkeys(CATEGORIES, 0.0))
    fields = ("categories_usd",) if key is None else (key, "categories_usd")
    for row in days.values_list(*fields):
        group = sums[None if key is None else row[0]]
        for name in CATEGORIES:
            group[name] += float(row[-1].get(name, 0))
    return {k: {name: round(v, 2) for name, v in cats.items()} for k, cats in sums.items()}


def categories_total(days: QuerySet[ProjectDay]) -> dict[str, float]:
    return categories_by(days).get(None, dict.fromkeys(CATEGORIES, 0.0))


def _page_figures(visible: Visible, period: Period, team: Team | None, project: Project | None) -> dict[str, Any]:
    """What the overview, team and project pages share: the period's totals, the previous period's
    (where it is complete), the first billed day, every day of the period in order (zero where
    nothing was billed: charts draw time as time) and the categories' dollars. Totals and the
    previous totals come from one statement, as do their run counts."""
    previous = period.previous()
    scope = sums.Scope(visible.project_ids, team_id=team.pk if team else None, project_id=project.pk if project else None)
    windows: dict[str, Period | None] = {"now_": period, "prev_": previous}
    (row,) = sums.day_sums(model=ProjectDay, scope=scope, group=None, windows=windows, first=True)
    in_both = sums.Scope(scope.project_ids, scope.team_id, scope.project_id, since=previous.start, until=period.end)
    (runs,) = sums.distinct_runs(scope=in_both, group=None, windows=windows)
    data_from = row["first"]
    prev = figures_from_sums(sums.unprefixed(row, "prev_"), runs["prev_runs"]) if compared(period, data_from) else None
    in_period = sums.Scope(scope.project_ids, scope.team_id, scope.project_id, since=period.start, until=period.end)
    per_day = {
        r["day"]: figures_from_sums(sums.unprefixed(r, ""), 0)
        for r in sums.day_sums(model=ProjectDay, scope=in_period, group="day", windows={"": None})
    }
    runs_per_day = {r["day"]: r["runs"] for r in sums.distinct_runs(scope=in_period, group="day", windows={"": None})}
    categories, total = _categories_by_day(_scoped(visible, period, team, project)[0])
    zero = figures_from_sums({}, 0)
    return {
        "data_from": _iso(data_from),
        "totals": figures_from_sums(sums.unprefixed(row, "now_"), runs["now_runs"]),
        "previous_totals": prev,
        "by_day": [
            {
                "day": day.isoformat(),
                "runs": runs_per_day.get(day, 0),
                **pick(per_day.get(day, zero), "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd"),
                "categories_usd": categories.get(day, dict.fromkeys(CATEGORIES, 0.0)),
            }
            for day in period.each_day()
        ],
        "by_category": total,
    }


def _categories_by_day(days: QuerySet[ProjectDay]) -> tuple[dict[date, dict[str, float]], dict[str, float]]:
    """categories_by(days, "day") and categories_total(days) from one read of the rows: each sum
    is added row by row, as those functions add them."""
    per: dict[Any, dict[str, float]] = defaultdict(lambda: dict.fromkeys(CATEGORIES, 0.0))
    total = dict.fromkeys(CATEGORIES, 0.0)
    for day, cats in days.values_list("day", "categories_usd"):
        group = per[day]
        for name in CATEGORIES:
            value = float(cats.get(name, 0))
            group[name] += value
            total[name] += value
    rounded = {k: {name: round(v, 2) for name, v in c.items()} for k, c in per.items()}
    return rounded, {name: round(v, 2) for name, v in total.items()}


def overview(*, principal: Any, period: Period) -> dict[str, Any]:
    visible = visible_for(principal)
    in_period = sums.Scope(visible.project_ids, since=period.start, until=period.end)
    by_gpu = [
        {"gpu": row["gpu_key"] or "unknown",
         **pick(figures_from_sums(sums.unprefixed(row, ""), 0), "gpu_hours", "cost_usd", "recoverable_usd", "lost_usd")}
        for row in sums.day_sums(model=RunDay, scope=in_period, group="gpu_key", windows={"": None})
    ]  # fmt: skip
    figures = _page_figures(visible, period, None, None)
    return {
        "period": period.as_dict(),
        "previous": period.previous().as_dict(),
        "data_from": figures["data_from"],
        "totals": figures["totals"],
        "previous_totals": figures["previous_totals"],
        "by_day": figures["by_day"],
        "by_category": figures["by_category"],
        "by_gpu": sorted(by_gpu, key=lambda row: -row["cost_usd"]),
        "worst_runs": leaderboard(principal=visible, kind="runs", period=period, sort="-recoverable_usd", limit=10)["rows"],
    }


def _scoped(
    visible: Visible, period: Period, team: Team | None, project: Project | None
) -> tuple[QuerySet[ProjectDay], QuerySet[RunDay]]:
    days, run_days = _project_days(visible, period), _run_days(visible, period)
    if team is not None:
        days, run_days = days.filter(team=team), run_days.filter(team=team)
    if project is not None:
        days, run_days = days.filter(project=project), run_days.filter(project=project)
    return days, run_days


def scope_summary(*, principal: Any, period: Period, team: Team | None = None, project: Project | None = None) -> dict[str, Any]:
    visible = visible_for(principal)
    days, run_days = _scoped(visible, period, team, project)
    runs = {row["project_id"]: row["n"] for row in run_days.values("project_id").annotate(n=Count("run_id", distinct=True))}
    per_project = {
        row["project_id"]: figures_from_sums(row, runs.get(row["project_id"], 0))
        for row in days.values("project_id").annotate(**AGG)
    }
    names = _names("projects", set(per_project))
    top = [
        (row["run_id"], figures_from_sums(row, 1))
        for row in run_days.values("run_id").annotate(**AGG).order_by("-recoverable", "run_id")[:10]
    ]
    run_names = _names("runs", {rid for rid, _ in top})
    figures = _page_figures(visible, period, team, project)
    return {
        "period": period.as_dict(),
        "previous": period.previous().as_dict(),
        "data_from": figures["data_from"],
        "totals": figures["totals"],
        "previous_totals": figures["previous_totals"],
        "by_day": figures["by_day"],
        "by_category": figures["by_category"],
        "projects": sorted(({**names[pid], **fig} for pid, fig in per_project.items()), key=lambda r: -r["recoverable_usd"]),
        "top_runs": [{**run_names[rid], **fig, "period_cost_usd": fig["cost_usd"]} for rid, fig in top],
    }


def teams_visible(*, principal: Any) -> list[dict[str, Any]]:
    """Teams and projects the principal may see, for filters and navigation."""
    projects = projects_visible(principal).select_related("team").order_by("team__slug", "slug")
    teams: dict[str, dict[str, Any]] = {}
    for project in projects:
        team = teams.setdefault(project.team.slug, {"slug": project.team.slug, "name": project.team.label, "projects": []})
        team["projects"].append({"slug": project.slug, "name": project.label})
    return list(teams.values())

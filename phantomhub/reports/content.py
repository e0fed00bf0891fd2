"""What a report says: its figures, computed with the subscriber's visibility, its CSV (the same
file the page's export gives) and the link back to the page (docs/reports.md, "What is sent").

Every builder reads through the portal's own selectors, as the page does, so the attachment's
TOTAL line is the page's totals. A subscriber who may no longer read what they subscribed to
(they left the team, lost the finance role, the saved view was unshared) gets no report: the
builder raises ReportRefused, and the delivery log says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

from django.conf import settings
from django.contrib.auth.models import User

from phantomhub.accounts.models import Project, Team
from phantomhub.accounts.selectors import projects_visible, user_sees_everything
from phantomhub.csvfile import csv_text
from phantomhub.errors import ApiError
from phantomhub.periods import Period, month_period, period_parse
from phantomhub.planning.models import Budget
from phantomhub.planning.selectors import budgets_status
from phantomhub.portal import exports, finance, people, run_list, selectors
from phantomhub.portal.saved_views import views_visible
from phantomhub.portal.view_query import view_url
from phantomhub.reports.models import ReportKind, Subscription
from phantomhub.reports.schedule import ReportPeriod
from phantomhub.waste.models import RunAnalysis

MONEY = ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd")
HEADLINE = ("runs", "gpu_hours", *MONEY)
TOP_RECOMMENDATIONS = 5


class ReportRefused(Exception):
    """The report is not sent: the subscriber may not (any longer) read it, or its target is gone."""


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass
class Report:
    kind: str
    title: str
    period: ReportPeriod
    url: str  # the page it was read from (settings.PUBLIC_URL)
    totals: dict[str, Any]  # the CSV's TOTAL line: what the page's totals say
    csv_name: str
    csv: str
    note: str = ""  # said in the email, the webhook and the CSV: e.g. a closed month that moved
    lines: list[str] = field(default_factory=list)  # the summary, a sentence each
    tables: list[Table] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # the webhook's machine-readable part


def link(path: str, **query: str) -> str:
    """A link back to the web UI at PUBLIC_URL (as the alerts' run links)."""
    return settings.PUBLIC_URL.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")


def usd(value: float | None) -> str:
    return "–" if value is None else f"${value:,.2f}"


def signed_usd(value: float) -> str:
    return f"{'+' if value >= 0 else '−'}${abs(value):,.2f}"


def budget_status(scope: Team | Project, now: datetime) -> list[dict[str, Any]]:
    """The scope's own budgets (a team's: the team's, not its projects') in force in the month the
    digest is sent in (UTC), as the Budgets page states them: spent to date, the budget, the
    month-end forecast and its interval, over or within, and the recoverable dollars that would
    bring it under (planning.selectors.budget_status; docs/budgets.md)."""
    budgets = Budget.objects.filter(team=scope) if isinstance(scope, Team) else Budget.objects.filter(project=scope)
    month = month_period(f"{now.astimezone(UTC):%Y-%m}")
    statuses = budgets_status(budgets=budgets.select_related("team", "project", "project__team"), month=month, now=now)
    return [status.as_dict() for status in statuses]


def budget_line(status: dict[str, Any]) -> str:
    """One budget's status as a sentence of the digest."""
    forecast = status["forecast"]
    gpu = status["budget"]["gpu_key"] or "every GPU model"
    said = f"Budget {status['month']} ({gpu}): {usd(status['spent_usd'])} of {usd(status['budget_usd'])} spent"
    if forecast is None:
        return said + "."
    said += f"; forecast {usd(forecast['point_usd'])} (p10 {usd(forecast['p10_usd'])} to p90 {usd(forecast['p90_usd'])})"
    if not status["over"]:
        return said + ", within budget."
    said += f", over by {usd(status['over_by_usd'])}"
    if status["cut_enough"]:
        return said + f": recovering {usd(status['cut_usd'])} of the recoverable waste would bring it under."
    return said + f": all {usd(status['recoverable_ahead_usd'])} recoverable would not be enough."


def _with_note(csv: str, note: str) -> str:
    """The page's CSV, then, when there is something to say, a `note` line after its TOTAL."""
    return csv + csv_text(["note"], [[note]]) if note else csv


def _closed_note(page: dict[str, Any], month: str) -> str:
    """A closed month whose live figures now differ from the frozen ones: said, with the causes."""
    adjustment = page.get("adjustment")
    if not page.get("closed") or not adjustment or not adjustment.get("differs"):
        return ""
    diff = adjustment["difference"]
    causes = sorted({c["kind"] for c in adjustment.get("causes", [])})
    because = f" Causes: {', '.join(c.replace('_', ' ') for c in causes)}." if causes else ""
    by = f" by {page['closed_by']}" if page.get("closed_by") else ""
    return (
        f"{month} was closed on {page['closed_at'][:10]}{by}; these are its closed figures. The live figures now "
        f"differ by {signed_usd(diff['cost_usd'])} cost, {signed_usd(diff['waste_usd'])} waste and "
        f"{signed_usd(diff['recoverable_usd'])} recoverable (as of {adjustment['as_of'][:16].replace('T', ' ')} UTC).{because}"
    )


def _finance(owner: User, month: str, *, whole_org: bool, period: ReportPeriod, kind: str) -> Report:
    page = finance.finance_page(period=month_period(month), principal=owner, whole_org=whole_org)
    note = _closed_note(page, month)
    totals = {k: page["totals"][k] for k in HEADLINE}
    rows = sorted(page["rows"], key=lambda r: -r["cost_usd"])
    shown = [[r["team"], r["project"], usd(r["cost_usd"]), usd(r["waste_usd"]), usd(r["recoverable_usd"])] for r in rows[:20]]
    more = f" (the {len(rows)} projects are all in the attached CSV)" if len(rows) > 20 else ""
    state = "closed" if page["closed"] else "open"
    return Report(
        kind=kind,
        title=f"Finance review, {month}",
        period=period,
        url=link("/finance", month=month),
        totals=totals,
        csv_name=f"phantomhub-finance-{month}-{state}.csv",
        csv=_with_note(exports.finance_csv(page), note),
        note=note,
        lines=[
            f"{month} ({state}): {usd(totals['cost_usd'])} spent on {totals['gpu_hours']:,.1f} GPU-hours "
            f"by {totals['runs']} runs.",
            f"Waste {usd(totals['waste_usd'])}, of which {usd(totals['recoverable_usd'])} recoverable; "
            f"lost work {usd(totals['lost_usd'])}.",
        ],
        tables=[Table(f"Projects by cost{more}", ["team", "project", "cost", "waste", "recoverable"], shown)],
        figures={"month": month, "closed": page["closed"], "totals": totals,
                 "adjustment": page["adjustment"]["difference"] if note else None},
    )  # fmt: skip


def _recommendations(run_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The largest savings among the recommendations of the period's costliest-to-waste runs."""
    names = {row["key"]: row for row in run_rows}
    found = []
    for run_id, recs in RunAnalysis.objects.filter(run_id__in=list(names)).values_list("run_id", "recommendations"):
        row = names[str(run_id)]
        for rec in recs or []:
            if isinstance(rec, dict) and isinstance(rec.get("saving_usd"), int | float) and rec["saving_usd"] > 0:
                found.append({"title": str(rec.get("title", "")), "saving_usd": round(float(rec["saving_usd"]), 2),
                              "run": row["name"], "run_id": str(run_id), "project": row["project"],
                              "url": link(f"/runs/{run_id}")})  # fmt: skip
    return sorted(found, key=lambda r: (-r["saving_usd"], r["run_id"], r["title"]))[:TOP_RECOMMENDATIONS]


def _digest(owner: User, period: ReportPeriod, *, team: Team | None, project: Project | None, kind: str, now: datetime) -> Report:
    seen = projects_visible(owner)
    if project is not None and not seen.filter(pk=project.pk).exists():
        raise ReportRefused(f"the subscriber no longer sees the project {project.slug}")
    if team is not None and not seen.filter(team=team).exists():
        raise ReportRefused(f"the subscriber no longer sees the team {team.slug}")
    days = Period(period.start, period.end, f"{period.start.isoformat()}..{period.end.isoformat()}")
    summary = selectors.scope_summary(principal=owner, period=days, team=team, project=project)
    totals = {k: summary["totals"][k] for k in HEADLINE}
    prev = summary["previous_totals"]
    changes = {k: round(totals[k] - prev[k], 2) for k in MONEY} if prev else None
    scope = project or team
    assert scope is not None
    name = f"{'project' if project else 'team'} {scope.label}"
    budgets = budget_status(scope, now)
    recs = _recommendations(summary["top_runs"])
    lines = [
        f"Week {period.key} ({period.start:%d %b} to {period.end:%d %b %Y}), {name}: {usd(totals['cost_usd'])} spent "
        f"on {totals['gpu_hours']:,.1f} GPU-hours by {totals['runs']} runs.",
        f"Waste {usd(totals['waste_usd'])}, of which {usd(totals['recoverable_usd'])} recoverable.",
        ("Against the week before: " + ", ".join(f"{k.removesuffix('_usd')} {signed_usd(v)}" for k, v in changes.items()) + ".")
        if changes is not None else "No week before to compare with (no data before this week).",
        *([budget_line(b) for b in budgets] or ["Budget: no budget set."]),
    ]  # fmt: skip
    tables = [
        Table("Top recommendations", ["saving", "recommendation", "run", "project"],
              [[usd(r["saving_usd"]), r["title"], r["run"], r["project"]] for r in recs]),
        Table("Projects", ["project", "cost", "waste", "recoverable"],
              [[p["key"], usd(p["cost_usd"]), usd(p["waste_usd"]), usd(p["recoverable_usd"])] for p in summary["projects"]]),
    ]  # fmt: skip
    path = f"/projects/{project.slug}" if project else f"/teams/{scope.slug}"
    return Report(
        kind=kind,
        title=f"Weekly digest, {name}, {period.key}",
        period=period,
        url=link(path, period=days.label),
        totals=totals,
        csv_name=f"phantomhub-{'project' if project else 'team'}-{scope.slug}-{period.key}.csv",
        csv=exports.scope_csv(summary, team=team.slug if team else None, project=project.slug if project else None),
        lines=lines,
        tables=tables,
        figures={"scope": {"kind": "project" if project else "team", "slug": scope.slug, "name": scope.label},
                 "totals": totals, "previous_totals": {k: prev[k] for k in HEADLINE} if prev else None,
                 "changes": changes, "budgets": budgets, "top_recommendations": recs},
    )  # fmt: skip


def _view_month(params: dict[str, str], period: ReportPeriod) -> str:
    """A saved finance view names its month, or follows the report's: the month the period began in."""
    return params.get("month") or f"{period.start:%Y-%m}"


def _saved_view(owner: User, sub: Subscription, period: ReportPeriod) -> Report:
    view = views_visible(owner).filter(pk=sub.saved_view_id).first() if sub.saved_view_id is not None else None
    if view is None:
        raise ReportRefused("the subscriber no longer sees the saved view")
    params = dict(parse_qsl(view.query))
    title = f"Saved view {view.name!r}"
    try:
        if view.page == "finance":
            month = _view_month(params, period)
            report = _finance(owner, month, whole_org=user_sees_everything(owner), period=period, kind=sub.kind)
            report.title, report.url = f"{title}: finance review, {month}", link("/finance", **{**params, "month": month})
            return report
        if view.page == "runs":
            return _runs_view(owner, view.name, params, period, title, sub.kind)
        return _board_view(owner, params, period, title, sub.kind)
    except ApiError as exc:  # a filter the page would answer 400 to (a date past the range, ...)
        raise ReportRefused(f"the saved view cannot be read: {exc.message}") from None


def _runs_view(owner: User, name: str, params: dict[str, str], period: ReportPeriod, title: str, kind: str) -> Report:
    filters = run_list.run_filters(params)
    sort = params.get("sort")
    listing = run_list.runs_list(principal=owner, filters=filters, sort=sort, page=1, page_size=10)
    rows = run_list.runs_all(principal=owner, filters=filters, sort=sort)
    totals = {k: listing["totals"].get(k) for k in ("count", "gpu_hours", *MONEY)}
    shown = [[r["name"], r["project"], usd(r["cost_usd"]), usd(r["recoverable_usd"])] for r in listing["results"]]
    return Report(
        kind=kind, title=title, period=period, url=link(view_url("runs", urlencode(params))), totals=totals,
        csv_name=f"phantomhub-runs-{period.key}.csv",
        csv="".join(exports.runs_csv(rows, span=run_list.billed_span(filters))),
        lines=[f"{listing['count']} runs match {name!r}: {usd(totals['cost_usd'])} cost, "
               f"{usd(totals['recoverable_usd'])} recoverable."],
        tables=[Table("First runs of the list", ["run", "project", "cost", "recoverable"], shown)],
        figures={"page": "runs", "query": params, "totals": totals},
    )  # fmt: skip


def _board_view(owner: User, params: dict[str, str], period: ReportPeriod, title: str, kind: str) -> Report:
    board_kind = params.get("kind") or "teams"
    board_period = period_parse(params.get("period"))
    sort = params.get("sort")
    if board_kind == "people":
        board = people.people_board(principal=owner, period=board_period, sort=sort, limit=None)
    else:
        board = selectors.leaderboard(principal=owner, kind=board_kind, period=board_period, sort=sort, limit=None)
    totals = dict(board.get("totals") or {})
    shown = [[str(r.get("name") or r["key"]), usd(r.get("cost_usd")), usd(r.get("recoverable_usd"))] for r in board["rows"][:10]]
    return Report(
        kind=kind, title=f"{title}: {board_kind}, {board_period.label}", period=period,
        url=link(view_url("leaderboards", urlencode(params))), totals=totals,
        csv_name=f"phantomhub-{board_kind}-{board_period.label}.csv",
        csv="".join(exports.leaderboard_csv(board_kind, board)),
        lines=[f"The {board_kind} leaderboard over {board_period.label}: {len(board['rows'])} rows."],
        tables=[Table(f"Top {board_kind}", ["name", "cost", "recoverable"], shown)],
        figures={"page": "leaderboards", "query": params, "totals": totals},
    )  # fmt: skip


def report_build(sub: Subscription, period: ReportPeriod, *, now: datetime) -> Report:
    """The report `sub` sends for `period`, as its owner may read it at `now`; ReportRefused when they may not."""
    owner = sub.owner
    if not owner.is_active:
        raise ReportRefused("the subscriber's account is deactivated")
    if sub.kind == ReportKind.FINANCE_MONTH:
        if not user_sees_everything(owner):
            raise ReportRefused("the finance review is finance's and organization admins'; the subscriber is neither")
        return _finance(owner, period.key, whole_org=True, period=period, kind=sub.kind)
    if sub.kind == ReportKind.DIGEST_TEAM:
        return _digest(owner, period, team=sub.team, project=None, kind=sub.kind, now=now)
    if sub.kind == ReportKind.DIGEST_PROJECT:
        return _digest(owner, period, team=None, project=sub.project, kind=sub.kind, now=now)
    return _saved_view(owner, sub, period)

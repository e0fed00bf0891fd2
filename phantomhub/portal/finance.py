"""Reads for the finance review: a month's spend per team and project, footed to the cent, and
the price-book entries that priced it. Like every portal read, from the daily rollups only.

A closed month (portal.models) is read from its frozen copy; beside it, the live difference and
what caused it (a price entry changed, by whom and when; a newer waste model; late telemetry)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, cast

from django.db.models import Count, Manager, Model, QuerySet, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from phantomhub.accounts.models import Project
from phantomhub.accounts.selectors import projects_visible, user_sees_everything
from phantomhub.fleet.reconcile import invoice_reconcile
from phantomhub.periods import Period
from phantomhub.portal.footing import largest_remainder
from phantomhub.portal.models import (
    ClosedMonth,
    ClosedProjectDay,
    ClosedRunDay,
    MonthLog,
    PolicyChange,
    ProjectDayRead,
    RunDayRead,
)
from phantomhub.portal.selectors import AGG, categories_by, categories_total, figures_from_sums, pick
from phantomhub.pricing.models import PriceAudit, PriceEntry
from phantomhub.waste.core.inputs import MODEL_VERSION
from phantomhub.waste.core.model import CATEGORIES
from phantomhub.waste.models import ProjectDay, RunDay

_FIN_MONEY = ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd")


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


def _entries_used(period: Period, projects: QuerySet[Project] | None = None, live: bool = True) -> dict[int, set[int]]:
    """Per project, the price-book entries that priced its runs in the period."""
    days = (RunDay if live else RunDayRead).objects.filter(day__gte=period.start, day__lte=period.end)
    if projects is not None:
        days = days.filter(project__in=projects)
    used: dict[int, set[int]] = defaultdict(set)
    for project_id, ids in days.values_list("project_id", "price_entry_ids"):
        used[project_id].update(ids)
    return used


def finance_review(*, period: Period, live: bool = True) -> dict[str, Any]:
    """The month's review for the whole organization (callers filter rows by visibility): from the
    live rollups, or (`live` False) as pages read them, a closed month from its frozen copy."""
    # ProjectDayRead has ProjectDay's columns: typed as the rollups it reads.
    project_days = ProjectDay.objects if live else cast("Manager[ProjectDay]", ProjectDayRead.objects)
    run_days: type[Model] = RunDay if live else RunDayRead
    days = project_days.filter(day__gte=period.start, day__lte=period.end)
    runs = {
        row["project_id"]: row["n"]
        for row in run_days._default_manager.filter(day__gte=period.start, day__lte=period.end)
        .values("project_id")
        .annotate(n=Count("run_id", distinct=True))
    }
    categories = categories_by(days, "project_id")
    per_project = {
        row["project_id"]: figures_from_sums(row, runs.get(row["project_id"], 0))
        for row in days.values("project_id").annotate(**AGG)
    }
    projects = {p.pk: p for p in Project.objects.filter(pk__in=per_project).select_related("team")}
    used = _entries_used(period, live=live)
    money = ("runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd")
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


def review_upgraded(review: dict[str, Any]) -> dict[str, Any]:
    """A review as this code writes it, from a snapshot of a month closed by older code: rows and
    totals without `lost_usd` (closed before lost work was priced) read 0, as its frozen days do."""
    if all("lost_usd" in r for r in review["rows"]) and "lost_usd" in review["totals"]:
        return review
    rows = [{**r, "lost_usd": r.get("lost_usd", 0.0)} for r in review["rows"]]
    return {**review, "rows": rows, "totals": {**review["totals"], "lost_usd": review["totals"].get("lost_usd", 0.0)}}


def finance_rows_visible(review: dict[str, Any], principal: Any, period: Period) -> dict[str, Any]:
    """Restrict a (possibly frozen) review to the projects the principal may see: its rows, their
    totals, and the price-book entries that priced those rows only. A snapshot of older code is
    read as this code writes it (review_upgraded)."""
    review = review_upgraded(review)
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
                              "lost_usd": 0.0, "categories_usd": dict.fromkeys(CATEGORIES, 0.0)}  # fmt: skip
    for row in rows:
        for key in ("runs", "gpu_hours", *_FIN_MONEY):
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


# -- closed months ---------------------------------------------------------------------------

_DIFF = ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd")


def month_closed(period: Period) -> ClosedMonth | None:
    """The closed month a period is (the whole of it, however it was asked: `2026-11` or its days)."""
    if period.start.day != 1 or (period.end + timedelta(days=1)).day != 1 or period.start.month != period.end.month:
        return None
    return ClosedMonth.objects.filter(month=period.start).select_related("closed_by").first()


def today_utc() -> date:
    """Today's UTC date: the current month is the one it falls in (tests move it)."""
    return timezone.now().date()


def month_close_refusal(period: Period) -> str | None:
    """Why the month cannot be closed (None: it can): it has not ended (its runs are still being
    billed), or it has no spend."""
    today = today_utc()
    if period.start > today.replace(day=1) - timedelta(days=1):
        return f"{period.label} is not over: its runs are still being billed; close it once it has ended"
    if not ProjectDay.objects.filter(day__gte=period.start, day__lte=period.end, cost_usd__gt=0).exists():
        return f"{period.label} has no spend: there is nothing to close"
    return None


def month_closable(period: Period) -> dict[str, Any]:
    refusal = month_close_refusal(period)
    return {"ok": refusal is None, "reason": refusal}


def _month_bounds(closed: ClosedMonth) -> tuple[datetime, datetime]:
    last = closed.last_day or closed.month
    return datetime.combine(closed.month, time(), UTC), datetime.combine(last + timedelta(days=1), time(), UTC)


def _span_reaches(snap: dict[str, Any] | None, start: datetime, end: datetime) -> bool:
    if not snap or not snap.get("effective_from"):
        return False
    begins = parse_datetime(snap["effective_from"])
    ends = parse_datetime(snap["effective_to"]) if snap.get("effective_to") else None
    return begins is not None and begins < end and (ends is None or ends > start)


def _audit_reaches(audit: PriceAudit, start: datetime, end: datetime) -> bool:
    """Whether a price-book change repriced part of [start, end): a new or deleted entry over it,
    a new price of an entry in force in it, or an end date moved across it. A note, the example
    flag, or an entry closed by a new one (the create says it) reprices nothing."""
    before, after = audit.before or {}, audit.after or {}
    if audit.action == "create":
        return _span_reaches(after, start, end)
    if audit.action == "delete":
        return _span_reaches(before, start, end)
    if audit.action != "update":
        return False
    if before.get("usd_per_gpu_hour") != after.get("usd_per_gpu_hour"):
        return _span_reaches(before, start, end) or _span_reaches(after, start, end)
    if before.get("effective_to") != after.get("effective_to"):
        ends = [parse_datetime(t) if t else None for t in (before.get("effective_to"), after.get("effective_to"))]
        known = [t for t in ends if t is not None]
        moved = {"effective_from": min(known).isoformat(), "effective_to": max(known).isoformat() if None not in ends else None}
        return bool(known) and _span_reaches(moved, start, end)
    return False


def _price_causes(closed: ClosedMonth, show_who: bool) -> list[dict[str, Any]]:
    """The price-book changes since the close whose entry, before or after, priced part of the month."""
    start, end = _month_bounds(closed)
    causes = []
    for audit in PriceAudit.objects.filter(at__gt=closed.closed_at).select_related("actor").order_by("at", "id"):
        if not _audit_reaches(audit, start, end):
            continue
        entry = audit.after or audit.before or {}
        causes.append({
            "kind": "price",
            "at": audit.at.isoformat(),
            "by": (audit.actor.get_username() if audit.actor else audit.actor_label or None) if show_who else None,
            "action": audit.action,
            "price_entry_id": audit.entry_id,
            "gpu": entry.get("gpu"),
            "provider": entry.get("provider", ""),
            "region": entry.get("region", ""),
            "tier": entry.get("tier"),
            "before_usd_per_gpu_hour": (audit.before or {}).get("usd_per_gpu_hour"),
            "after_usd_per_gpu_hour": (audit.after or {}).get("usd_per_gpu_hour"),
        })  # fmt: skip
    return causes


def _sums(days: QuerySet[Any]) -> dict[str, float]:
    row = days.aggregate(gpu_seconds=Sum("gpu_seconds"), **{name: Sum(name) for name in _DIFF})
    return {name: round(float(row[name] or 0), 2) for name in _DIFF} | {"gpu_hours": round((row["gpu_seconds"] or 0) / 3600, 3)}


def closed_note(
    *, closed: ClosedMonth, principal: Any, project_ids: list[int] | None = None, team_id: int | None = None,
    project_id: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """What a page reading a closed month says beside its frozen figures: when and by whom it was
    closed, and the live figures' difference (as of now) with what caused it. `project_ids` None:
    the projects the principal may see."""
    if project_ids is None:
        project_ids = list(projects_visible(principal).values_list("pk", flat=True))
    scope: dict[str, Any] = {"project_id__in": project_ids}
    if team_id is not None:
        scope["team_id"] = team_id
    if project_id is not None:
        scope["project_id"] = project_id
    last = closed.last_day or closed.month
    frozen = _sums(ClosedProjectDay.objects.filter(month=closed, **scope))
    live = _sums(ProjectDay.objects.filter(day__gte=closed.month, day__lte=last, **scope))
    difference = {name: round(live[name] - frozen[name], 2) for name in _DIFF}
    difference["gpu_hours"] = round(live["gpu_hours"] - frozen["gpu_hours"], 3)
    differs = any(difference[name] for name in _DIFF)
    return {
        "month": f"{closed.month:%Y-%m}",
        "closed_at": closed.closed_at.isoformat(),
        "closed_by": closed.closed_by.get_username() if closed.closed_by else None,
        "frozen": frozen,
        "live": live,
        "difference": difference,
        "differs": differs,
        "as_of": timezone.now().isoformat(),
        "causes": _causes(closed, principal, scope) if differs else [],
    }


def _causes(closed: ClosedMonth, principal: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Why live figures moved since the close: price-book changes reaching into the month (who may
    read the price audit sees who made them), a newer waste model, runs billed late."""
    show_who = user_sees_everything(principal)
    causes = _price_causes(closed, show_who=show_who)
    for change in PolicyChange.objects.filter(at__gt=closed.closed_at).select_related("actor").order_by("at", "id"):
        causes.append({
            "kind": "policy",
            "at": change.at.isoformat(),
            "by": (change.actor.get_username() if change.actor else None) if show_who else None,
            "before": change.before,
            "after": change.after,
        })  # fmt: skip
    if closed.model_version is not None and closed.model_version != MODEL_VERSION:
        causes.append({"kind": "model", "from_version": closed.model_version, "to_version": MODEL_VERSION})
    last = closed.last_day or closed.month
    frozen_runs = set(ClosedRunDay.objects.filter(month=closed, **scope).values_list("run_id", flat=True))
    live_runs = set(RunDay.objects.filter(day__gte=closed.month, day__lte=last, **scope).values_list("run_id", flat=True))
    if live_runs - frozen_runs:
        causes.append({"kind": "telemetry", "runs_added": len(live_runs - frozen_runs)})
    if frozen_runs - live_runs:
        causes.append({"kind": "telemetry_removed", "runs_removed": len(frozen_runs - live_runs)})
    return causes


def finance_adjustment(*, closed: ClosedMonth, review: dict[str, Any], principal: Any, period: Period) -> dict[str, Any]:
    """A closed review's dated adjustment: per team/project row, the live figures against the
    frozen ones (only rows that differ), their totals, and the causes."""
    review = review_upgraded(review)
    live = finance_rows_visible(finance_review(period=period), principal, period)
    frozen_rows = {(r["team"], r["project"]): r for r in review["rows"]}
    live_rows = {(r["team"], r["project"]): r for r in live["rows"]}
    rows = []
    for key in sorted(set(frozen_rows) | set(live_rows)):
        was, now = frozen_rows.get(key), live_rows.get(key)
        diff = {name: round((now[name] if now else 0) - (was[name] if was else 0), 2) for name in _DIFF}
        if any(diff.values()):
            row = was or now
            assert row is not None
            rows.append({"team": key[0], "team_name": row.get("team_name"), "project": key[1],
                         "project_name": row.get("project_name"),
                         "frozen_cost_usd": was["cost_usd"] if was else 0.0, "live_cost_usd": now["cost_usd"] if now else 0.0,
                         "difference": diff})  # fmt: skip
    difference = {name: round(live["totals"][name] - review["totals"][name], 2) for name in _DIFF}
    differs = bool(rows) or any(difference.values())
    visible = list(projects_visible(principal).values_list("pk", flat=True))
    return {
        "as_of": timezone.now().isoformat(),
        "differs": differs,
        "live_totals": {name: live["totals"][name] for name in (*_DIFF, "runs", "gpu_hours")},
        "difference": difference,
        "rows": rows,
        "causes": _causes(closed, principal, {"project_id__in": visible}) if differs else [],
    }


def finance_page(*, period: Period, principal: Any, whole_org: bool) -> dict[str, Any]:
    """The finance page (and its CSV) as `principal` reads it: the month's review restricted to
    what it may see (a closed month's frozen copy, with the live figures' dated adjustment beside
    it), the month's closes and reopens (their organization totals only for `whole_org`: finance
    and admins) and whether it may be closed. The scheduled reports send this same review."""
    closed = ClosedMonth.objects.filter(month=period.start).select_related("closed_by").first()
    review = closed.snapshot if closed else finance_review(period=period)
    review = finance_rows_visible(review, principal, period)
    # A closed month's frozen figures, and beside them what the live figures say now and why.
    adjustment = None
    if closed is not None:
        adjustment = finance_adjustment(closed=closed, review=review, principal=principal, period=period)
    history = month_history(period.start)
    if not whole_org:  # the whole organization's totals are finance's
        history = [{**entry, "totals": None} for entry in history]
    return review | {
        "closed": closed is not None,
        "closed_at": closed.closed_at.isoformat() if closed else None,
        "closed_by": closed.closed_by.get_username() if closed and closed.closed_by else None,
        "model_version": closed.model_version if closed else None,
        "adjustment": adjustment,
        "history": history,
        "closable": month_closable(period),
    }


def month_history(month: Any) -> list[dict[str, Any]]:
    """The month's closes and reopens, newest first: who, when, why, and the totals then."""
    return [
        {
            "action": log.action,
            "by": log.actor.get_username() if log.actor else None,
            "at": log.at.isoformat(),
            "reason": log.reason,
            "totals": _totals_upgraded(log.totals),
        }
        for log in MonthLog.objects.filter(month=month).select_related("actor")
    ]


def _totals_upgraded(totals: dict[str, Any]) -> dict[str, Any]:
    """A log's totals recorded before lost work was priced read `lost_usd` 0 (review_upgraded)."""
    return {**totals, "lost_usd": 0.0} if totals and "lost_usd" not in totals else totals


def closed_months_reached(sender: Any, *, start: datetime, end: datetime | None, **kwargs: Any) -> list[str]:
    """The closed months [start, end) overlaps (pricing asks before a price change; portal/apps.py)."""
    months = ClosedMonth.objects.filter(month__lte=end.date() if end else date.max)
    labels = []
    for month, last in months.values_list("month", "last_day"):
        if datetime.combine((last or month) + timedelta(days=1), time(), UTC) > start and (
            end is None or datetime.combine(month, time(), UTC) < end
        ):
            labels.append(f"{month:%Y-%m}")
    return labels

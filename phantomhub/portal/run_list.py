"""The runs list: runs filtered, sorted and paged, each with its figures within the list's billed
days beside its whole figures, and totals over every matching run (docs/portal-api.md, Runs).
Like every portal read, from the derived tables: the run's analysis and its run-days (as pages
read them, a closed month's frozen), never raw steps."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from django.db import connection
from django.db.models import DecimalField, Exists, F, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import invalid
from phantomhub.portal.models import RunDayRead
from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste.models import RunAnalysis, RunDay

SORTS = {"recoverable_usd", "lost_usd", "cost_usd", "waste_usd", "gpu_hours", "mfu", "waste_share", "started_at"}
# The runs list's figures within its billed days (`from`/`to`), summed from the run-days finance
# sums: sortable only when the list has such a period.
PERIOD_SORTS = {"period_cost_usd", "period_recoverable_usd", "period_lost_usd", "period_waste_usd", "period_gpu_hours"}
FILTERS = ("team", "project", "status", "gpu", "tag", "from", "to", "q", "launched_by")
LAUNCHED_BY_MAX = 128  # telemetry Run.launched_by


def _is_date(text: str) -> bool:
    from django.utils.dateparse import parse_date

    try:
        return parse_date(text) is not None
    except ValueError:
        return False


def run_filters(params: Mapping[str, str]) -> dict[str, str]:
    """The runs list's filters from query parameters (the page's URL, or a saved view's query),
    checked: a 400 naming the parameter at fault."""
    filters = {k: (params.get(k) or "").strip() for k in FILTERS}
    if len(filters["launched_by"]) > LAUNCHED_BY_MAX:
        raise invalid("launched_by", f"must be at most {LAUNCHED_BY_MAX} characters")
    for name in ("from", "to"):
        if filters[name] and not _is_date(filters[name]):
            raise invalid(name, "must be a date (YYYY-MM-DD)")
    if filters["from"] and filters["to"] and filters["to"] < filters["from"]:
        raise invalid("to", "must not be before from")
    return filters


def _money(value: Decimal | float | None) -> float:
    return round(float(value or 0), 2)


def sort_parse(text: str | None, default: str = "-recoverable_usd", *, period: bool = False) -> tuple[str, bool]:
    text = text or default
    field = text.lstrip("-")
    allowed = SORTS | PERIOD_SORTS if period else SORTS
    if field not in allowed:
        if field in PERIOD_SORTS:
            raise invalid("sort", f"{field} sorts a list with billed days (from/to) only")
        raise invalid("sort", f"must be one of {', '.join(sorted(allowed))}, optionally prefixed with '-'")
    return field, text.startswith("-")


# -- runs ------------------------------------------------------------------------------------


def run_billed_end(run: Run, analysis: RunAnalysis | None) -> datetime:
    """The end of the run's billed time. Billed GPU-seconds are gpu_count × (end − allocation_start)
    (docs/waste-model.md), so the stored GPU-hours give the end the analysis billed to, without
    reading its result; before an analysis, the finish or the last time the run was heard of."""
    if analysis is not None and analysis.analysed_at is not None and run.gpu_count:
        return run.allocation_start + timedelta(seconds=analysis.gpu_hours * 3600 / run.gpu_count)
    return run.finished_at or run.last_seen_at


def lost_usd(analysis: RunAnalysis) -> float:
    """The run's lost work in dollars (a job's rework, restarts and checkpoints: RunAnalysis.lost,
    docs/waste-model.md section 13); 0 for an analysis stored before it was priced."""
    return _money((analysis.lost or {}).get("usd"))


def run_row(run: Run, analysis: RunAnalysis | None) -> dict[str, Any]:
    # One definition of a run's time everywhere (list, filters, leaderboards, finance): its billed
    # span, from allocation_start (GPUs allocated) to the billed end, and the UTC days it covers.
    return {
        "id": str(run.pk),
        "name": run.name,
        "team": run.project.team.slug,
        "team_name": run.project.team.label,
        "project": run.project.slug,
        "project_name": run.project.label,
        "status": run.status,
        "gpu_model": run.gpu_model,
        "gpu_key": analysis.gpu_key if analysis else run.gpu_model,
        "gpu_count": run.gpu_count,
        "tags": run.tags,
        "started_at": run.allocation_start.isoformat(),
        "ended_at": run_billed_end(run, analysis).isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "gpu_hours": round(analysis.gpu_hours, 3) if analysis else None,
        "cost_usd": _money(analysis.cost_usd) if analysis else None,
        "waste_usd": _money(analysis.waste_usd) if analysis else None,
        "recoverable_usd": _money(analysis.recoverable_usd) if analysis else None,
        "lost_usd": lost_usd(analysis) if analysis else None,
        "waste_share": round(analysis.waste_share, 4) if analysis else None,
        "mfu": analysis.mfu if analysis else None,
        "analysed": bool(analysis and analysis.analysed_at),
        # The whole run's cost under a name of its own, beside `period_cost_usd` where a list has
        # billed days (runs_list): `cost_usd` stays the whole run's for older clients.
        "whole_cost_usd": _money(analysis.cost_usd) if analysis else None,
        "launched_by": run.launched_by,
    }


def runs_visible(principal: Any) -> QuerySet[Run]:
    # The subquery, not the ids: the run list reads the runs in one statement either way, and this
    # spares it the statement that reads the ids.
    return Run.objects.filter(project__in=projects_visible(principal))


def _billed_between(start: str | None, end: str | None) -> Q:
    """Runs billed on some UTC day from `start` to `end` (either open): the days finance counts a
    run in (as pages read them: a closed month's frozen). A run not analysed yet has no billed
    days; its allocation_start's day stands in."""
    days = _days_read().filter(run=OuterRef("pk"))
    unpriced = ~Q(Exists(RunDay.objects.filter(run=OuterRef("pk"))))
    if start:
        days = days.filter(day__gte=start)
        unpriced &= Q(allocation_start__date__gte=start)
    if end:
        days = days.filter(day__lte=end)
        unpriced &= Q(allocation_start__date__lte=end)
    return Q(Exists(days)) | unpriced


# A run's figures within the list's billed days: the run-days' sums (the rows finance and the
# leaderboards sum), by the names the runs list answers them under.
PERIOD_COLUMNS = {
    "period_gpu_hours": "gpu_seconds",
    "period_cost_usd": "cost_usd",
    "period_waste_usd": "waste_usd",
    "period_recoverable_usd": "recoverable_usd",
    "period_lost_usd": "lost_usd",
}
Span = tuple[str | None, str | None]


def _days_read() -> QuerySet[RunDay]:
    """Run-days as every page reads them (portal.models RunDayRead: a closed month's frozen, other
    days live), so a list's period figures are the ones finance and the boards show."""
    return cast("QuerySet[RunDay]", RunDayRead.objects.all())


def billed_span(filters: dict[str, str]) -> Span | None:
    """The list's billed days (`from`, `to`; either open), or None when it has none."""
    start, end = filters.get("from") or None, filters.get("to") or None
    return (start, end) if start or end else None


def _days_within(days: QuerySet[RunDay], span: Span) -> QuerySet[RunDay]:
    start, end = span
    if start:
        days = days.filter(day__gte=start)
    if end:
        days = days.filter(day__lte=end)
    return days


def _period_figures(sums_row: dict[str, Any]) -> dict[str, Any]:
    return {
        "period_gpu_hours": round((sums_row.get("period_gpu_hours") or 0) / 3600, 3),
        "period_cost_usd": _money(sums_row.get("period_cost_usd")),
        "period_waste_usd": _money(sums_row.get("period_waste_usd")),
        "period_recoverable_usd": _money(sums_row.get("period_recoverable_usd")),
        "period_lost_usd": _money(sums_row.get("period_lost_usd")),
    }


def _with_period(rows: list[dict[str, Any]], span: Span | None) -> list[dict[str, Any]]:
    """The rows with each run's figures within `span` (one grouped statement for all of them). A
    run not analysed yet has none (null); without a span every period figure is null."""
    if span is None:
        return [row | dict.fromkeys(PERIOD_COLUMNS) for row in rows]
    ids = [uuid.UUID(row["id"]) for row in rows]
    days = _days_within(_days_read().filter(run_id__in=ids), span).values("run_id")
    summed: Any = days.annotate(**{name: Sum(column) for name, column in PERIOD_COLUMNS.items()})
    by_run = {str(row["run_id"]): _period_figures(row) for row in summed}
    empty = dict.fromkeys(PERIOD_COLUMNS)
    return [row | by_run.get(row["id"], _period_figures({}) if row["analysed"] else empty) for row in rows]


def _lost_of(analysis: str) -> Cast:
    """The whole run's lost dollars (RunAnalysis.lost's `usd`, what run_row shows) as a number SQL
    can sort and sum: `analysis` is the path to the analysis ("" from RunAnalysis itself). NULL for
    an analysis stored before lost work was priced."""
    return Cast(KeyTextTransform("usd", f"{analysis}lost"), DecimalField(max_digits=16, decimal_places=2))


def _period_sort_key(column: str, span: Span) -> Subquery:
    days = _days_within(_days_read().filter(run=OuterRef("pk")), span)
    return Subquery(days.values("run").annotate(summed=Sum(column)).values("summed")[:1])


def tagged_pg(tag: str) -> Q:
    """Runs with `tag` among their tags, on PostgreSQL: JSON containment (jsonb @>).
    tests/test_sql_pairs.py pins it to ``tagged``."""
    return Q(tags__contains=[tag])


def tagged(tag: str) -> Q:
    """The same where there is no JSON containment (SQLite): the element, as a JSON string, in the
    list's JSON text: ASCII-escaped as Django writes JSON on SQLite, or not, as PostgreSQL prints
    jsonb (so that this runs there too). As SQLite's LIKE, it ignores the case of ASCII letters."""
    return Q(tags__icontains=json.dumps(tag)) | Q(tags__icontains=json.dumps(tag, ensure_ascii=False))


def _runs_filtered(principal: Any, filters: dict[str, str], sort: str | None) -> QuerySet[Run]:
    runs = (
        runs_visible(principal)
        .select_related("project", "project__team", "analysis")
        .defer("config", "environment", "analysis__result", "analysis__recommendations", "analysis__state",
               "analysis__rank_rows", "analysis__rank_last_step", "analysis__rank_figures")
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
        runs = runs.filter(tagged_pg(filters["tag"]) if connection.vendor == "postgresql" else tagged(filters["tag"]))
    if filters.get("from") or filters.get("to"):
        runs = runs.filter(_billed_between(filters.get("from"), filters.get("to")))
    if filters.get("q"):
        runs = runs.filter(name__icontains=filters["q"])
    if filters.get("launched_by"):
        runs = runs.filter(launched_by=filters["launched_by"])
    span = billed_span(filters)
    field, desc = sort_parse(sort, period=span is not None)
    if field in PERIOD_SORTS:
        assert span is not None
        runs = runs.annotate(period_key=_period_sort_key(PERIOD_COLUMNS[field], span))
        key = F("period_key")
    elif field == "lost_usd":
        runs = runs.annotate(lost_key=_lost_of("analysis__"))
        key = F("lost_key")
    else:
        key = F("allocation_start") if field == "started_at" else F(f"analysis__{field}")
    return runs.order_by(key.desc(nulls_last=True) if desc else key.asc(nulls_last=True), "-allocation_start", "id")


def _runs_totals(runs: QuerySet[Run], count: int, span: Span | None) -> dict[str, Any]:
    """The totals row of the whole filtered list (every page): the whole runs' figures, and their
    figures within the billed days, summed in the database from the same rows the list shows."""
    ids = runs.order_by().values("pk")
    whole = RunAnalysis.objects.filter(run__in=ids).aggregate(
        gpu_hours=Sum("gpu_hours"), cost=Sum("cost_usd"), waste=Sum("waste_usd"), recoverable=Sum("recoverable_usd"),
        lost=Sum(_lost_of("")),
    )  # fmt: skip
    cost, waste = float(whole["cost"] or 0), float(whole["waste"] or 0)
    totals: dict[str, Any] = {
        "runs": count,
        "gpu_hours": round(whole["gpu_hours"] or 0, 3),
        "cost_usd": _money(cost),
        "whole_cost_usd": _money(cost),
        "waste_usd": _money(waste),
        "recoverable_usd": _money(whole["recoverable"]),
        "lost_usd": _money(whole["lost"]),
        "waste_share": round(waste / cost, 4) if cost else None,
    }
    if span is None:
        return totals | dict.fromkeys(PERIOD_COLUMNS) | {"period_waste_share": None}
    summed = _days_within(_days_read().filter(run__in=ids), span).aggregate(
        **{name: Sum(column) for name, column in PERIOD_COLUMNS.items()}
    )
    figures = _period_figures(summed)
    in_cost = figures["period_cost_usd"]
    share = round(float(summed["period_waste_usd"] or 0) / float(summed["period_cost_usd"]), 4) if in_cost else None
    return totals | figures | {"period_waste_share": share}


def runs_list(*, principal: Any, filters: dict[str, str], sort: str | None, page: int, page_size: int) -> dict[str, Any]:
    """A page of the filtered list, its count, and the totals of every matching run. With billed
    days (`from`/`to`) each row and the totals also carry the figures within those days."""
    runs = _runs_filtered(principal, filters, sort)
    span = billed_span(filters)
    count = runs.count()
    offset = (page - 1) * page_size
    rows = [run_row(run, getattr(run, "analysis", None)) for run in runs[offset : offset + page_size]]
    pages = max(1, -(-count // page_size))
    return {
        "count": count,
        "page": page,
        "page_size": page_size,
        "pages": pages,
        "period": {"start": span[0], "end": span[1]} if span else None,
        "totals": _runs_totals(runs, count, span),
        "results": _with_period(rows, span),
    }


def runs_all(*, principal: Any, filters: dict[str, str], sort: str | None, chunk: int = 500) -> Iterator[dict[str, Any]]:
    """Every row of the filtered list (for CSV export), read in chunks, each chunk's figures within
    the billed days in one statement. The filters and the sort are checked now, not when the first
    row is read: by then a streamed answer has begun (a 500)."""
    runs = _runs_filtered(principal, filters, sort)
    span = billed_span(filters)

    def rows() -> Iterator[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        for run in runs.iterator(chunk_size=chunk):
            batch.append(run_row(run, getattr(run, "analysis", None)))
            if len(batch) == chunk:
                yield from _with_period(batch, span)
                batch = []
        if batch:
            yield from _with_period(batch, span)

    return rows()

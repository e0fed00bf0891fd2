"""Sums over the derived tables (waste.models RunDay and ProjectDay) in hand-written SQL.

The portal's pages ask a few shapes of question: the seven summed columns of the daily rows, per
group, over a period and its previous one side by side, with the first billed day; and distinct
runs the same way. Compiling such a statement with the ORM (a dozen filtered aggregates) cost more
CPU than PostgreSQL's work on it (bench/portal.py --in-process --profile), so they are written out
once here, in SQL that PostgreSQL and SQLite both run. Columns are named from the models' meta.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.db import connection
from django.db.models import Model

from phantomhub.periods import Period
from phantomhub.portal.models import ProjectDayRead, RunDayRead
from phantomhub.waste.models import ProjectDay, RunDay

# The summed columns, by the names figures_from_sums reads (selectors.SUMMED).
SUMMED = {
    "gpu_seconds": "gpu_seconds",
    "cost": "cost_usd",
    "waste": "waste_usd",
    "recoverable": "recoverable_usd",
    "lost": "lost_usd",
    "mfu_gs": "mfu_gpu_seconds",
    "mfu_known": "mfu_known_gpu_seconds",
}
GROUPS = {"team_id": "team", "project_id": "project", "day": "day", "gpu_key": "gpu_key", "run_id": "run"}
# How the runs board sorts (selectors.SORTS but started_at, which the ORM path keeps), in the
# summed columns: a share is a ratio of sums, never a sum of ratios.
RUN_ORDER = {
    "recoverable_usd": "SUM({recoverable_usd})",
    "lost_usd": "SUM({lost_usd})",
    "cost_usd": "SUM({cost_usd})",
    "waste_usd": "SUM({waste_usd})",
    "gpu_hours": "SUM({gpu_seconds})",
    # * 1.0: SQLite stores whole dollars as integers, and divides integers as integers.
    "waste_share": "SUM({waste_usd}) * 1.0 / NULLIF(SUM({cost_usd}), 0)",
    "mfu": "SUM({mfu_gpu_seconds}) * 1.0 / NULLIF(SUM({mfu_known_gpu_seconds}), 0)",
}


@dataclass(frozen=True)
class Scope:
    """Which daily rows: of these projects (the principal's), optionally one team or one project,
    optionally from `since` to `until` (days, inclusive)."""

    project_ids: tuple[int, ...]
    team_id: int | None = None
    project_id: int | None = None
    since: date | None = None
    until: date | None = None
    run_ids: tuple[uuid.UUID, ...] | None = None  # run-days only: of these runs


def _read_model(model: type[Model]) -> type[Model]:
    """The rollups as pages read them (portal.models): a closed month's days frozen, others live."""
    return {RunDay: RunDayRead, ProjectDay: ProjectDayRead}.get(model, model)


def _column(model: type[Model], name: str) -> str:
    column = getattr(model._meta.get_field(name), "column", None)
    assert isinstance(column, str), name
    return connection.ops.quote_name(column)


def in_list(column: str, values: list[Any]) -> tuple[str, list[Any]]:
    """`column` is one of `values`."""
    return in_array_pg(column, values) if connection.vendor == "postgresql" else in_values(column, values)


def in_array_pg(column: str, values: list[Any]) -> tuple[str, list[Any]]:
    """in_list on PostgreSQL: one array parameter, so the statement's text is the same for any
    number of values (the driver's parse of a statement is cached by its text, and parsing one
    with a hundred placeholders cost more than running it: a board page's day_sums over 100 runs
    took ~20% more CPU with placeholders, over 1,000 ~50% more). tests/test_sql_pairs.py pins it
    to in_values."""
    return f"{column} = ANY(%s)", [values]


def in_values(column: str, values: list[Any]) -> tuple[str, list[Any]]:
    """in_list as a placeholder each (SQLite; PostgreSQL runs it too)."""
    return f"{column} IN ({', '.join(['%s'] * len(values))})", values


def _where(model: type[Model], scope: Scope) -> tuple[str, list[Any]]:
    if not scope.project_ids:
        return "1 = 0", []
    projects, params = in_list(_column(model, "project"), list(scope.project_ids))
    parts = [projects]
    for name, value in (("team", scope.team_id), ("project", scope.project_id)):
        if value is not None:
            parts.append(f"{_column(model, name)} = %s")
            params.append(value)
    if scope.run_ids is not None:
        if not scope.run_ids:
            return "1 = 0", []
        run = RunDay._meta.get_field("run")
        runs, run_params = in_list(_column(model, "run"), [run.get_db_prep_value(r, connection) for r in scope.run_ids])
        parts.append(runs)
        params += run_params
    day = _column(model, "day")
    if scope.since is not None:
        parts.append(f"{day} >= %s")
        params.append(scope.since.isoformat())
    if scope.until is not None:
        parts.append(f"{day} <= %s")
        params.append(scope.until.isoformat())
    return " AND ".join(parts), params


def _in(model: type[Model], period: Period | None) -> tuple[str, list[Any]]:
    if period is None:
        return "1 = 1", []
    day = _column(model, "day")
    return f"{day} >= %s AND {day} <= %s", [period.start.isoformat(), period.end.isoformat()]


def as_date(value: Any) -> date | None:
    """A day as the backend returns it from plain SQL (SQLite: ISO text)."""
    if value is None or isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def _rows(sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _select(
    model: type[Model], group: str | None, parts: list[str], params: list[Any], scope: Scope, order: str = "", limit: int = 0
) -> list[dict[str, Any]]:
    where, where_params = _where(model, scope)
    table = connection.ops.quote_name(_read_model(model)._meta.db_table)
    head = [f"{_column(model, GROUPS[group])} AS {group}"] if group else []
    sql = f"SELECT {', '.join(head + parts)} FROM {table} WHERE {where}"
    if group:
        column = _column(model, GROUPS[group])
        sql += f" GROUP BY {column} ORDER BY {order + ', ' if order else ''}{column}"
    if limit:
        sql += f" LIMIT {int(limit)}"
    rows = _rows(sql, params + where_params)
    if group == "day":
        for row in rows:
            row["day"] = as_date(row["day"])
    if group == "run_id":  # SQLite: the hex text of the id
        for row in rows:
            row["run_id"] = row["run_id"] if isinstance(row["run_id"], uuid.UUID) else uuid.UUID(str(row["run_id"]))
    return rows


def day_sums(
    *,
    model: type[RunDay] | type[ProjectDay],
    scope: Scope,
    group: str | None,
    windows: dict[str, Period | None],
    first: bool = False,
    order: tuple[str, bool, int] | None = None,
    runs: bool = False,
) -> list[dict[str, Any]]:
    """Per `group` (or one row for all): for each window, its prefix + each SUMMED name, and
    prefix + "rows", the rows it summed (0: none; the sums are then None). With `first`, the
    group's first day in the scope ("first"). `order` (a RUN_ORDER field, descending, limit)
    sorts the groups by it, missing values last, then by the group, and keeps the first `limit`.
    With `runs` (run-days only), prefix + "runs": the distinct runs summed, in the same statement."""
    parts: list[str] = []
    params: list[Any] = []
    if first:
        parts.append(f"MIN({_column(model, 'day')}) AS first")
    for prefix, period in windows.items():
        cond, cond_params = _in(model, period)
        for name, column in SUMMED.items():
            parts.append(f"SUM(CASE WHEN {cond} THEN {_column(model, column)} END) AS {prefix}{name}")
            params += cond_params
        parts.append(f"COUNT(CASE WHEN {cond} THEN 1 END) AS {prefix}rows")
        params += cond_params
        if runs:
            assert model is RunDay, "distinct runs are counted over run-days"
            parts.append(f"COUNT(DISTINCT CASE WHEN {cond} THEN {_column(model, 'run')} END) AS {prefix}runs")
            params += cond_params
    order_sql, limit = "", 0
    if order is not None:
        field, desc, limit = order
        columns = {column: _column(model, column) for column in SUMMED.values()}
        order_sql = RUN_ORDER[field].format(**columns) + (" DESC" if desc else " ASC") + " NULLS LAST"
    rows = _select(model, group, parts, params, scope, order_sql, limit)
    if first:
        for row in rows:
            row["first"] = as_date(row["first"])
    return rows


def distinct_runs(*, scope: Scope, group: str | None, windows: dict[str, Period | None]) -> list[dict[str, Any]]:
    """Per `group` (or one row for all): for each window, prefix + "runs", the distinct runs with a
    run-day in it."""
    parts: list[str] = []
    params: list[Any] = []
    run = _column(RunDay, "run")
    for prefix, period in windows.items():
        cond, cond_params = _in(RunDay, period)
        parts.append(f"COUNT(DISTINCT CASE WHEN {cond} THEN {run} END) AS {prefix}runs")
        params += cond_params
    return _select(RunDay, group, parts, params, scope)


def unprefixed(row: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {name: row[f"{prefix}{name}"] for name in SUMMED}

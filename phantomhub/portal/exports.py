"""CSV exports of what the portal lists: the runs list (its filters, every row) and leaderboards.

Rows are written as they are read (phantomhub.csvfile, the one CSV writer), so an export of
thousands of runs streams instead of building one big string, and text a spreadsheet would run as a
formula is neutralised there: run names come from training jobs, not from people we trust.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from phantomhub.csvfile import csv_lines, csv_text
from phantomhub.waste.core.model import CATEGORIES

RUN_COLUMNS = ["id", "name", "team", "project", "status", "gpu_model", "gpu_count", "started_at", "ended_at",
               "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd", "waste_share", "mfu", "tags"]  # fmt: skip
# After the columns older readers know: the list's billed days and each run's figures within them
# (empty without `from`/`to`); `cost_usd` stays the whole run's.
RUN_PERIOD_COLUMNS = ["period_start", "period_end", "period_gpu_hours", "period_cost_usd", "period_waste_usd",
                      "period_recoverable_usd", "period_lost_usd"]  # fmt: skip
# `lost_usd`: a job's lost work (rework, restarts, checkpoints), a part of idle; right after
# `recoverable_usd` in every export.
FIGURES = ["runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd", "waste_share", "mfu"]


def _cents(value: float | None) -> Decimal | None:
    return None if value is None else _places(value, 2)


def runs_csv(rows: Iterable[dict[str, Any]], *, span: tuple[str | None, str | None] | None = None) -> Iterator[str]:
    """Every run of the list, one line each (no total line: each line is a run)."""
    start, end = span or (None, None)

    def line(row: dict[str, Any]) -> list[Any]:
        head = [";".join(row["tags"]) if key == "tags" else row[key] for key in RUN_COLUMNS]
        hours = row.get("period_gpu_hours")
        money = [_cents(row.get(key)) for key in ("period_cost_usd", "period_waste_usd", "period_recoverable_usd",
                                                  "period_lost_usd")]  # fmt: skip
        return [*head, start, end, None if hours is None else _places(hours, 3), *money, row["launched_by"]]

    return csv_lines([*RUN_COLUMNS, *RUN_PERIOD_COLUMNS, "launched_by"], (line(row) for row in rows))


def leaderboard_csv(kind: str, board: dict[str, Any]) -> Iterator[str]:
    names = {"teams": ["team"], "projects": ["project", "team"], "runs": ["run_id", "run", "team", "project"],
             "people": ["launched_by"]}[kind]  # fmt: skip
    compare = ["previous_cost_usd", "change_cost_usd", "previous_recoverable_usd", "change_recoverable_usd"]
    # Teams and projects: node collectors' time; runs: the whole run's cost beside the period's.
    fleet = {"runs": ["whole_cost_usd"], "people": []}.get(kind, ["fleet_uninstrumented_usd", "fleet_idle_held_usd"])
    header = ["period_start", "period_end", *names, *FIGURES, *compare, *fleet]
    period = board["period"]

    def line(row: dict[str, Any]) -> list[Any]:
        if kind in ("teams", "people"):
            who = [row["key"]]
        elif kind == "projects":
            who = [row["key"], row["team"]]
        else:
            who = [row["key"], row["name"], row["team"], row["project"]]
        prev, change = row["previous"] or {}, row["change"] or {}
        compared = [prev.get("cost_usd"), change.get("cost_usd"), prev.get("recoverable_usd"), change.get("recoverable_usd")]
        if kind == "runs":
            extra = [row["whole_cost_usd"]]
        elif kind == "people":
            extra = []
        else:
            extra = [row["fleet"]["uninstrumented_usd"], row["fleet"]["idle_held_usd"]]
        return [period["start"], period["end"], *who, *(row[k] for k in FIGURES), *compared, *extra]

    return csv_lines(header, [line(row) for row in board["rows"]])


def _places(value: float, places: int) -> Decimal:
    """A figure as a number with a fixed number of places (a Decimal, not text: it stays a number)."""
    return Decimal(f"{value:.{places}f}")


def finance_csv(review: dict[str, Any]) -> str:
    """The month's cost review per team and project, and its TOTAL line."""
    header = ["team", "project", "runs", "gpu_hours", "cost_usd", *[f"{c}_usd" for c in CATEGORIES], "waste_usd",
              "recoverable_usd", "lost_usd"]  # fmt: skip

    def line(team: str, project: str, row: dict[str, Any]) -> list[Any]:
        cats = [_places(row["categories_usd"][c], 2) for c in CATEGORIES]
        # A month closed before lost work was priced has no `lost_usd` in its snapshot: 0.
        return [team, project, row["runs"], _places(row["gpu_hours"], 3), _places(row["cost_usd"], 2), *cats,
                _places(row["waste_usd"], 2), _places(row["recoverable_usd"], 2), _places(row.get("lost_usd", 0), 2)]  # fmt: skip

    rows = [line(row["team"], row["project"], row) for row in review["rows"]]
    return csv_text(header, [*rows, line("TOTAL", "", review["totals"])])


SCOPE_COLUMNS = ["runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd"]


def scope_csv(summary: dict[str, Any], *, team: str | None, project: str | None) -> str:
    """A team's or project's page for a period (selectors.scope_summary): one line per project,
    then its TOTAL line, the page's totals. The weekly digest attaches it (phantomhub/reports)."""
    period = summary["period"]
    header = ["period_start", "period_end", "team", "project", *SCOPE_COLUMNS]

    def figures(row: dict[str, Any]) -> list[Any]:
        return [row["runs"], _places(row["gpu_hours"], 3), *(_places(row[k], 2) for k in SCOPE_COLUMNS[2:])]

    rows = [[period["start"], period["end"], row["team"], row["key"], *figures(row)] for row in summary["projects"]]
    total = [period["start"], period["end"], "TOTAL", project or team or "", *figures(summary["totals"])]
    return csv_text(header, [*rows, total])

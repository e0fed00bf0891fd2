"""CSV exports of what the portal lists: the runs list (its filters, every row) and leaderboards.

Rows are written as they are read, so an export of thousands of runs streams instead of building
one big string. Text a spreadsheet would run as a formula (=, +, -, @ first) is quoted with a
leading apostrophe: run names come from training jobs, not from people we trust.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from typing import Any

RUN_COLUMNS = ["id", "name", "team", "project", "status", "gpu_model", "gpu_count", "started_at", "ended_at",
               "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "waste_share", "mfu", "tags"]  # fmt: skip
FIGURES = ["runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "waste_share", "mfu"]


def _safe(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def _lines(header: list[str], rows: Iterable[list[Any]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_safe(v) for v in row])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.tell():  # no rows: the header alone
        yield buffer.getvalue()


def runs_csv(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    def line(row: dict[str, Any]) -> list[Any]:
        return [";".join(row["tags"]) if key == "tags" else row[key] for key in RUN_COLUMNS]

    return _lines(RUN_COLUMNS, (line(row) for row in rows))


def leaderboard_csv(kind: str, board: dict[str, Any]) -> Iterator[str]:
    names = {"teams": ["team"], "projects": ["project", "team"], "runs": ["run_id", "run", "team", "project"]}[kind]
    compare = ["previous_cost_usd", "change_cost_usd", "previous_recoverable_usd", "change_recoverable_usd"]
    fleet = [] if kind == "runs" else ["fleet_uninstrumented_usd", "fleet_idle_held_usd"]  # node collectors' time
    header = ["period_start", "period_end", *names, *FIGURES, *compare, *fleet]
    period = board["period"]

    def line(row: dict[str, Any]) -> list[Any]:
        if kind == "teams":
            who = [row["key"]]
        elif kind == "projects":
            who = [row["key"], row["team"]]
        else:
            who = [row["key"], row["name"], row["team"], row["project"]]
        prev, change = row["previous"] or {}, row["change"] or {}
        compared = [prev.get("cost_usd"), change.get("cost_usd"), prev.get("recoverable_usd"), change.get("recoverable_usd")]
        extra = [row["fleet"]["uninstrumented_usd"], row["fleet"]["idle_held_usd"]] if fleet else []
        return [period["start"], period["end"], *who, *(row[k] for k in FIGURES), *compared, *extra]

    return _lines(header, [line(row) for row in board["rows"]])

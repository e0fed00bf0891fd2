"""The "people" leaderboard: runs' figures over a period summed per launcher (telemetry
Run.launched_by, the identity the agent reported: docs/agent.md, "Who launched it").

A privacy setting decides whether it exists: off by default, an organization admin turns it on
(waste OrgSettings.people_leaderboard; docs/ui.md, "Privacy"). Off, it answers 404 saying so.
On, a person's row sums only the runs the reader may see (the runs list's visibility: the
reader's projects), so a member sees their team's runs of each person and nothing of the rest.

Like the other boards it reads the derived tables only: the run-days as pages read them (a
closed month's frozen), joined to their runs for the launcher.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from django.db.models import Count, Min, QuerySet

from phantomhub.errors import ApiError, invalid
from phantomhub.periods import Period
from phantomhub.portal.run_list import sort_parse
from phantomhub.portal.selectors import AGG, Visible, _change, compared, figures_from_sums, visible_for
from phantomhub.waste.models import OrgSettings, RunDay

SWITCHED_OFF = (
    "the people leaderboard is switched off for this organization (a privacy setting: an organization "
    "admin turns it on in Settings)"
)
PERSON = "run__launched_by"


def people_enabled() -> bool:
    return OrgSettings.get().people_leaderboard


def _days(visible: Visible, period: Period | None) -> QuerySet[RunDay]:
    days = visible.run_days()
    if period is not None:
        days = days.filter(day__gte=period.start, day__lte=period.end)
    return days


def _per_person(days: QuerySet[RunDay]) -> dict[str, dict[str, Any]]:
    grouped = days.exclude(**{PERSON: ""}).values(PERSON).annotate(**AGG, runs=Count("run", distinct=True))
    return {row[PERSON]: figures_from_sums(row, row["runs"]) for row in grouped.order_by()}


def people_board(*, principal: Any, period: Period, sort: str | None, limit: int | None = 100, page: int = 1) -> dict[str, Any]:
    """People over the period, as the other leaderboards answer (selectors.leaderboard): rows,
    `count`, `totals` (of the people's runs), and `unattributed` (the visible runs with no
    launcher, so that the rows and it add up to the teams' board)."""
    if not people_enabled():
        raise ApiError("not_found", SWITCHED_OFF, status_code=404)
    field, desc = sort_parse(sort)
    if field == "started_at":
        raise invalid("sort", "started_at sorts runs only")
    visible = visible_for(principal)
    previous = period.previous()
    now = _per_person(_days(visible, period))
    before = _per_person(_days(visible, previous))
    first: dict[str, date] = {
        row[PERSON]: row["first"]
        for row in _days(visible, None).exclude(**{PERSON: ""}).values(PERSON).annotate(first=Min("day")).order_by()
    }
    rows: list[dict[str, Any]] = []
    for person, figures in now.items():
        data_from = first.get(person)
        prev = (before.get(person) or figures_from_sums({}, 0)) if compared(period, data_from, previous) else None
        rows.append(
            {"key": person, "name": person, **figures, "data_from": data_from.isoformat() if data_from else None,
             "previous": prev, "change": _change(figures, prev) if prev is not None else None}
        )  # fmt: skip
    present = sorted((r for r in rows if r[field] is not None), key=lambda r: (r[field], r["key"]), reverse=desc)
    rows = present + sorted((r for r in rows if r[field] is None), key=lambda r: r["key"])
    count = len(rows)
    if limit is not None:
        rows = rows[(page - 1) * limit : page * limit]
    in_period = _days(visible, period)
    named = in_period.exclude(**{PERSON: ""}).aggregate(**AGG, runs=Count("run", distinct=True))
    unnamed = in_period.filter(**{PERSON: ""}).aggregate(**AGG, runs=Count("run", distinct=True))
    size = limit or max(count, 1)
    return {
        "period": period.as_dict(),
        "previous": previous.as_dict(),
        "count": count,
        "page": page,
        "page_size": size,
        "pages": max(1, -(-count // size)),
        "totals": figures_from_sums(named, named["runs"] or 0),
        "unattributed": figures_from_sums(unnamed, unnamed["runs"] or 0),
        "rows": rows,
    }

"""When a subscription is due and which period it reports (docs/reports.md, "Periods"). Pure: the
standard library only (zoneinfo), no Django, so the time-zone edges are tested without a database.

A schedule is a wall-clock time (hour:minute) in an IANA time zone, on a day of the month
(monthly) or a weekday (weekly). The period is read off the *local* date of the moment it is due:

- monthly (the finance review): the calendar month before the one it is due in;
- weekly (the digests): the ISO week (Monday to Sunday) before the one it is due in.

So a digest due Monday 00:30 Europe/Berlin, which is Sunday 22:30 (or 23:30) UTC, reports the
week that ended a few minutes earlier in Berlin, not the week before it. A wall-clock time that
does not exist on a given day (inside a spring-forward gap) is due the same time after the
gap, as if the clock had not moved yet (02:30 on the spring-forward night is 03:30 summer time);
one that exists twice (fall back) at its first occurrence.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MONTHLY = "monthly"
WEEKLY = "weekly"
DAY_OF_MONTH_MAX = 28  # every month has it: no "31st" that some months skip


class ZoneError(ValueError):
    """Not an IANA time zone this machine knows."""


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone `name` ("Europe/Berlin", "UTC"); ZoneError for anything else, including a
    path-like or empty name (zoneinfo raises ValueError for those, not ZoneInfoNotFoundError)."""
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise ZoneError(f"{name[:64]!r} is not an IANA time zone (like Europe/Berlin or UTC)")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ZoneError(f"{name[:64]!r} is not an IANA time zone (like Europe/Berlin or UTC)") from None


@dataclass(frozen=True)
class Schedule:
    cadence: str  # MONTHLY or WEEKLY
    hour: int
    minute: int
    tz: str
    day_of_month: int | None = None  # 1..DAY_OF_MONTH_MAX, monthly
    weekday: int | None = None  # 0 Monday .. 6 Sunday, weekly


@dataclass(frozen=True)
class ReportPeriod:
    key: str  # "2026-11" or "2026-W47": unique per subscription (the idempotency key)
    start: date  # inclusive
    end: date  # inclusive

    @property
    def label(self) -> str:
        return self.key


def _at(day: date, s: Schedule) -> datetime:
    """The schedule's wall-clock time on `day`, as a UTC instant (a nonexistent local time moves
    past the gap: the round trip through UTC normalises it)."""
    local = datetime(day.year, day.month, day.day, s.hour, s.minute, tzinfo=zone(s.tz))
    return local.astimezone(UTC)


def _month_start(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _candidates(s: Schedule, around: date) -> list[datetime]:
    """The due moments on local dates near `around`: the month before to the month after."""
    if s.cadence == MONTHLY:
        assert s.day_of_month is not None
        return [_at(_month_start(around, k).replace(day=s.day_of_month), s) for k in (-1, 0, 1)]
    assert s.weekday is not None
    monday = around - timedelta(days=around.weekday())
    return [_at(monday + timedelta(days=7 * k + s.weekday), s) for k in (-1, 0, 1)]


def next_due(s: Schedule, after: datetime) -> datetime:
    """The first due moment strictly after `after` (an aware datetime)."""
    local = after.astimezone(zone(s.tz)).date()
    later = [t for t in _candidates(s, local) if t > after]
    if not later:  # the last candidate was not after it: the next span's first
        later = [t for t in _candidates(s, local + timedelta(days=31 if s.cadence == MONTHLY else 7)) if t > after]
    return min(later)


def last_due(s: Schedule, at: datetime) -> datetime:
    """The latest due moment at or before `at`."""
    local = at.astimezone(zone(s.tz)).date()
    earlier = [t for t in _candidates(s, local) if t <= at]
    return max(earlier)


def period_of(s: Schedule, due: datetime) -> ReportPeriod:
    """The period a report due at `due` covers (its local date decides, see the module docstring)."""
    local = due.astimezone(zone(s.tz)).date()
    if s.cadence == MONTHLY:
        start = _month_start(local, -1)
        end = _month_start(local, 0) - timedelta(days=1)
        return ReportPeriod(f"{start:%Y-%m}", start, end)
    monday = local - timedelta(days=local.weekday()) - timedelta(days=7)
    year, week, _ = monday.isocalendar()
    return ReportPeriod(f"{year}-W{week:02d}", monday, monday + timedelta(days=6))

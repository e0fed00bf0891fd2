"""Reporting periods: `7d`, `30d`, `90d` (ending today, UTC), a month `2026-11`, or a range of
days `2026-11-03..2026-11-17` (both ends included)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from django.utils import timezone

from phantomhub.errors import invalid

_DAYS = re.compile(r"^(\d{1,3})d$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_RANGE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})$")
MAX_DAYS = 366


@dataclass(frozen=True)
class Period:
    start: date  # inclusive
    end: date  # inclusive
    label: str

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1

    def each_day(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range(self.days)]

    def previous(self) -> Period:
        if _MONTH.match(self.label):
            last = self.start - timedelta(days=1)
            return _month(last.year, last.month, f"{last.year:04d}-{last.month:02d}")
        end = self.start - timedelta(days=1)
        start = end - timedelta(days=self.days - 1)
        if _RANGE.match(self.label):
            return Period(start, end, f"{start.isoformat()}..{end.isoformat()}")
        return Period(start, end, f"previous {self.label}")

    def as_dict(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "label": self.label}


# Months with telemetry can only lie in the range of step timestamps (2000-01-01 to 2100-01-01,
# phantomhub.telemetry.columns); outside it a year 0 or 10000 would not even be a date.
FIRST_MONTH = "2000-01"
LAST_MONTH = "2099-12"
FIRST_DAY = date(2000, 1, 1)
LAST_DAY = date(2099, 12, 31)


def _month(year: int, month: int, label: str) -> Period:
    start = date(year, month, 1)
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return Period(start, nxt - timedelta(days=1), label)


def month_period(text: str, *, field: str = "month") -> Period:
    match = _MONTH.match(text)
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise invalid(field, f"{text!r} is not a month (YYYY-MM)")
    if not FIRST_MONTH <= text <= LAST_MONTH:
        raise invalid(field, f"must be a month from {FIRST_MONTH} to {LAST_MONTH}")
    return _month(int(match.group(1)), int(match.group(2)), text)


def period_parse(text: str | None, *, today: date | None = None) -> Period:
    text = (text or "30d").strip()
    today = today or timezone.now().date()
    days = _DAYS.match(text)
    if days:
        n = int(days.group(1))
        if not 1 <= n <= 366:
            raise invalid("period", "days must be in [1, 366]")
        return Period(today - timedelta(days=n - 1), today, text)
    if _MONTH.match(text):
        return month_period(text, field="period")
    if _RANGE.match(text):
        return range_period(text)
    raise invalid("period", f"{text!r} is not a period (7d, 30d, 90d, YYYY-MM or YYYY-MM-DD..YYYY-MM-DD)")


def _day(text: str, field: str) -> date:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise invalid(field, f"{text!r} is not a date (YYYY-MM-DD)") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise invalid(field, f"must be a date from {FIRST_DAY} to {LAST_DAY}")
    return day


def range_period(text: str, *, field: str = "period") -> Period:
    """`2026-11-03..2026-11-17`: those days, both included (at most MAX_DAYS of them)."""
    match = _RANGE.match(text)
    if not match:
        raise invalid(field, f"{text!r} is not a range of days (YYYY-MM-DD..YYYY-MM-DD)")
    start, end = _day(match.group(1), field), _day(match.group(2), field)
    if end < start:
        raise invalid(field, "the range ends before it starts")
    if (end - start).days + 1 > MAX_DAYS:
        raise invalid(field, f"a range covers at most {MAX_DAYS} days")
    return Period(start, end, f"{start.isoformat()}..{end.isoformat()}")

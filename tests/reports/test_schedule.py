"""When a report is due and which period it covers, in the subscriber's time zone: the digests'
ISO week and the finance review's month are read off the local date, across DST changes."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from phantomhub.reports.schedule import MONTHLY, WEEKLY, Schedule, ZoneError, last_due, next_due, period_of, zone

BERLIN_MONDAY_0030 = Schedule(WEEKLY, 0, 30, "Europe/Berlin", weekday=0)


def test_a_monday_0030_berlin_digest_on_the_spring_dst_night_reports_the_week_that_just_ended() -> None:
    # Summer time began Sunday 2026-03-29 at 02:00: Monday 00:30 CEST is Sunday 22:30 UTC, a UTC
    # date still inside the week being reported.
    due = next_due(BERLIN_MONDAY_0030, datetime(2026, 3, 29, 12, tzinfo=UTC))
    assert due == datetime(2026, 3, 29, 22, 30, tzinfo=UTC)
    period = period_of(BERLIN_MONDAY_0030, due)
    assert (period.key, period.start, period.end) == ("2026-W13", date(2026, 3, 23), date(2026, 3, 29))
    # The week before the change was due at 23:30 UTC (CET): an hour's difference, the same wall clock.
    assert last_due(BERLIN_MONDAY_0030, due - timedelta(seconds=1)) == datetime(2026, 3, 22, 23, 30, tzinfo=UTC)


def test_the_autumn_dst_change_moves_the_utc_moment_back_and_keeps_the_wall_clock() -> None:
    due = next_due(BERLIN_MONDAY_0030, datetime(2026, 10, 25, 0, tzinfo=UTC))
    assert due == datetime(2026, 10, 25, 23, 30, tzinfo=UTC)  # Monday 00:30 CET
    assert period_of(BERLIN_MONDAY_0030, due).key == "2026-W43"


def test_a_time_inside_the_spring_gap_is_sent_as_if_the_clock_had_not_moved() -> None:
    sunday_0230 = Schedule(WEEKLY, 2, 30, "Europe/Berlin", weekday=6)  # 02:30 does not exist that night
    assert next_due(sunday_0230, datetime(2026, 3, 28, tzinfo=UTC)) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def test_next_due_is_strictly_after_and_last_due_at_or_before() -> None:
    due = datetime(2026, 3, 29, 22, 30, tzinfo=UTC)
    assert next_due(BERLIN_MONDAY_0030, due) == datetime(2026, 4, 5, 22, 30, tzinfo=UTC)
    assert last_due(BERLIN_MONDAY_0030, due) == due
    assert next_due(BERLIN_MONDAY_0030, due - timedelta(microseconds=1)) == due


def test_the_finance_review_reports_the_calendar_month_before_its_local_due_date() -> None:
    new_year = Schedule(MONTHLY, 0, 15, "Asia/Tokyo", day_of_month=1)
    due = next_due(new_year, datetime(2026, 12, 20, tzinfo=UTC))
    assert due == datetime(2026, 12, 31, 15, 15, tzinfo=UTC)  # 1 January 00:15 in Tokyo
    period = period_of(new_year, due)
    assert (period.key, period.start, period.end) == ("2026-12", date(2026, 12, 1), date(2026, 12, 31))
    third = Schedule(MONTHLY, 8, 0, "America/New_York", day_of_month=3)
    assert next_due(third, datetime(2027, 1, 31, tzinfo=UTC)) == datetime(2027, 2, 3, 13, 0, tzinfo=UTC)
    assert period_of(third, datetime(2027, 3, 3, 13, tzinfo=UTC)).key == "2027-02"


@pytest.mark.parametrize("name", ["Europe/Atlantis", "", "../../etc/passwd", "/etc/localtime", "Mars/Olympus_Mons", "x" * 100])
def test_a_zone_that_does_not_exist_is_refused(name: str) -> None:
    with pytest.raises(ZoneError, match="not an IANA time zone"):
        zone(name)

"""Scheduled reports in the browser: a team member subscribes to their team's weekly digest from
Settings → Reports; a time zone that does not exist is refused naming the field, and the
subscription is listed with its schedule in the chosen zone."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Server

PASSWORD = "e2e-reports-password-1234"
USER = "e2e-reports-ann"


def _member(server: Server) -> None:
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "from phantomhub.accounts.models import Membership, Team\n"
        f"user = get_user_model().objects.create_user({USER!r}, email='ann@example.com', password={PASSWORD!r})\n"
        "Membership.objects.create(user=user, team=Team.objects.get(slug='nlp'), role='member')\n",
    )


def test_a_member_subscribes_to_their_team_s_weekly_digest(page: Any, server: Server) -> None:
    _member(server)
    page.goto("/login")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    page.goto("/settings?tab=reports")
    page.get_by_role("button", name="New subscription").click()
    form = page.get_by_role("form", name="New report subscription")
    kinds = form.get_by_label("Report").locator("option").all_text_contents()
    assert "Finance review of the month" not in kinds  # finance's and admins'
    assert form.get_by_label("Webhook URL").count() == 0  # admins'
    form.get_by_label("Report").select_option("digest_team")
    form.get_by_label("Team").select_option("nlp")
    form.get_by_label("Weekday").select_option("0")
    form.get_by_label("Time", exact=True).fill("00:30")
    form.get_by_label("Time zone").fill("Europe/Atlantis")
    form.get_by_role("button", name="Subscribe").click()
    form.get_by_role("alert").filter(has_text="Time zone: 'Europe/Atlantis' is not an IANA time zone").wait_for()
    form.get_by_label("Time zone").fill("Europe/Berlin")
    form.get_by_role("button", name="Subscribe").click()
    table = page.get_by_test_id("report-subscriptions")
    row = table.get_by_role("row").filter(has_text="Team's weekly digest: nlp")
    row.wait_for()
    assert "Mondays at 00:30 (Europe/Berlin)" in row.inner_text()
    assert "ann@example.com" in row.inner_text()
    page.get_by_test_id("report-deliveries").or_(page.get_by_text("Nothing sent yet")).first.wait_for()

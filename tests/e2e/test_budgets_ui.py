"""The Budgets page in the browser: the organization admin sets nlp's budget through the form and
reads its spend, the budget, the month-end forecast and its p10–p90 interval as the status API
computes them; a member of another team sees no nlp budget and no form; nlp's lead sees nlp's
budget and is offered project budgets only (docs/budgets.md, "Who sets and reads")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Api, Server

pytestmark = pytest.mark.e2e

OUTSIDER = ("e2e-budget-vision", "e2e-budget-password-1234")
LEAD = ("e2e-budget-lead", "e2e-budget-password-1234")


def usd(value: float) -> str:
    """formatUsd (frontend/src/lib/format.ts): $1,234.56."""
    return f"${value:,.2f}"


@pytest.fixture(scope="module")
def people(server: Server, api: Api) -> Iterator[None]:
    """A member of vision and a lead of nlp; the budgets this module sets are deleted afterwards
    (the server is shared with the other modules)."""
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; from phantomhub.accounts.models import Membership, Role, Team; "
        f"o = get_user_model().objects.create_user({OUTSIDER[0]!r}, password={OUTSIDER[1]!r}); "
        "Membership.objects.create(user=o, team=Team.objects.get(slug='vision'), role=Role.MEMBER); "
        f"l = get_user_model().objects.create_user({LEAD[0]!r}, password={LEAD[1]!r}); "
        "Membership.objects.create(user=l, team=Team.objects.get(slug='nlp'), role=Role.ADMIN)",
    )
    yield
    session = api.get_json("/api/v1/portal/session")
    headers = {"X-CSRFToken": session["csrf_token"], "Referer": server.url + "/"}
    for budget in api.get_json("/api/v1/planning/budgets")["budgets"]:
        if budget["note"] == "e2e":
            api._request("DELETE", f"/api/v1/planning/budgets/{budget['id']}", None, headers)


def _sign_in(page: Any, username: str, password: str) -> None:
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()


def test_budgets_page_shows_spend_budget_forecast_and_interval_by_role(
    people: None, signed_in: Any, api: Api, browser: Any, server: Server
) -> None:
    page = signed_in
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Budgets").click()
    page.get_by_role("heading", name="Budgets", exact=True).wait_for()
    # The month of nlp's latest seeded run (tests/e2e/seed.py: 0.8 days ago), so it has spend.
    month = f"{datetime.now(UTC) - timedelta(days=0.8):%Y-%m}"
    page.goto(f"/budgets?month={month}")
    form = page.get_by_test_id("budget-form")
    form.get_by_label("Scope").select_option("team")
    form.get_by_label("Team (slug)").fill("nlp")
    form.get_by_label("$ / month").fill("2.50")
    form.get_by_label("Note").fill("e2e")
    form.get_by_role("button", name="Set budget").click()
    page.get_by_test_id("budget-notice").filter(has_text="Set a budget for team nlp.").wait_for()
    made = next(b for b in api.get_json("/api/v1/planning/budgets?team=nlp")["budgets"] if b["scope"] == "team")
    assert (made["amount_usd"], made["effective_from"], made["effective_to"], made["note"]) == ("2.50", month, None, "e2e")

    status = api.get_json(f"/api/v1/planning/budgets/status?team=nlp&month={month}")
    figures = next(r for r in status["rows"] if r["budget"]["id"] == made["id"])
    row = page.get_by_test_id("budget-status").locator("tbody tr").filter(has_text="team nlp")
    row.wait_for()
    text = row.inner_text()
    forecast = figures["forecast"]
    assert figures["spent_usd"] > 0, "the seeded runs spent this month"
    for shown in (usd(2.5), usd(figures["spent_usd"]), usd(forecast["point_usd"])):
        assert shown in text, (shown, text)
    assert f"{usd(forecast['p10_usd'])} – {usd(forecast['p90_usd'])}" in text
    assert forecast["p10_usd"] <= forecast["point_usd"] <= forecast["p90_usd"]
    assert figures["over"] and f"over by {usd(figures['over_by_usd'])}" in text  # $2.50 is far below any month

    # A member of vision: no nlp budget, no form.
    with browser.new_context(base_url=server.url) as context:
        other = context.new_page()
        _sign_in(other, *OUTSIDER)
        other.goto(f"/budgets?month={month}")
        other.get_by_text("No budget is in force this month").wait_for()
        assert other.get_by_test_id("budget-form").count() == 0
        assert "nlp" not in other.get_by_role("main").inner_text()
    # nlp's lead: reads nlp's budget, may set its projects' budgets, not the team's.
    with browser.new_context(base_url=server.url) as context:
        lead = context.new_page()
        _sign_in(lead, *LEAD)
        lead.goto(f"/budgets?month={month}")
        lead.get_by_test_id("budget-status").locator("tbody tr").filter(has_text="team nlp").wait_for()
        scope = lead.get_by_test_id("budget-form").get_by_label("Scope")
        assert scope.locator("option").all_inner_texts() == ["project"]
        assert lead.get_by_role("button", name="Delete the budget of team nlp").count() == 0

"""The people leaderboard in the browser: hidden while the privacy setting is off, shown after an
organization admin turns it on in Settings, and to a team member summing only their team's runs
(docs/ui.md, "Privacy")."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, Api, Server
from tests.e2e.seed import PROJECTS, RUNS, Client, run_id

pytestmark = pytest.mark.e2e

MEMBER = ("e2e-people-member", "e2e-people-password-1234")
TEAM_OF = dict((project, team) for team, project in PROJECTS)
# Who launched each seeded run: ann works in nlp and vision, bob in speech and recsys.
LAUNCHER = {"nlp": "ann", "vision": "ann", "speech": "bob", "recsys": "bob"}


@pytest.fixture(scope="module")
def launched(server: Server, api: Api) -> Iterator[None]:
    """The seeded runs registered again with their launcher (a resume updates it), and a viewer of
    nlp. The setting is put back off afterwards: the server is shared with the other modules."""
    for _, project in PROJECTS:
        token = server.manage("createtoken", "--team", TEAM_OF[project], "--project", project).strip()
        client = Client(server.url, token)
        for spec in (s for s in RUNS if s.project == project):
            client.post("/api/v1/runs", {"id": run_id(spec), "launched_by": LAUNCHER[TEAM_OF[project]]})
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; from phantomhub.accounts.models import Membership, Role, Team; "
        f"u = get_user_model().objects.create_user({MEMBER[0]!r}, password={MEMBER[1]!r}); "
        "Membership.objects.create(user=u, team=Team.objects.get(slug='nlp'), role=Role.VIEWER)",
    )
    yield
    session = api.get_json("/api/v1/portal/session")
    api._request("PUT", "/api/v1/portal/settings", {"people_leaderboard": False},
                 {"X-CSRFToken": session["csrf_token"], "Referer": server.url + "/"})  # fmt: skip


def _sign_in(page: Any, username: str, password: str) -> None:
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()


def _board(page: Any) -> dict[str, int]:
    """launched_by → the Runs cell of each row of the people board."""
    table = page.get_by_test_id("leaderboard-people")
    table.locator("tbody tr").first.wait_for()
    headers = table.locator("thead tr").first.evaluate("r => Array.from(r.children).map(c => c.textContent)")
    runs_at = next(i for i, h in enumerate(headers) if "Runs" in str(h))
    rows = table.locator("tbody tr").evaluate_all("rows => rows.map(r => Array.from(r.children).map(c => c.textContent))")
    return {row[0].strip(): int(str(row[runs_at]).replace(",", "")) for row in rows}


def test_hidden_while_off_shown_once_an_admin_turns_it_on_and_a_member_sees_their_team(
    launched: None, page: Any, browser: Any, server: Server
) -> None:
    _sign_in(page, *ADMIN)
    page.goto("/leaderboards?period=90d")
    tabs = page.get_by_role("radiogroup", name="Leaderboard")
    tabs.get_by_role("radio", name="Runs").wait_for()
    assert tabs.get_by_role("radio").all_inner_texts() == ["Teams", "Projects", "Runs"]
    page.goto("/leaderboards?kind=people&period=90d")
    page.get_by_text("switched off", exact=False).first.wait_for()

    page.goto("/settings")
    toggle = page.get_by_test_id("people-leaderboard-toggle")
    assert not toggle.is_checked()
    toggle.click()  # the box follows the saved setting: it turns checked once the server said so
    page.get_by_text("On: Leaderboards has a People tab", exact=False).wait_for()
    assert toggle.is_checked()

    page.goto("/leaderboards?period=90d")
    page.get_by_role("radiogroup", name="Leaderboard").get_by_role("radio", name="People").click()
    page.wait_for_url("**/leaderboards?**kind=people**")
    everyone = Counter(LAUNCHER[TEAM_OF[s.project]] for s in RUNS)
    assert _board(page) == dict(everyone)

    context = browser.new_context(base_url=server.url, viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    try:
        member = context.new_page()
        _sign_in(member, *MEMBER)
        member.goto("/leaderboards?kind=people&period=90d")
        nlp_runs = sum(1 for s in RUNS if TEAM_OF[s.project] == "nlp")
        assert _board(member) == {"ann": nlp_runs}  # ann's vision runs and bob are not the member's to see
        member.get_by_test_id("leaderboard-people").get_by_text("ann", exact=True).click()
        member.wait_for_url("**/runs?launched_by=ann**")
        member.get_by_test_id("runs-table").locator("tbody tr").first.wait_for()
        shown = member.get_by_test_id("runs-shown").inner_text()
        assert json.dumps(nlp_runs) in shown, shown
    finally:
        context.close()

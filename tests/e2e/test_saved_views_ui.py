"""Saved views in the browser: a member saves a filtered runs list shared with their team, finds it
in the sidebar and opens the same URL; a team mate sees and opens it; a member of another team does
not see it; its owner deletes it from the sidebar."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.e2e.conftest import Server

PASSWORD = "e2e-views-password-1234"
PEOPLE = [("e2e-views-ann", "nlp", "member"), ("e2e-views-bea", "nlp", "viewer"), ("e2e-views-vic", "vision", "member")]
FILTERED = "/runs?team=nlp&status=finished"


def _people(server: Server) -> None:
    people = ", ".join(repr(p) for p in PEOPLE)
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "from phantomhub.accounts.models import Membership, Team\n"
        f"for name, team, role in [{people}]:\n"
        f"    user = get_user_model().objects.create_user(name, password={PASSWORD!r})\n"
        "    Membership.objects.create(user=user, team=Team.objects.get(slug=team), role=role)\n",
    )


@contextmanager
def _signed_in_as(browser: Any, server: Server, username: str) -> Iterator[Any]:
    context = browser.new_context(base_url=server.url, viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        with page.expect_response(lambda r: r.url.endswith("/api/v1/portal/views")):
            page.goto("/login")
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("heading", name="Overview").wait_for()
        yield page
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def _path(page: Any, server: Server) -> str:
    return str(page.url).removeprefix(server.url)


def test_save_a_filtered_runs_view_share_it_and_open_it_from_the_sidebar(browser: Any, server: Server) -> None:
    _people(server)
    with _signed_in_as(browser, server, "e2e-views-ann") as page:
        page.goto(FILTERED)
        page.get_by_role("heading", name="Runs").wait_for()
        page.get_by_role("button", name="Save view").click()
        dialog = page.get_by_role("dialog", name="Save view")
        dialog.get_by_label("Name").fill("NLP finished")
        dialog.get_by_label("Share with").select_option("nlp")
        dialog.get_by_role("button", name="Save").click()
        dialog.get_by_role("status").filter(has_text="Saved “NLP finished”, shared with nlp.").wait_for()
        dialog.get_by_role("button", name="Done").click()
        saved = page.get_by_role("navigation", name="Saved views").get_by_role("link", name="NLP finished")
        page.goto("/leaderboards")
        page.get_by_role("heading", name="Leaderboards").wait_for()
        saved.click()
        page.wait_for_url(f"**{FILTERED}")
        assert _path(page, server) == FILTERED
        page.get_by_role("heading", name="Runs").wait_for()

    with _signed_in_as(browser, server, "e2e-views-bea") as page:  # a team mate (a viewer of nlp)
        nav = page.get_by_role("navigation", name="Saved views")
        nav.get_by_role("link", name="NLP finished").click()
        page.wait_for_url(f"**{FILTERED}")
        assert _path(page, server) == FILTERED
        assert nav.get_by_role("button", name="Delete saved view NLP finished").count() == 0  # not hers, not her team's lead

    with _signed_in_as(browser, server, "e2e-views-vic") as page:  # another team's member: the list answered, empty
        assert page.get_by_role("navigation", name="Saved views").count() == 0
        assert page.get_by_role("link", name="NLP finished").count() == 0

    with _signed_in_as(browser, server, "e2e-views-ann") as page:  # its owner deletes it
        nav = page.get_by_role("navigation", name="Saved views")
        nav.get_by_role("button", name="Delete saved view NLP finished").click()
        confirm = page.get_by_role("alertdialog", name="Delete saved view?")
        confirm.get_by_role("button", name="Delete").click()
        confirm.wait_for(state="detached")
        nav.wait_for(state="detached")

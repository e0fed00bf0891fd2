"""Settings → People & groups in headless Chromium: a group mapping rule added in the editor,
previewed in sentences (a deactivated member of the group not counted), saved, and the synced
membership then listed with source "directory"; a local edit of it refused with the sentence
saying where it comes from. Directory people are made in the database (what OIDC sign-in or SCIM
would have made): DirectoryAccount and DirectoryGroup members."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Api, Server

pytestmark = pytest.mark.e2e

GROUP = "e2e-speech-ml"
PEOPLE = (("e2e-ann", True), ("e2e-ben", True), ("e2e-old", False))  # the last one deactivated
REFUSAL = (
    "e2e-ann's member role in speech comes from the identity provider's group e2e-speech-ml "
    "(rule e2e-speech-* → team member); change the group or the mapping"
)


def _directory_people(server: Server) -> None:
    people = ", ".join(f"({name!r}, {active})" for name, active in PEOPLE)
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "from phantomhub.accounts.models import DirectoryAccount, DirectoryGroup\n"
        f"group, _ = DirectoryGroup.objects.get_or_create(display_name={GROUP!r})\n"
        f"for name, active in [{people}]:\n"
        "    user = get_user_model().objects.create_user(name, email=name + '@example.com', is_active=active)\n"
        "    DirectoryAccount.objects.create(user=user, oidc_issuer='https://idp.example', oidc_subject=name)\n"
        "    group.members.add(user)\n",
    )


def _mapping_put(api: Api, rules: list[dict[str, Any]]) -> None:
    csrf = api.get_json("/api/v1/portal/session")["csrf_token"]
    api._request("PUT", "/api/v1/portal/group-mapping", {"rules": rules}, {"X-CSRFToken": csrf, "Referer": api.base_url + "/"})


def _memberships(api: Api, username: str) -> list[tuple[str, str, str]]:
    [person] = [p for p in api.get_json(f"/api/v1/portal/people?q={username}")["people"] if p["username"] == username]
    return [(m["team"], m["role"], m["source"]) for m in person["memberships"]]


def test_map_a_group_preview_save_and_a_synced_membership_refuses_local_edits(signed_in: Any, server: Server, api: Api) -> None:
    page = signed_in
    _directory_people(server)
    before = [{k: r[k] for k in ("pattern", "grant", "team")} for r in api.get_json("/api/v1/portal/group-mapping")["rules"]]
    try:
        page.goto("/settings?tab=people")
        mapping = page.get_by_test_id("group-mapping")
        mapping.wait_for()
        assert f"{GROUP} (2)" in page.get_by_test_id("directory-groups").inner_text()  # active members only
        mapping.get_by_role("button", name="Add rule").click()
        n = mapping.locator("[data-testid^='mapping-row-']:not([data-testid$='-matches'])").count()
        mapping.get_by_label(f"Row {n} group pattern").fill("e2e-speech-*")
        mapping.get_by_label(f"Row {n} grant").select_option("team_member")

        # Preview with no team chosen: the API names the row and field; nothing is saved.
        mapping.get_by_test_id("mapping-preview-button").click()
        errors = mapping.get_by_test_id("mapping-errors")
        errors.wait_for()
        assert f"Row {n}: team: a team_member rule names its team" in errors.inner_text()
        assert mapping.get_by_label(f"Row {n} team").get_attribute("aria-invalid") == "true"

        mapping.get_by_label(f"Row {n} team").select_option("speech")
        mapping.get_by_test_id("mapping-preview-button").click()
        preview = mapping.get_by_test_id("mapping-preview")
        preview.wait_for()
        assert "2 people would join speech as members" in preview.inner_text()
        assert mapping.get_by_test_id(f"mapping-row-{n - 1}-matches").inner_text() == f"matches {GROUP}"
        assert _memberships(api, "e2e-ann") == []  # a preview writes nothing

        mapping.get_by_test_id("mapping-save").click()
        saved = mapping.get_by_test_id("mapping-saved")
        saved.wait_for()
        assert "2 people joined speech as members" in saved.inner_text()  # as previewed
        assert "Deactivated people re-synced too: e2e-old." in saved.inner_text()
        assert _memberships(api, "e2e-ann") == [("speech", "member", "directory")]

        page.get_by_label("Find people").fill("e2e-ann")
        page.get_by_role("button", name="Find").click()
        row = page.get_by_test_id("membership-e2e-ann-speech")
        row.wait_for()
        assert row.get_by_test_id("source").inner_text() == "directory"
        assert f"from the identity provider's group {GROUP} (rule e2e-speech-* → team member)" in row.inner_text()

        page.get_by_label("e2e-ann's role in speech").select_option("admin")
        refusal = page.get_by_test_id("people-error")
        refusal.wait_for()
        assert refusal.inner_text() == REFUSAL
        assert _memberships(api, "e2e-ann") == [("speech", "member", "directory")]
    finally:
        _mapping_put(api, before)  # the session's server is shared with the other e2e modules

"""Settings' API tokens in the browser: create one with a name and an expiry, rotate it with no
overlap, revoke its successor; each token is checked against the real server as it goes (a
personal token: read afresh on every request, so every web worker refuses it at once)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

from tests.e2e.conftest import Api, Server


def _read_with(server: Server, token: str) -> tuple[int, str]:
    """GET /portal/overview with the token: (status, the error message if refused)."""
    req = urllib.request.Request(server.url + "/api/v1/portal/overview", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["error"]["message"]


def _issued(page: Any) -> str:
    return str(page.get_by_test_id("issued-token").locator("code.token-value").inner_text()).strip()


def test_create_rotate_and_revoke_a_token_in_settings(signed_in: Any, server: Server, api: Api) -> None:
    page = signed_in
    page.goto("/settings?tab=tokens")
    page.get_by_label("Name").fill("e2e grafana")
    page.get_by_label("Expires").select_option("30")
    page.get_by_role("button", name="Create token").click()
    first = _issued(page)
    assert first.startswith("phk_") and _read_with(server, first) == (200, "")
    row = next(t for t in api.get_json("/api/v1/portal/tokens") if t["prefix"] == first[:12])
    assert (row["name"], row["kind"], row["state"], row["owner"]) == ("e2e grafana", "personal", "active", "e2e-admin")
    assert row["expires_at"] is not None
    table = page.get_by_role("table", name="API tokens")
    first_row = table.locator("tr", has=page.locator("code", has_text=f"{first[:12]}…"))
    first_row.filter(has_text="e2e grafana").wait_for()

    # Rotate with no overlap: the new token is shown once, the old one stops now.
    first_row.get_by_role("button", name=f"Rotate {first[:12]}…").click()
    dialog = page.get_by_role("dialog", name="Rotate token?")
    dialog.get_by_label("Old token keeps working for").select_option("0")
    dialog.get_by_role("button", name="Rotate token").click()
    dialog.wait_for(state="detached")
    page.get_by_test_id("issued-token").filter(has_text="stopped working").wait_for()
    second = _issued(page)
    assert second != first and _read_with(server, second) == (200, "")
    status, message = _read_with(server, first)
    assert status == 401
    assert re.fullmatch(rf"token {first[:12]}… was replaced by rotation; its overlap ended at \S+Z", message), message
    first_row.get_by_text(re.compile(r"^rotated; stopped")).wait_for()

    # Revoke the successor, after confirming.
    second_row = table.locator("tr", has=page.locator("code", has_text=f"{second[:12]}…"))
    second_row.get_by_role("button", name=f"Revoke {second[:12]}…").click()
    confirm = page.get_by_role("alertdialog", name="Revoke token?")
    confirm.get_by_role("button", name="Revoke token").click()
    confirm.wait_for(state="detached")
    second_row.get_by_text(re.compile(r"^revoked")).wait_for()
    status, message = _read_with(server, second)
    assert status == 401 and message.startswith(f"token {second[:12]}… was revoked at")
    assert second_row.get_by_role("button").count() == 0

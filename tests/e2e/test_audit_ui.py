"""The Audit log page in the browser: the organization admin changes the organization's target
MFU, opens the Audit log from the navigation, filters it to settings, reads who changed it, from
where, and the value before → after, and downloads the CSV, which carries the filter."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, Api

pytestmark = pytest.mark.e2e


def _put(api: Api, path: str, body: Any) -> Any:
    session = api.get_json("/api/v1/portal/session")
    headers = {"X-CSRFToken": session["csrf_token"], "Referer": api.base_url + "/"}
    return json.loads(api._request("PUT", path, body, headers))


def test_a_settings_change_in_the_audit_log_and_its_csv(signed_in: Any, api: Api, tmp_path: Path) -> None:
    page = signed_in
    before = api.get_json("/api/v1/portal/settings")["target_mfu"]
    after = 0.37 if before != 0.37 else 0.38
    _put(api, "/api/v1/portal/settings", {"target_mfu": after})
    try:
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
        page.get_by_role("heading", name="Audit log").wait_for()
        page.get_by_label("What").select_option("settings")
        page.wait_for_url("**/audit?kind=settings")
        row = page.get_by_test_id("audit-table").locator("tbody tr").filter(has_text=f"target_mfu: {before} → {after}")
        row.first.wait_for()
        text = row.first.inner_text()
        assert ADMIN[0] in text and "127.0.0.1" in text and "changed" in text and "organization settings" in text
        link = page.get_by_test_id("audit-csv")
        assert link.get_attribute("href") == "/api/v1/audit.csv?kind=settings"
        with page.expect_download() as download:
            link.click()
        saved = tmp_path / "audit.csv"
        download.value.save_as(saved)
        rows = list(csv.DictReader(io.StringIO(saved.read_text())))
        assert rows and {r["kind"] for r in rows} == {"settings"}
        assert any(r["field"] == "target_mfu" and float(r["after"]) == after and r["actor"] == ADMIN[0] for r in rows)
    finally:
        _put(api, "/api/v1/portal/settings", {"target_mfu": before})

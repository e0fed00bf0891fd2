"""Closed months are frozen, in the browser: a month is closed in Finance, an admin changes a price
in force in it (the dialog warns first and changes it only when confirmed), and at 390, 1,024 and
1,440 px Finance, Overview and Leaderboards still agree on the month's closed figures, each saying
that the month is closed and what the live figures differ by, and Finance naming who changed the
price. The month is then reopened with a reason, and the price put back."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, Api, Server
from tests.e2e.test_portal_ui import usd

pytestmark = pytest.mark.e2e

WIDTHS = (390, 1024, 1440)


def _closed_month_candidate(api: Api) -> tuple[str, dict[str, Any]]:
    """The ended month (of the last three) with the most spend: the current one cannot be closed."""
    first = datetime.now(UTC).date().replace(day=1)
    months = []
    for _ in range(3):
        first = (first - timedelta(days=1)).replace(day=1)
        months.append(f"{first:%Y-%m}")
    reports = {m: api.get_json(f"/api/v1/portal/finance/{m}") for m in months}
    month = max(months, key=lambda m: reports[m]["totals"]["cost_usd"])
    assert reports[month]["totals"]["cost_usd"] > 0, "the seed has runs in an ended month"
    return month, reports[month]


def _patch(api: Api, path: str, body: Any) -> Any:
    import json

    session = api.get_json("/api/v1/portal/session")
    headers = {"X-CSRFToken": session["csrf_token"], "Referer": api.base_url + "/"}
    return json.loads(api._request("PATCH", path, body, headers))


def _change_price_in_the_dialog(page: Any, entry: dict[str, Any], new_price: str) -> None:
    page.goto("/settings?tab=prices")
    row = page.locator(f'[data-testid="price-book"] tbody tr[data-row-key="{entry["id"]}"]')
    row.get_by_role("button", name="Edit").click()
    dialog = page.get_by_role("dialog", name="Edit price")
    dialog.get_by_label("$ / GPU-hour").fill(new_price)
    dialog.get_by_role("button", name="Save").click()
    warning = dialog.get_by_test_id("closed-month-warning")
    warning.wait_for()
    assert "reaches into a closed month" in warning.inner_text()
    assert "confirm_closed" not in warning.inner_text()
    warning.get_by_role("button", name="Change anyway").click()
    dialog.wait_for(state="detached")


def _text(page: Any, test_id: str) -> str:
    locator = page.get_by_test_id(test_id)
    locator.first.wait_for()
    return str(locator.first.inner_text())


def test_a_price_change_across_a_closed_month_leaves_finance_overview_and_leaderboards_agreeing(
    signed_in: Any, api: Api, server: Server, tmp_path: Path
) -> None:
    page = signed_in
    month, report = _closed_month_candidate(api)
    closed_total = report["totals"]["cost_usd"]
    entry = report["price_entries"][0]
    original = entry["usd_per_gpu_hour"]

    # The current month cannot be closed: the button says why instead.
    page.goto("/finance")
    assert "not over" in _text(page, "close-refusal")
    page.goto(f"/finance?month={month}")
    page.get_by_role("button", name="Close month").click()
    page.get_by_role("alertdialog").get_by_role("button", name="Close month").click()
    page.get_by_role("button", name="Reopen month").wait_for()
    assert usd(closed_total) in _text(page, "finance-spend")
    try:
        for i, width in enumerate(WIDTHS, start=1):
            page.set_viewport_size({"width": width, "height": 900})
            new_price = str((Decimal(str(original)) * (1 + Decimal(i) / 4)).quantize(Decimal("0.01")))
            _change_price_in_the_dialog(page, entry, new_price)
            server.manage("sweep")  # the re-analyses the change queued
            live = api.get_json(f"/api/v1/portal/finance/{month}")["adjustment"]
            assert live["differs"] and live["live_totals"]["cost_usd"] > closed_total

            page.goto(f"/finance?month={month}")
            assert usd(closed_total) in _text(page, "finance-spend")
            adjustment = _text(page, "finance-adjustment")
            assert usd(live["live_totals"]["cost_usd"]) in adjustment
            causes = _text(page, "finance-adjustment-causes")
            assert ADMIN[0] in causes and entry["gpu"] in causes and usd(float(new_price)) in causes

            page.goto(f"/?period={month}")
            assert usd(closed_total) in _text(page, "stat-spend")
            note = _text(page, "closed-month-note")
            assert "is closed" in note and usd(live["difference"]["cost_usd"]) in note and ADMIN[0] in note
            shots = os.environ.get("PHANTOMHUB_E2E_SHOTS")
            page.screenshot(path=str(Path(shots or tmp_path) / f"closed-month-overview-{width}.png"))

            page.goto(f"/leaderboards?period={month}")
            page.get_by_test_id("leaderboard-total-label").wait_for()
            assert usd(closed_total) in str(page.locator('[data-testid="leaderboard-teams"] tfoot').inner_text())
            note = _text(page, "closed-month-note")
            assert "is closed" in note and usd(live["difference"]["cost_usd"]) in note
            if width == 1440:
                page.goto(f"/finance?month={month}")
                page.get_by_test_id("finance-adjustment").wait_for()
                # docs/screenshots/closed-month.png is this one
                page.screenshot(path=str(Path(shots or tmp_path) / "closed-month.png"), full_page=True)
    finally:
        _patch(api, f"/api/v1/pricing/prices/{entry['id']}?confirm_closed=1", {"usd_per_gpu_hour": str(original)})
        server.manage("sweep")

    # Reopening asks why, and the month's record keeps it.
    page.goto(f"/finance?month={month}")
    page.get_by_role("button", name="Reopen month").click()
    confirm = page.get_by_role("alertdialog")
    confirm.get_by_label("Reason").fill("price corrected")
    confirm.get_by_role("button", name="Reopen month").click()
    page.get_by_role("button", name="Close month").wait_for()
    history = _text(page, "finance-history")
    assert f"reopened by {ADMIN[0]}" in history and "price corrected" in history
    assert api.get_json(f"/api/v1/portal/finance/{month}")["totals"]["cost_usd"] == closed_total

"""Settings → Alerts in headless Chromium: a rule created through the form (the API's validation
error shown by field first), a test send to a local receiver with a signature checked here, a
failed delivery with its next retry in the delivery log, mute and delete; each checked against
the API."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from tests.alerts.conftest import Receiver, receiver  # noqa: F401
from tests.e2e.conftest import Api

pytestmark = pytest.mark.e2e


def _rule(api: Api, name: str) -> dict[str, Any] | None:
    return next((r for r in api.get_json("/api/v1/alerts/rules")["rules"] if r["name"] == name), None)


def test_create_a_rule_test_it_and_read_the_delivery_log(signed_in: Any, api: Api, receiver: Receiver) -> None:  # noqa: F811
    page = signed_in
    page.goto("/settings?tab=alerts")
    page.get_by_role("button", name="New rule").click()
    form = page.get_by_test_id("alert-rule-form")
    form.get_by_label("Name").fill("e2e loader stall")
    form.get_by_label("Waste share above (0–1)").fill("1.5")
    form.get_by_label("For (minutes)").fill("2.5")
    form.get_by_label("Applies to").select_option("project")
    form.get_by_label("Project slug").fill("llm-pretrain")
    form.get_by_label("Webhook URL").fill(receiver.url)
    form.get_by_role("button", name="Create rule").click()
    error = form.get_by_role("alert")
    error.wait_for()
    assert "Check: Waste share above (0–1)." in error.inner_text()
    assert "Must be above 0 and at most 1" in form.get_by_test_id("field-error-params.share").inner_text()  # beside its field
    assert form.get_by_label("Waste share above (0–1)").get_attribute("aria-invalid") == "true"
    assert _rule(api, "e2e loader stall") is None  # nothing written

    # "for 0 min" is shorter than one evaluation interval: refused beside its field, with the others at once.
    form.get_by_label("For (minutes)").fill("0")
    form.get_by_label("Name").fill("")
    form.get_by_role("button", name="Create rule").click()
    form.get_by_test_id("field-error-for_s").wait_for()
    assert "rules are checked every" in form.get_by_test_id("field-error-for_s").inner_text()
    assert "Required" in form.get_by_test_id("field-error-name").inner_text()
    assert "This field may not be blank" not in form.inner_text()
    form.get_by_label("Name").fill("e2e loader stall")
    form.get_by_label("For (minutes)").fill("2.5")

    form.get_by_label("Waste share above (0–1)").fill("0.5")
    form.get_by_role("button", name="Create rule").click()
    page.get_by_test_id("alert-notice").filter(has_text="Saved e2e loader stall.").wait_for()
    rule = _rule(api, "e2e loader stall")
    assert rule is not None
    assert (rule["params"], rule["for_s"], rule["scope"], rule["project"]) == ({"share": 0.5}, 150.0, "project", "llm-pretrain")
    row = page.get_by_test_id("alert-rules").locator("tbody tr").filter(has_text="e2e loader stall")
    assert "waste share > 50% for 2.5 min" in row.inner_text() and "project llm-pretrain" in row.inner_text()

    page.get_by_role("button", name="Send a test of e2e loader stall").click()
    page.get_by_test_id("alert-notice").filter(has_text="sent (HTTP 200)").wait_for()
    [got] = receiver.got
    ts = got.headers["x-phantomhub-timestamp"]
    mac = hmac.new(rule["webhook_secret"].encode(), ts.encode() + b"." + got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-phantomhub-signature"] == f"v1={mac}"

    receiver.answers = [503]
    page.get_by_role("button", name="Send a test of e2e loader stall").click()
    page.get_by_test_id("alert-notice").filter(has_text="pending (HTTP 503)").wait_for()
    log = page.get_by_test_id("alert-deliveries")
    failed = log.locator("tbody tr").filter(has_text="503").first
    failed.wait_for()
    cells = failed.inner_text()
    assert "pending" in cells and "HTTP 503" in cells and "e2e loader stall" in cells
    api_log = api.get_json(f"/api/v1/alerts/deliveries?rule={rule['id']}")["deliveries"]
    assert [(d["status"], d["status_code"], d["attempts"]) for d in api_log] == [("pending", 503, 1), ("sent", 200, 1)]
    assert api_log[0]["next_attempt_at"] is not None
    assert "sent" in log.locator("tbody tr").nth(1).inner_text()

    page.get_by_role("button", name="Mute e2e loader stall").click()
    page.get_by_role("button", name="Unmute e2e loader stall").wait_for()
    assert (_rule(api, "e2e loader stall") or {})["muted"] is True
    page.get_by_role("button", name="Delete e2e loader stall").click()
    page.get_by_test_id("alert-notice").filter(has_text="Deleted e2e loader stall.").wait_for()
    assert _rule(api, "e2e loader stall") is None

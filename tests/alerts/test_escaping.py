"""Escaping at the edge: a run's or rule's name reaches Slack as text (no @channel, no disguised
link), email headers are single clean lines (no Bcc from a run name), a header the mail library
refuses is not retried, and rule names refuse CR/LF and control characters."""

from __future__ import annotations

import email
import email.policy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.alerts import services
from phantomhub.alerts.models import AlertDelivery, AlertRule
from phantomhub.telemetry.models import Run
from tests.alerts.conftest import Receiver, Smtp
from tests.alerts.test_rules import stalled_run
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("price_36")]
NOW = datetime(2026, 9, 21, 12, 0, tzinfo=UTC)
SLACK_BAIT = "<!channel> <http://evil.example/login|open the run>\x07"


@pytest.fixture
def admin() -> APIClient:
    user = User.objects.create_user("admin", password="pw")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def _firing_for_run_named(owner: Tenant, name: str, **rule: Any) -> str:
    run_id = stalled_run(owner)
    Run.objects.filter(pk=run_id).update(name=name)  # however the name got there
    AlertRule.objects.create(name="waste", kind="waste_rate", params={"usd_per_hour": 25.0}, for_s=0, window_s=30, **rule)
    services.alerts_evaluate(now=NOW)
    return run_id


def test_a_run_name_reaches_slack_as_text(owner: Tenant, receiver: Receiver, settings: Any) -> None:
    settings.PUBLIC_URL = "https://phantomhub.example.com"
    run_id = _firing_for_run_named(owner, SLACK_BAIT, webhook_url=receiver.url, webhook_format="slack")
    [got] = receiver.wait_for(1, 5)
    body = got.json
    text = body["text"]
    assert text == body["blocks"][0]["text"]["text"]
    assert "<!channel>" not in text and "<http://evil.example" not in text and "\x07" not in text
    assert "&lt;!channel&gt; &lt;http://evil.example/login|open the run&gt;" in text
    # The one link in the message is the run's own.
    assert text.count("<") == 1 and text.endswith(f"<https://phantomhub.example.com/runs/{run_id}|open the run>")


def test_a_rule_name_reaches_slack_as_text_in_a_test_message(admin: APIClient, receiver: Receiver) -> None:
    rule = {"name": "<!here> & <@U123>", "kind": "silent_run", "for_s": 120, "webhook_url": receiver.url}
    rule["webhook_format"] = "slack"
    rule_id = admin.post("/api/v1/alerts/rules", rule, format="json").json()["id"]
    assert admin.post(f"/api/v1/alerts/rules/{rule_id}/test").status_code == 200
    text = receiver.got[0].json["text"]
    assert "<!here>" not in text and "<@U123>" not in text and "&lt;!here&gt; &amp; &lt;@U123&gt;" in text


def test_a_run_name_with_a_line_break_adds_no_header(owner: Tenant, smtp: Smtp) -> None:
    _firing_for_run_named(owner, "stall\r\nBcc: evil@example.com\r\nX-Evil: 1", email_to=["oncall@example.com"])
    item = AlertDelivery.objects.get()
    assert (item.status, item.attempts, item.error) == ("sent", 1, "")
    [envelope] = smtp.got
    assert envelope.rcpt_tos == ["oncall@example.com"]
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert "Bcc" not in message and "X-Evil" not in message
    assert "stall Bcc: evil@example.com X-Evil: 1 (llm-pretrain)" in str(message["Subject"])


def test_an_address_the_mail_library_refuses_is_not_retried(admin: APIClient, smtp: Smtp) -> None:
    # Stored past the API's validation (an import, an older release): a line break in an address.
    rule = AlertRule.objects.create(name="mail", kind="silent_run", email_to=["oncall@example.com\nBcc: evil@example.com"])
    response = admin.post(f"/api/v1/alerts/rules/{rule.pk}/test")
    assert response.status_code == 200
    [item] = response.json()["deliveries"]
    assert (item["status"], item["attempts"], item["next_attempt_at"]) == ("failed", 1, None)
    assert item["error"] == "the message has an invalid header or address" and smtp.got == []


def test_a_header_error_is_permanent(owner: Tenant, settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "phantomhub@example.com\r\nBcc: evil@example.com"  # a bad From: BadHeaderError
    rule = AlertRule.objects.create(name="mail", kind="silent_run", email_to=["oncall@example.com"])
    [item] = services.rule_test_send(rule=rule)
    assert (item.status, item.attempts, item.next_attempt_at) == ("failed", 1, None)


@pytest.mark.parametrize("name", ["stall\r\nBcc: evil@example.com", "two\nlines", "bell\x07", "nul\x00", "sep\u2028arator"])
def test_a_rule_name_with_a_control_character_is_a_400_naming_it(admin: APIClient, name: str) -> None:
    rule = {"name": name, "kind": "silent_run", "for_s": 120}
    response = admin.post("/api/v1/alerts/rules", rule, format="json")
    assert response.status_code == 400 and "name" in response.json()["error"]["fields"], response.content
    good = admin.post("/api/v1/alerts/rules", rule | {"name": "fine"}, format="json").json()["id"]
    patched = admin.patch(f"/api/v1/alerts/rules/{good}", {"name": name}, format="json")
    assert patched.status_code == 400 and "name" in patched.json()["error"]["fields"]
    assert list(AlertRule.objects.values_list("name", flat=True)) == ["fine"]
    assert json.dumps(response.json())  # a plain JSON error, not a debug page

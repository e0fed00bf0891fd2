"""Webhook signatures (checked by an independent HMAC), retries with backoff against a local
receiver, no retry on 4xx, refused URLs, the Slack shape, and the delivery log."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from phantomhub.alerts import services
from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState
from phantomhub.egress import REASON_CONNECT, url_problem
from tests.alerts.conftest import Receiver, Smtp

pytestmark = pytest.mark.django_db


def _rule(url: str, **fields: Any) -> AlertRule:
    return AlertRule.objects.create(name="hook", kind="silent_run", for_s=60, webhook_url=url, **fields)


def test_the_signature_verifies_with_an_independent_hmac(receiver: Receiver) -> None:
    rule = _rule(receiver.url)
    [item] = services.rule_test_send(rule=rule)
    assert item.status == "sent" and item.status_code == 200
    [got] = receiver.got
    ts = got.headers["x-phantomhub-timestamp"]
    assert abs(int(ts) - time.time()) < 30
    expected = hmac.new(rule.webhook_secret.encode(), f"{ts}.".encode() + got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-phantomhub-signature"] == f"v1={expected}"
    assert got.headers["x-phantomhub-delivery"] == str(item.pk)
    forged = hmac.new(b"another secret", f"{ts}.".encode() + got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-phantomhub-signature"] != f"v1={forged}"
    assert json.loads(got.body)["event"] == "test"


def test_a_500_is_retried_with_backoff_then_delivered(receiver: Receiver, settings: Any) -> None:
    settings.ALERT_RETRY_BASE_S = 0.5
    receiver.answers = [500, 200]
    rule = _rule(receiver.url)
    [item] = services.rule_test_send(rule=rule)
    assert item.status == "pending" and item.attempts == 1 and item.status_code == 500
    assert item.next_attempt_at is not None
    assert services.deliveries_send_due() == (0, 0)  # not due yet
    time.sleep(0.6)
    assert services.deliveries_send_due() == (1, 0)
    item.refresh_from_db()
    assert (item.status, item.attempts, item.status_code, item.error) == ("sent", 2, 200, "")
    bodies = [g.body for g in receiver.got]
    assert len(bodies) == 2 and bodies[0] == bodies[1]  # the same body, signed afresh
    assert receiver.got[0].headers["x-phantomhub-signature"] != "" and len(receiver.got) == 2


def test_the_backoff_triples_and_gives_up_after_the_last_attempt(receiver: Receiver, settings: Any) -> None:
    settings.ALERT_RETRY_BASE_S = 10
    settings.ALERT_MAX_ATTEMPTS = 3
    receiver.answer = lambda item: 503
    [item] = services.rule_test_send(rule=_rule(receiver.url))
    delays = []
    for _ in range(2):
        assert item.next_attempt_at is not None
        delays.append((item.next_attempt_at - timezone.now()).total_seconds())
        AlertDelivery.objects.filter(pk=item.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
        services.deliveries_send_due()
        item.refresh_from_db()
    assert delays[0] == pytest.approx(10, abs=1) and item.attempts == 3
    assert item.status == "failed" and item.next_attempt_at is None and item.status_code == 503


def test_a_4xx_is_not_retried(receiver: Receiver) -> None:
    receiver.answers = [410]
    [item] = services.rule_test_send(rule=_rule(receiver.url))
    assert (item.status, item.attempts, item.status_code) == ("failed", 1, 410)
    assert "410" in item.error and item.next_attempt_at is None


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answers = [302]
    receiver.headers = {"Location": receiver.url + "/elsewhere"}
    [item] = services.rule_test_send(rule=_rule(receiver.url))
    assert (item.status, item.status_code) == ("failed", 302)
    assert [g.path for g in receiver.got] == ["/hook"]  # the signed body went nowhere else


def test_a_network_error_is_retried(loopback_allowed: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    [item] = services.rule_test_send(rule=_rule(f"http://127.0.0.1:{port}/hook"))
    assert item.status == "pending" and item.status_code is None and item.error == REASON_CONNECT


def test_the_slack_payload_has_text_and_a_section(receiver: Receiver) -> None:
    services.rule_test_send(rule=_rule(receiver.url, webhook_format="slack"))
    body = receiver.got[0].json
    assert set(body) == {"text", "blocks"} and "Test of the alert rule" in body["text"]
    assert body["blocks"][0]["type"] == "section" and body["blocks"][0]["text"]["type"] == "mrkdwn"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file:///etc/passwd", "only http and https"),
        ("gopher://127.0.0.1/", "only http and https"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://user:pw@example.com/hook", "credentials"),
    ],
)
def test_urls_that_are_refused(url: str, why: str) -> None:
    problem = url_problem(url)
    assert problem is not None and why in problem


def test_a_stored_url_the_policy_now_refuses_is_not_called(settings: Any, receiver: Receiver) -> None:
    rule = _rule(receiver.url)  # stored while the allowlist let 127.0.0.1 through
    settings.EGRESS_ALLOW_NETWORKS = []
    [item] = services.rule_test_send(rule=rule)
    assert item.status == "failed" and item.attempts == 1 and not receiver.got
    assert item.error == "refused: 127.0.0.1 is a loopback address"


def test_email_through_a_real_smtp_receiver(smtp: Smtp) -> None:
    rule = AlertRule.objects.create(name="mail", kind="silent_run", email_to=["oncall@example.com"])
    [item] = services.rule_test_send(rule=rule)
    assert item.status == "sent" and len(smtp.got) == 1 and smtp.got[0].rcpt_tos == ["oncall@example.com"]
    assert b"Test of the alert rule" in smtp.got[0].content


def test_old_log_rows_and_cleared_subjects_are_forgotten(receiver: Receiver) -> None:
    rule = _rule(receiver.url)
    now = timezone.now()
    [old] = services.rule_test_send(rule=rule)
    [recent] = services.rule_test_send(rule=rule)
    AlertDelivery.objects.filter(pk=old.pk).update(created_at=now - timedelta(days=91))
    states = {
        name: AlertState.objects.create(rule=rule, subject=name, state=state, evaluated_at=at, resolved_at=at)
        for name, state, at in [("ok-old", "ok", now - timedelta(days=2)), ("ok-new", "ok", now),
                                ("resolved-old", "resolved", now - timedelta(days=91)), ("resolved", "resolved", now)]
    }  # fmt: skip
    services.alerts_evaluate(now=now)
    assert set(AlertDelivery.objects.values_list("pk", flat=True)) == {recent.pk}
    assert set(AlertState.objects.values_list("subject", flat=True)) == {"ok-new", "resolved"} and states

"""A delivery cannot wedge: a receiver answering with a NUL byte, or a port that is not HTTP,
ends one counted attempt with a clean reason; POST /rules/<id>/test never answers 5xx; the
attempt limit always applies; and one delivery that fails in any way never stops a sweep
(alert pruning and storage maintenance included)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub import egress
from phantomhub.accounts.models import Profile
from phantomhub.alerts import delivery, services
from phantomhub.alerts.models import AlertDelivery, AlertRule
from tests.alerts.conftest import Receiver

pytestmark = pytest.mark.django_db


def _raw_listener(reply: bytes) -> Iterator[str]:
    """A listener on 127.0.0.1 that answers every connection with `reply` bytes and closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(2)
                    conn.recv(65536)
                    conn.sendall(reply)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    server.close()


@pytest.fixture
def nul_url(loopback_allowed: None) -> Iterator[str]:
    yield from _raw_listener(b"\x00")


@pytest.fixture
def mariadb_url(loopback_allowed: None) -> Iterator[str]:
    # The start of a MariaDB server greeting: a length, a sequence number, a version with a NUL.
    yield from _raw_listener(b"\x52\x00\x00\x00\x0a5.5.5-10.11.6-MariaDB\x00\x08\x00\x00\x00")


@pytest.fixture
def admin() -> APIClient:
    user = User.objects.create_user("admin", password="pw")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def _due_now() -> None:
    AlertDelivery.objects.filter(status="pending").update(next_attempt_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.parametrize("which", ["nul_url", "mariadb_url"])
def test_a_nul_answer_is_one_counted_attempt_and_test_answers_200(
    admin: APIClient, request: pytest.FixtureRequest, which: str, settings: Any
) -> None:
    settings.ALERT_MAX_ATTEMPTS = 3
    url = request.getfixturevalue(which)
    rule = AlertRule.objects.create(name="nul", kind="silent_run", for_s=120, webhook_url=url)
    response = admin.post(f"/api/v1/alerts/rules/{rule.pk}/test")
    assert response.status_code == 200, response.content[:500]
    [item] = response.json()["deliveries"]
    assert (item["status"], item["attempts"], item["error"]) == ("pending", 1, egress.REASON_CONNECT)
    for _ in range(5):  # each retry is counted, and the limit ends them
        _due_now()
        services.deliveries_send_due()
    row = AlertDelivery.objects.get()
    assert (row.status, row.attempts, row.next_attempt_at) == ("failed", 3, None)
    assert "\x00" not in row.error


@pytest.mark.django_db(transaction=True)  # the receiver's thread reads what the attempt committed
def test_an_attempt_is_counted_before_it_is_made(receiver: Receiver) -> None:
    rule = AlertRule.objects.create(name="count", kind="silent_run", for_s=120, webhook_url=receiver.url)
    seen: list[tuple[int, str]] = []

    def during(got: Any) -> int:  # the receiver reads the log row while the POST is in flight
        try:
            seen.append(AlertDelivery.objects.values_list("attempts", "status").get())
        finally:
            connection.close()
        return 200

    receiver.answer = during
    services.rule_test_send(rule=rule)
    assert seen == [(1, "pending")]


def test_an_attempt_that_raises_is_counted_and_test_still_answers(
    admin: APIClient, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.ALERT_MAX_ATTEMPTS = 2

    def broken(**kwargs: Any) -> delivery.Attempt:  # a defect inside PhantomHub, not the network
        raise ValueError("A string literal cannot contain NUL (0x00) characters.")

    monkeypatch.setattr(delivery, "webhook_post", broken)
    rule = AlertRule.objects.create(name="raises", kind="silent_run", for_s=120, webhook_url=receiver.url)
    response = admin.post(f"/api/v1/alerts/rules/{rule.pk}/test")
    assert response.status_code == 200
    [item] = response.json()["deliveries"]
    assert item["attempts"] == 1 and item["status"] == "pending" and "inside PhantomHub" in item["error"]
    _due_now()
    services.deliveries_send_due()
    assert AlertDelivery.objects.values_list("status", "attempts").get() == ("failed", 2)


def test_the_attempt_limit_applies_to_a_delivery_left_over_the_limit(receiver: Receiver, settings: Any) -> None:
    settings.ALERT_MAX_ATTEMPTS = 3
    rule = AlertRule.objects.create(name="stuck", kind="silent_run", for_s=120, webhook_url=receiver.url)
    AlertDelivery.objects.create(
        rule=rule, event="test", channel="webhook", target=receiver.url, body="{}", attempts=7, next_attempt_at=timezone.now()
    )  # as the old code left one: pending, past its attempts
    assert services.deliveries_send_due() == (0, 1)
    assert AlertDelivery.objects.values_list("status", "attempts").get() == ("failed", 7) and not receiver.got


def test_the_sweep_goes_on_past_a_failing_delivery(receiver: Receiver, nul_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = AlertRule.objects.create(name="bad", kind="silent_run", for_s=120, webhook_url=nul_url)
    good = AlertRule.objects.create(name="good", kind="silent_run", for_s=120, webhook_url=receiver.url)
    now = timezone.now()
    for rule in (bad, good):
        AlertDelivery.objects.create(
            rule=rule, event="test", channel="webhook", target=rule.webhook_url, body="{}", next_attempt_at=now
        )
    old = AlertDelivery.objects.create(rule=good, event="test", channel="webhook", target=receiver.url, body="{}", status="sent")
    AlertDelivery.objects.filter(pk=old.pk).update(created_at=now - timedelta(days=91))
    real = services.delivery_attempt

    def first_raises(*, item: AlertDelivery) -> AlertDelivery:  # and one whose attempt blows up outright
        if item.rule_id == bad.pk and item.attempts == 0:
            AlertDelivery.objects.filter(pk=item.pk).update(attempts=1)
            raise RuntimeError("boom")
        return real(item=item)

    monkeypatch.setattr(services, "delivery_attempt", first_raises)
    result = services.alerts_evaluate()
    assert (result.sent, result.failed) == (1, 1)
    assert len(receiver.got) == 1
    assert not AlertDelivery.objects.filter(pk=old.pk).exists()  # pruning ran after it

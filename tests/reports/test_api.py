"""The subscriptions API: bad input is a 4xx naming the field (a time zone that does not exist, a
schedule that does not fit the report), never a 500 and never a partial write; people subscribe
themselves to what they may read; webhooks and other addresses are organization admins'."""

from __future__ import annotations

from typing import Any

import pytest

from phantomhub.portal.models import SavedView
from phantomhub.reports.models import ReportDelivery, Subscription
from tests.alerts.conftest import Receiver
from tests.reports.conftest import Books

pytestmark = pytest.mark.django_db
DIGEST = {"kind": "digest_team", "team": "nlp", "cadence": "weekly", "weekday": 0, "hour": 0, "minute": 30,
          "timezone": "Europe/Berlin"}  # fmt: skip
FINANCE = {"kind": "finance_month", "cadence": "monthly", "day_of_month": 1, "timezone": "UTC"}


def _post(books: Books, who: str, body: dict[str, Any]) -> Any:
    return books.client(who).post("/api/v1/reports/subscriptions", body, format="json")


@pytest.mark.parametrize(
    ("changes", "field", "status"),
    [
        ({"timezone": "Europe/Atlantis"}, "timezone", 400),
        ({"timezone": "../../etc/passwd"}, "timezone", 400),
        ({"timezone": ""}, "timezone", 400),
        ({"weekday": None}, "weekday", 400),
        ({"weekday": 7}, "weekday", 400),
        ({"hour": 24}, "hour", 400),
        ({"cadence": "monthly", "day_of_month": 1}, "cadence", 400),  # a digest is weekly
        ({"team": "vision"}, "team", 400),  # not ann's team: not found
        ({"team": None}, "team", 400),
        ({"kind": "finance_month", "cadence": "monthly", "day_of_month": 1}, "kind", 403),  # ann is no finance
        ({"kind": "saved_view", "saved_view": 10**6}, "saved_view", 400),
        ({"email_to": ["someone.else@example.com"]}, "email_to", 403),
        ({"email_to": ["not an address"]}, "email_to[0]", 400),
        ({"webhook_url": "https://hooks.example.com/x"}, "webhook_url", 403),
        ({"kind": "monthly_everything"}, "kind", 400),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field_and_writes_nothing(
    books: Books, changes: dict[str, Any], field: str, status: int
) -> None:
    response = _post(books, "ann", {**DIGEST, **changes})
    assert response.status_code == status, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert Subscription.objects.count() == 0


def test_admins_set_webhooks_and_other_addresses_and_the_egress_policy_checks_the_url(books: Books, receiver: Receiver) -> None:
    refused = _post(books, "root", {**FINANCE, "webhook_url": "http://10.0.0.1/hook"})
    assert refused.status_code == 400 and "webhook_url" in refused.json()["error"]["fields"]
    made = _post(books, "root", {**FINANCE, "email_to": ["finance-team@example.com"], "webhook_url": receiver.url,
                                 "webhook_format": "slack"})  # fmt: skip
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["webhook_url"] == receiver.url and body["webhook_secret"].startswith("whsec_")
    assert body["email_to"] == ["finance-team@example.com"] and body["next_due_at"] is not None


def test_a_person_sees_and_changes_their_own_subscriptions_and_admins_everyone_s(books: Books) -> None:
    mine = _post(books, "ann", DIGEST)
    assert mine.status_code == 201, mine.content
    sub_id = mine.json()["id"]
    assert mine.json()["email_to"] == ["ann@example.com"]  # the subscriber's own address by default
    assert _post(books, "fin", FINANCE).status_code == 201
    listed = {who: [s["owner"] for s in books.client(who).get("/api/v1/reports/subscriptions").json()["subscriptions"]]
              for who in ("ann", "bob", "fin", "root")}  # fmt: skip
    assert listed == {"ann": ["ann"], "bob": [], "fin": ["fin"], "root": ["ann", "fin"]}
    assert books.client("bob").patch(f"/api/v1/reports/subscriptions/{sub_id}", {"hour": 9}, format="json").status_code == 404
    changed = books.client("ann").patch(f"/api/v1/reports/subscriptions/{sub_id}", {"hour": 9, "timezone": "Asia/Tokyo"},
                                        format="json")  # fmt: skip
    assert changed.status_code == 200 and (changed.json()["hour"], changed.json()["timezone"]) == (9, "Asia/Tokyo")
    bad = books.client("ann").patch(f"/api/v1/reports/subscriptions/{sub_id}", {"timezone": "Nowhere/Land"}, format="json")
    assert bad.status_code == 400 and "timezone" in bad.json()["error"]["fields"]
    assert Subscription.objects.get(pk=sub_id).timezone == "Asia/Tokyo"  # unchanged by the refused change
    off = books.client("ann").patch(f"/api/v1/reports/subscriptions/{sub_id}", {"enabled": False}, format="json")
    assert off.status_code == 200 and off.json()["next_due_at"] is None
    assert books.client("ann").delete(f"/api/v1/reports/subscriptions/{sub_id}").status_code == 204
    assert not Subscription.objects.filter(pk=sub_id).exists()


def test_a_saved_view_is_subscribed_by_those_who_see_it(books: Books) -> None:
    view = SavedView.objects.create(owner=books.users["ann"], name="nlp runs", page="runs", query="team=nlp")
    body = {"kind": "saved_view", "saved_view": view.pk, "cadence": "weekly", "weekday": 4, "timezone": "UTC"}
    assert _post(books, "bob", body).status_code == 400  # not shared with bob
    made = _post(books, "ann", body)
    assert made.status_code == 201 and made.json()["saved_view"] == {"id": view.pk, "name": "nlp runs", "page": "runs"}


def test_the_delivery_log_rejects_a_bad_status_and_lists_only_one_s_own(books: Books) -> None:
    ann = books.client("ann")
    assert ann.get("/api/v1/reports/deliveries", {"status": "lost"}).status_code == 400
    assert ann.get("/api/v1/reports/deliveries", {"subscription": "x"}).status_code == 400
    sub = Subscription.objects.create(owner=books.users["fin"], kind="finance_month", cadence="monthly", day_of_month=1,
                                      email_to=["fin@example.com"])  # fmt: skip
    ReportDelivery.objects.create(subscription=sub, period_key="2026-09", period_start="2026-09-01", period_end="2026-09-30",
                                  channel="email", target="fin@example.com", status="sent")  # fmt: skip
    assert ann.get("/api/v1/reports/deliveries").json()["deliveries"] == []
    [row] = books.client("fin").get("/api/v1/reports/deliveries").json()["deliveries"]
    assert (row["period_key"], row["status"], row["target"]) == ("2026-09", "sent", "fin@example.com")


def test_a_body_past_16_kib_is_413_before_it_is_parsed(books: Books) -> None:
    body = {**DIGEST, "padding": "x" * (16 * 1024)}
    response = _post(books, "ann", body)
    assert response.status_code == 413, response.content
    assert Subscription.objects.count() == 0


def test_addresses_an_admin_added_to_a_member_s_subscription_survive_the_member_pausing_it(books: Books) -> None:
    sub_id = _post(books, "ann", DIGEST).json()["id"]
    path = f"/api/v1/reports/subscriptions/{sub_id}"
    both = ["ann@example.com", "nlp-leads@example.com"]
    assert books.client("root").patch(path, {"email_to": both}, format="json").status_code == 200
    paused = books.client("ann").patch(path, {"enabled": False}, format="json")
    assert paused.status_code == 200 and paused.json()["email_to"] == both
    extra = books.client("ann").patch(path, {"email_to": [*both, "x@example.com"]}, format="json")
    assert extra.status_code == 403 and "email_to" in extra.json()["error"]["fields"]

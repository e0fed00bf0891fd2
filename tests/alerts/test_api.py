"""The alerts API: validation errors name the field and write nothing; who may write which rule;
the secret only for writers; mute and snooze of one subject; the delivery log."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.alerts.models import AlertRule, AlertState
from tests.alerts.conftest import Receiver
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db


def _client(name: str, owner: Tenant, *, role: str | None = None, org_admin: bool = False) -> APIClient:
    user = User.objects.create_user(name, password="pw")
    if role:
        Membership.objects.create(user=user, team=owner.project.team, role=role)
    if org_admin:
        Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def admin(owner: Tenant) -> APIClient:
    return _client("admin", owner, org_admin=True)


GOOD = {"name": "stall", "kind": "waste_rate", "scope": "project", "project": "llm-pretrain", "params": {"share": 0.5},
        "for_s": 30, "window_s": 60}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"params": {"share": 1.5}}, "params.share"),
        ({"params": {"share": 0}}, "params.share"),
        ({"params": {"usd_per_hour": "ten"}}, "params.usd_per_hour"),
        ({"params": {"drop_pct": 10}}, "params.drop_pct"),
        ({"params": {}}, "params.usd_per_hour"),
        ({"kind": "efficiency_drop", "params": {"drop_pct": 10}}, "params.metric"),
        ({"kind": "efficiency_drop", "params": {"metric": "loss", "drop_pct": 10}}, "params.metric"),
        ({"kind": "straggler", "params": {}}, "params.usd_per_hour"),
        ({"kind": "nonsense"}, "kind"),
        ({"for_s": -1}, "for_s"),
        ({"window_s": 1}, "window_s"),
        ({"scope": "team", "team": ""}, "team"),
        ({"scope": "project", "project": "nope"}, "project"),
        ({"webhook_url": "ftp://example.com/x"}, "webhook_url"),
        ({"webhook_url": "http://169.254.169.254/"}, "webhook_url"),
        ({"email_to": ["not an address"]}, "email_to[0]"),
        ({"name": ""}, "name"),
        ({"webhook_format": "teams"}, "webhook_format"),
        ({"kind": "silent_run", "params": {}, "for_s": 10}, "for_s"),
        ({"kind": "silent_run", "params": {}, "for_s": 60}, "for_s"),  # shorter than a flush interval and a half
        ({"params": {"share": 0.5, "drop_pct": 3}}, "params.drop_pct"),
        ({"params": [0.5]}, "params"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field_and_writes_nothing(admin: APIClient, change: dict[str, Any], field: str) -> None:
    response = admin.post("/api/v1/alerts/rules", GOOD | change, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not AlertRule.objects.exists()


def test_create_read_update_delete(admin: APIClient) -> None:
    response = admin.post("/api/v1/alerts/rules", GOOD | {"email_to": ["a@example.com", "a@example.com"]}, format="json")
    assert response.status_code == 201, response.content
    rule = response.json()
    assert rule["params"] == {"share": 0.5} and rule["team"] == "nlp" and rule["email_to"] == ["a@example.com"]
    assert rule["webhook_secret"].startswith("whsec_") and rule["writable"]
    listed = admin.get("/api/v1/alerts/rules").json()
    assert [r["id"] for r in listed["rules"]] == [rule["id"]] and "waste_rate" in listed["kinds"]
    patched = admin.patch(f"/api/v1/alerts/rules/{rule['id']}", {"params": {"usd_per_hour": 12}}, format="json")
    assert patched.status_code == 200 and patched.json()["params"] == {"usd_per_hour": 12.0}
    bad = admin.patch(f"/api/v1/alerts/rules/{rule['id']}", {"for_s": "soon"}, format="json")
    assert bad.status_code == 400 and "for_s" in bad.json()["error"]["fields"]
    assert AlertRule.objects.get().for_s == 30
    rotated = admin.patch(f"/api/v1/alerts/rules/{rule['id']}", {"rotate_secret": True}, format="json").json()
    assert rotated["webhook_secret"] != rule["webhook_secret"]
    assert admin.delete(f"/api/v1/alerts/rules/{rule['id']}").status_code == 204
    assert not AlertRule.objects.exists()


def test_team_admins_write_their_teams_rules_only(owner: Tenant, outsider: Tenant) -> None:
    lead = _client("lead", owner, role=Role.ADMIN)
    member = _client("member", owner, role=Role.MEMBER)
    assert lead.post("/api/v1/alerts/rules", GOOD, format="json").status_code == 201
    assert lead.post("/api/v1/alerts/rules", GOOD | {"scope": "org"}, format="json").status_code == 403
    other = GOOD | {"project": "detector"}
    assert lead.post("/api/v1/alerts/rules", other, format="json").status_code == 403
    assert member.post("/api/v1/alerts/rules", GOOD, format="json").status_code == 403
    seen = member.get("/api/v1/alerts/rules").json()["rules"]
    assert len(seen) == 1 and seen[0]["webhook_secret"] is None and not seen[0]["writable"]
    outsider_person = _client("vision-person", outsider)
    Membership.objects.create(user=User.objects.get(username="vision-person"), team=outsider.project.team)
    assert outsider_person.get("/api/v1/alerts/rules").json()["rules"] == []


def test_mute_and_snooze_one_subject(admin: APIClient) -> None:
    rule_id = admin.post("/api/v1/alerts/rules", GOOD, format="json").json()["id"]
    state = AlertState.objects.create(rule_id=rule_id, subject="run:x", subject_label="x", state="firing")
    muted = admin.patch(f"/api/v1/alerts/alerts/{state.pk}", {"muted": True}, format="json")
    assert muted.status_code == 200 and muted.json()["muted"]
    snoozed = admin.patch(f"/api/v1/alerts/alerts/{state.pk}", {"snoozed_until": "2030-01-01T00:00:00Z"}, format="json")
    assert snoozed.json()["snoozed_until"].startswith("2030-01-01") and snoozed.json()["muted"]
    cleared = admin.patch(f"/api/v1/alerts/alerts/{state.pk}", {"snoozed_until": None, "muted": False}, format="json")
    assert cleared.json()["snoozed_until"] is None and not cleared.json()["muted"]
    bad = admin.patch(f"/api/v1/alerts/alerts/{state.pk}", {"snoozed_until": "tomorrow"}, format="json")
    assert bad.status_code == 400 and "snoozed_until" in bad.json()["error"]["fields"]
    listed = admin.get("/api/v1/alerts/alerts?state=firing").json()["alerts"]
    assert [a["id"] for a in listed] == [state.pk]
    assert admin.get("/api/v1/alerts/alerts?state=burning").status_code == 400


def test_test_send_and_the_delivery_log(admin: APIClient, receiver: Receiver) -> None:
    rule_id = admin.post("/api/v1/alerts/rules", GOOD | {"webhook_url": receiver.url}, format="json").json()["id"]
    receiver.answers = [500]
    sent = admin.post(f"/api/v1/alerts/rules/{rule_id}/test").json()["deliveries"]
    assert sent[0]["status"] == "pending" and sent[0]["status_code"] == 500 and sent[0]["next_attempt_at"]
    log = admin.get(f"/api/v1/alerts/deliveries?rule={rule_id}").json()["deliveries"]
    assert [(d["event"], d["attempts"], d["status_code"]) for d in log] == [("test", 1, 500)]
    assert admin.get("/api/v1/alerts/deliveries?status=lost").status_code == 400
    no_channel = admin.post("/api/v1/alerts/rules", GOOD, format="json").json()["id"]
    refused = admin.post(f"/api/v1/alerts/rules/{no_channel}/test")
    assert refused.status_code == 400 and "webhook_url" in refused.json()["error"]["fields"]

"""A rule's duration is at least one evaluation interval: "for 0 min" is refused with a 400 naming
for_s, on create and on edit, and nothing is written."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.alerts.api import evaluation_interval_s
from phantomhub.alerts.models import AlertRule
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

RULE = {"name": "stall", "kind": "waste_rate", "scope": "project", "project": "llm-pretrain", "params": {"share": 0.5},
        "for_s": 300, "window_s": 60}  # fmt: skip


@pytest.fixture
def admin(owner: Tenant) -> APIClient:
    user = User.objects.create_user("admin", password="pw")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize("for_s", [0, 5, 19.9])
def test_a_duration_shorter_than_one_evaluation_interval_is_refused(admin: APIClient, for_s: float) -> None:
    assert evaluation_interval_s() == 20.0
    response = admin.post("/api/v1/alerts/rules", {**RULE, "for_s": for_s}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert set(error["fields"]) == {"for_s"}
    assert "at least one evaluation interval (20 s)" in error["fields"]["for_s"]
    assert not AlertRule.objects.exists()


def test_one_interval_is_enough_and_an_edit_down_to_zero_is_refused(admin: APIClient) -> None:
    made = admin.post("/api/v1/alerts/rules", {**RULE, "for_s": 20}, format="json")
    assert made.status_code == 201, made.content
    rule_id = made.json()["id"]
    bad = admin.patch(f"/api/v1/alerts/rules/{rule_id}", {"for_s": 0}, format="json")
    assert bad.status_code == 400 and set(bad.json()["error"]["fields"]) == {"for_s"}
    assert AlertRule.objects.get().for_s == 20


def test_the_interval_follows_the_beat_schedule(admin: APIClient) -> None:
    from django.conf import settings

    schedule = {
        **settings.CELERY_BEAT_SCHEDULE,
        "alerts-evaluate": {**settings.CELERY_BEAT_SCHEDULE["alerts-evaluate"], "schedule": 60.0},
    }
    with override_settings(CELERY_BEAT_SCHEDULE=schedule):
        response = admin.post("/api/v1/alerts/rules", {**RULE, "for_s": 30}, format="json")
    assert response.status_code == 400 and "(60 s)" in response.json()["error"]["fields"]["for_s"]

"""Who sees which alerts: an owner / member / outsider trio (and an org admin) against an org-wide
rule and the nlp team's rule, each with alerts on an nlp run, a vision run and idle GPUs of each
team. A member sees only their teams' subjects, even through an org-wide rule; a rule's
destinations (webhook URL, secret, email addresses) are null to everyone who may not change it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState
from phantomhub.telemetry.models import Run
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

SLACK = "https://hooks.slack.com/services/T000/B000/credential"


@dataclass
class World:
    org_rule: AlertRule
    nlp_rule: AlertRule
    states: dict[str, AlertState]
    deliveries: dict[str, AlertDelivery]


def _person(name: str, *, team_of: Tenant | None = None, role: str = Role.MEMBER, org_admin: bool = False) -> APIClient:
    user = User.objects.create_user(name, password="pw")
    if team_of is not None:
        Membership.objects.create(user=user, team=team_of.project.team, role=role)
    if org_admin:
        Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def world(owner: Tenant, outsider: Tenant) -> World:
    nlp_run = Run.objects.get(pk=owner.create_run(name="nlp secret run"))
    vision_run = Run.objects.get(pk=outsider.create_run(name="vision run"))
    org_rule = AlertRule.objects.create(name="org waste", kind="waste_rate", params={"share": 0.5}, webhook_url=SLACK,
                                        email_to=["oncall@example.com"])  # fmt: skip
    nlp_rule = AlertRule.objects.create(name="nlp waste", kind="waste_rate", scope="team", team=owner.project.team,
                                        params={"share": 0.5}, webhook_url=f"{SLACK}/nlp",
                                        email_to=["nlp@example.com"])  # fmt: skip

    def state(rule: AlertRule, subject: str, run: Run | None, team: str | None = None) -> AlertState:
        evidence: dict[str, Any] = {"figure": "waste_share"} | ({"team": team} if team else {})
        return AlertState.objects.create(rule=rule, subject=subject, subject_label=subject, run=run, state="firing",
                                         usd_per_hour=12.5, evidence=evidence)  # fmt: skip

    states = {
        "org-nlp": state(org_rule, f"run:{nlp_run.pk}", nlp_run),
        "org-vision": state(org_rule, f"run:{vision_run.pk}", vision_run),
        "nlp-nlp": state(nlp_rule, f"run:{nlp_run.pk}", nlp_run),
        "org-gpu-nlp": state(org_rule, "gpu:n1:0", None, team="nlp"),
        "org-gpu-vision": state(org_rule, "gpu:n2:0", None, team="vision"),
        "org-gpu-nobody": state(org_rule, "gpu:n3:0", None),
    }

    def sent(rule: AlertRule, alert: AlertState | None, event: str = "firing") -> AlertDelivery:
        return AlertDelivery.objects.create(rule=rule, alert=alert, event=event, channel="webhook", target=rule.webhook_url,
                                            body="{}", status="sent")  # fmt: skip

    deliveries = {name: sent(s.rule, s) for name, s in states.items()}
    deliveries["org-test"] = sent(org_rule, None, "test")
    deliveries["org-pruned"] = sent(org_rule, None)  # its alert was pruned: whose run, nobody can say
    deliveries["nlp-pruned"] = sent(nlp_rule, None)
    return World(org_rule, nlp_rule, states, deliveries)


def _alerts(client: APIClient, world: World) -> set[str]:
    names = {s.pk: name for name, s in world.states.items()}
    response = client.get("/api/v1/alerts/alerts?limit=500")
    assert response.status_code == 200
    return {names[a["id"]] for a in response.json()["alerts"]}


def _deliveries(client: APIClient, world: World) -> dict[str, Any]:
    names = {d.pk: name for name, d in world.deliveries.items()}
    return {names[d["id"]]: d["target"] for d in client.get("/api/v1/alerts/deliveries?limit=500").json()["deliveries"]}


def _rules(client: APIClient) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in client.get("/api/v1/alerts/rules").json()["rules"]}


def test_a_member_of_another_team_sees_only_their_teams_subjects(world: World, outsider: Tenant) -> None:
    vision = _person("vision-member", team_of=outsider)
    assert _alerts(vision, world) == {"org-vision", "org-gpu-vision", "org-gpu-nobody"}
    assert set(_deliveries(vision, world)) == {"org-vision", "org-gpu-vision", "org-gpu-nobody", "org-test"}
    rules = _rules(vision)
    assert set(rules) == {"org waste"}
    assert rules["org waste"]["firing"] == 3  # not the nlp subjects' firings
    nlp_state = world.states["org-nlp"].pk
    assert vision.patch(f"/api/v1/alerts/alerts/{nlp_state}", {"muted": True}, format="json").status_code == 404
    assert vision.get(f"/api/v1/alerts/alerts?rule={world.org_rule.pk}&state=firing").json()["alerts"] != []
    assert vision.get(f"/api/v1/alerts/rules/{world.nlp_rule.pk}").status_code == 404


def test_the_owning_teams_member_sees_its_subjects_but_no_destinations(world: World, owner: Tenant) -> None:
    member = _person("nlp-member", team_of=owner)
    assert _alerts(member, world) == {"org-nlp", "nlp-nlp", "org-gpu-nlp", "org-gpu-nobody"}
    delivered = _deliveries(member, world)
    assert set(delivered) == {"org-nlp", "nlp-nlp", "org-gpu-nlp", "org-gpu-nobody", "org-test", "nlp-pruned"}
    assert set(delivered.values()) == {None}
    for rule in _rules(member).values():
        assert (rule["webhook_url"], rule["webhook_secret"], rule["email_to"], rule["writable"]) == (None, None, None, False)


def test_a_team_admin_sees_the_destinations_of_the_rules_they_may_change(world: World, owner: Tenant) -> None:
    lead = _person("nlp-lead", team_of=owner, role=Role.ADMIN)
    rules = _rules(lead)
    assert rules["nlp waste"]["webhook_url"] == SLACK + "/nlp" and rules["nlp waste"]["email_to"] == ["nlp@example.com"]
    assert rules["nlp waste"]["webhook_secret"].startswith("whsec_")
    assert (rules["org waste"]["webhook_url"], rules["org waste"]["email_to"]) == (None, None)
    delivered = _deliveries(lead, world)
    assert delivered["nlp-nlp"] == SLACK + "/nlp" and delivered["org-nlp"] is None


def test_someone_in_no_team_sees_org_rules_without_destinations_and_no_runs(world: World) -> None:
    nobody = _person("no-team")
    assert _alerts(nobody, world) == {"org-gpu-nobody"}
    assert set(_deliveries(nobody, world)) == {"org-gpu-nobody", "org-test"}
    assert _rules(nobody)["org waste"]["webhook_url"] is None


def test_an_org_admin_sees_everything(world: World) -> None:
    admin = _person("admin", org_admin=True)
    assert _alerts(admin, world) == set(world.states)
    delivered = _deliveries(admin, world)
    assert set(delivered) == set(world.deliveries) and delivered["org-pruned"] == SLACK
    assert _rules(admin)["org waste"]["email_to"] == ["oncall@example.com"]

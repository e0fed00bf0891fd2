"""Attribution rules: ordered, first match wins, previewed against the last day before saving;
unmatched time stays, as unattributed."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile, Project, Team
from phantomhub.fleet.attribution import Rule, owner_attribute
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import AttributionRule, FleetDay
from tests.fleet.test_ground_truth import post_hour

pytestmark = pytest.mark.django_db

POD = {"kind": "k8s", "namespace": "ml-team", "pod": "train-abc", "labels": {"team": "nlp"}}
JOB = {"kind": "slurm", "job_id": "1", "account": "vision", "partition": "gpu", "user": "alice"}


def test_the_first_matching_rule_wins() -> None:
    rules = [
        Rule("k8s_namespace", "", "ml-*", 1, None),
        Rule("k8s_label", "team", "nlp", 2, None),
        Rule("unix_user", "", "alice", 3, 30),
    ]
    assert owner_attribute(POD, rules) == (1, None, 0)
    assert owner_attribute(POD, rules[1:]) == (2, None, 0)
    assert owner_attribute(JOB, rules) == (3, 30, 2)
    assert owner_attribute({"kind": "user", "user": "bob"}, rules) == (None, None, None)


def save_rules(admin: APIClient, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """PUT the rules (202 with a queued job), run the job as the worker would once the save
    commits, and return the job as the API shows it."""
    from phantomhub.fleet.services import attribution_job_run

    response = admin.put("/api/v1/fleet/rules", {"rules": rules}, format="json")
    assert response.status_code == 202, response.content
    job = response.json()["job"]
    assert job["status"] == "queued"
    attribution_job_run(job_id=job["id"])
    answer = admin.get(f"/api/v1/fleet/rules/jobs/{job['id']}")
    assert answer.status_code == 200, answer.content
    return dict(answer.json())


@pytest.fixture
def admin(db: None) -> APIClient:
    user = User.objects.create_user("root", password="pw")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_preview_shows_the_mapping_and_saves_nothing(
    admin: APIClient, node_client: Any, h100_price: Any, teams: dict[str, Team]
) -> None:
    post_hour(node_client)
    fleet_derive_pending()
    body = {
        "rules": [
            {"match": "slurm_account", "pattern": "vis*", "team": "vision"},
            {"match": "k8s_namespace", "pattern": "ml-team", "project": "llm-pretrain"},
        ]
    }
    response = admin.post("/api/v1/fleet/rules/preview", body, format="json")
    assert response.status_code == 200, response.content
    preview = response.json()
    assert preview["day"] == "2026-09-21"
    mapped = {h["holder"]: (h["team"], h["project"], h["rule"], h["usd"]) for h in preview["holders"]}
    assert mapped == {
        "run llm-pretrain/r-1": ("nlp", "llm-pretrain", None, 3.6),  # a run: its own project, never a rule
        "pod ml-team/train-abc": ("nlp", "llm-pretrain", 1, 3.6),  # the project's team
        "slurm job 12345 (alice, vision)": ("vision", None, 0, 3.6),
    }
    assert not AttributionRule.objects.exists()
    assert FleetDay.objects.filter(team__slug="vision").count() == 0  # nothing moved


def test_saving_rules_re_attributes_and_unmatched_time_stays_unattributed(
    admin: APIClient, node_client: Any, h100_price: Any, teams: dict[str, Team]
) -> None:
    post_hour(node_client)
    fleet_derive_pending()
    job = save_rules(admin, [{"match": "slurm_account", "pattern": "vision", "team": "vision"}])
    assert (job["status"], job["owners_moved"]) == ("done", 1)
    cents = {}
    for row in FleetDay.objects.select_related("team"):
        key = row.team.slug if row.team else None
        cents[key] = cents.get(key, 0) + row.cost_cents
    assert cents == {"nlp": 360, "vision": 360, None: 720}  # the pod and the empty GPU: unattributed
    assert sum(cents.values()) == 1440  # never dropped
    assert admin.get("/api/v1/fleet/rules").json()["rules"] == [
        {"match": "slurm_account", "key": "", "pattern": "vision", "team": "vision", "project": None}
    ]


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"match": "hostname", "pattern": "x", "team": "nlp"}, "rules[0].match"),
        ({"match": "k8s_label", "pattern": "x", "team": "nlp"}, "rules[0].key"),
        ({"match": "unix_user", "pattern": "", "team": "nlp"}, "rules[0].pattern"),
        ({"match": "unix_user", "pattern": "bob"}, "rules[0].team"),
        ({"match": "unix_user", "pattern": "bob", "team": "nobody"}, "rules[0].team"),
        ({"match": "unix_user", "pattern": "bob", "team": "vision", "project": "llm-pretrain"}, "rules[0].project"),
        ({"match": "unix_user", "pattern": "bob", "team": "nlp", "colour": 1}, "rules[0].colour"),
        ({"match": "unix_user", "pattern": "bob", "team": ["nlp"]}, "rules[0].team"),
    ],
)
def test_a_bad_rule_is_a_400_naming_it_and_saves_nothing(admin: APIClient, teams: dict[str, Team], rule: Any, field: str) -> None:
    AttributionRule.objects.create(position=0, match="unix_user", pattern="keep", team=teams["nlp"])
    for method, url in (("put", "/api/v1/fleet/rules"), ("post", "/api/v1/fleet/rules/preview")):
        response = getattr(admin, method)(url, {"rules": [rule]}, format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"]
    assert list(AttributionRule.objects.values_list("pattern", flat=True)) == ["keep"]
    assert Project.objects.filter(slug="llm-pretrain").exists()


def test_leaderboards_show_fleet_dollars_beside_run_waste(
    admin: APIClient, node_client: Any, h100_price: Any, teams: dict[str, Team]
) -> None:
    from datetime import date

    from phantomhub.waste.models import ProjectDay

    llm = Project.objects.get(slug="llm-pretrain")
    vision_project = Project.objects.create(slug="detector", name="detector", team=teams["vision"])
    for project in (llm, vision_project):  # run figures, so that both teams have a leaderboard row
        ProjectDay.objects.create(day=date(2026, 9, 21), project=project, team=project.team, runs=1, gpu_seconds=3600, cost_usd=5)
    rules = [
        {"match": "slurm_account", "pattern": "vision", "project": "detector"},
        {"match": "k8s_label", "key": "team", "pattern": "nlp", "team": "nlp"},
    ]
    admin.put("/api/v1/fleet/rules", {"rules": rules}, format="json")
    post_hour(node_client)
    fleet_derive_pending()
    board = admin.get("/api/v1/portal/leaderboards/teams?period=2026-09").json()
    rows = {r["key"]: (r["cost_usd"], r["fleet"]) for r in board["rows"]}
    assert rows == {
        "nlp": (5.0, {"uninstrumented_usd": 3.6, "idle_held_usd": 0.0}),
        "vision": (5.0, {"uninstrumented_usd": 0.0, "idle_held_usd": 3.6}),
    }
    projects = admin.get("/api/v1/portal/leaderboards/projects?period=2026-09").json()
    assert {r["key"]: r["fleet"]["idle_held_usd"] for r in projects["rows"]} == {"llm-pretrain": 0.0, "detector": 3.6}
    csv_text = b"".join(admin.get("/api/v1/portal/leaderboards/teams.csv?period=2026-09").streaming_content).decode()
    assert csv_text.splitlines()[0].endswith("fleet_uninstrumented_usd,fleet_idle_held_usd")

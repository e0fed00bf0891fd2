"""Who sees which holders on the fleet: a member sees their teams' holders by name and the rest
summed ("other teams", "unattributed"), so the rows foot to the same total; organization admins
and finance see every holder."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role, Team
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.selectors import fleet_teams_visible, idle_held_now
from phantomhub.fleet.services import rules_replace
from tests.conftest import rows_for_the_module
from tests.fleet.conftest import (
    HOUR_START,
    NS,
    RAW_DAYS_FOR_FIXED_DATES,
    T0,
    h100_price_make,
    node_body,
    node_client_make,
    node_meta,
    teams_make,
)
from tests.fleet.test_ground_truth import OWNERS, one_per_class, post_hour, rules

pytestmark = pytest.mark.django_db

PERIOD = "2026-09-21..2026-09-21"
POD, JOB = "pod ml-team/train-abc", "slurm job 12345 (alice, vision)"
STRAY = "user mallory"  # a process no rule attributes


def person(name: str, *, team: Team | None = None, role: str = Role.MEMBER, **flags: bool) -> int:
    user = User.objects.create_user(name)
    if team is not None:
        Membership.objects.create(user=user, team=team, role=role)
    if flags:
        Profile.objects.create(user=user, **flags)
    return user.pk


@pytest.fixture(scope="module")
def people(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, int]]:
    """Two hours of one node, attributed and derived once for the module; the people who read it."""
    with rows_for_the_module(django_db_blocker), override_settings(FLEET_RAW_DAYS=RAW_DAYS_FOR_FIXED_DATES):
        teams, node_client = teams_make(), node_client_make()
        h100_price_make()
        rules_replace(rules=rules(teams))  # the pod to nlp, the Slurm job to vision
        post_hour(node_client)
        stray = [*OWNERS, {"kind": "user", "user": "mallory"}]

        def busy_stray(gpu: int, t: int) -> Any:
            return (80.0, 30 * 2**30, [(4000, 30 * 2**30, 3)]) if gpu == 3 else one_per_class(gpu, t)

        times = [T0 + 3600 * NS + (i + 1) * 15 * NS for i in range(240)]  # the next hour: GPU 3 busy, unattributed
        body = node_body(t_ns=times, activity=busy_stray, owners=stray, node=node_meta())
        response = node_client.post("/api/v1/nodes/samples", body, format="json")
        assert response.status_code == 200, response.content
        fleet_derive_pending()
        yield {
            "member": person("member", team=teams["nlp"]),
            "lead": person("lead", team=teams["nlp"], role=Role.ADMIN),
            "vision": person("vision", team=teams["vision"]),
            "finance": person("finance", is_finance=True),
            "admin": person("admin", is_org_admin=True),
        }


@pytest.fixture
def fleet(people: dict[str, int], db: None) -> dict[str, APIClient]:
    clients = {}
    for name, pk in people.items():
        clients[name] = APIClient()
        clients[name].force_authenticate(User.objects.get(pk=pk))
    return clients


def holders(client: APIClient) -> dict[str, float]:
    summary = client.get(f"/api/v1/fleet/summary?period={PERIOD}")
    assert summary.status_code == 200, summary.content
    return {h["holder"]: h["cost_usd"] for h in summary.json()["holders"]}


def csv_rows(client: APIClient, table: str) -> list[dict[str, str]]:
    response = client.get(f"/api/v1/fleet/{table}.csv?period={PERIOD}")
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


EVERY_HOLDER = {POD: 7.2, JOB: 7.2, STRAY: 3.6}
SEEN = {
    "member": {POD: 7.2, "other teams": 7.2, "unattributed": 3.6},
    "lead": {POD: 7.2, "other teams": 7.2, "unattributed": 3.6},
    "vision": {JOB: 7.2, "other teams": 7.2, "unattributed": 3.6},
    "finance": EVERY_HOLDER,
    "admin": EVERY_HOLDER,
}


@pytest.mark.parametrize("who", SEEN)
def test_each_person_sees_their_teams_holders_and_the_rest_summed(fleet: dict[str, APIClient], who: str) -> None:
    client = fleet[who]
    assert holders(client) == SEEN[who]
    assert round(sum(holders(client).values()), 2) == 18.0  # the same total for everyone
    rows = csv_rows(client, "holders")
    assert {r["holder"]: float(r["cost_usd"]) for r in rows} == SEEN[who]
    text = str(client.get(f"/api/v1/fleet/summary?period={PERIOD}").json())
    if who in ("member", "lead"):
        assert "alice" not in text and "mallory" not in text and "12345" not in text
        assert "alice" not in str(rows) and "mallory" not in str(rows)


def test_a_member_sees_their_teams_and_one_row_for_the_others(fleet: dict[str, APIClient]) -> None:
    teams = {r["team_name"]: r for r in fleet["member"].get(f"/api/v1/fleet/summary?period={PERIOD}").json()["teams"]}
    assert set(teams) == {"nlp", "unattributed", "other teams"}
    assert teams["other teams"]["idle_held_usd"] == 7.2 and teams["other teams"]["aggregated"] is True
    every = {r["team_name"] for r in fleet["finance"].get(f"/api/v1/fleet/summary?period={PERIOD}").json()["teams"]}
    assert every == {"nlp", "vision", "unattributed"}
    assert {r["team_name"] for r in csv_rows(fleet["member"], "teams")} == {"nlp", "unattributed", "other teams"}


def test_idle_held_now_names_only_the_viewers_teams_holders(fleet: dict[str, APIClient]) -> None:
    now = HOUR_START + timedelta(hours=2)
    nlp_member = User.objects.get(username="member")
    mine = idle_held_now(now=now, visible=fleet_teams_visible(nlp_member))
    assert [(r["gpu_index"], r["holder"], r["team"]) for r in mine] == [(2, "other teams", None)]
    everyone = idle_held_now(now=now, visible=fleet_teams_visible(User.objects.get(username="admin")))
    assert [(r["gpu_index"], r["holder"], r["team"]) for r in everyone] == [(2, JOB, "vision")]


def test_members_read_the_rules_of_their_teams_only(fleet: dict[str, APIClient]) -> None:
    member = fleet["member"].get("/api/v1/fleet/rules").json()
    assert [r["team"] for r in member["rules"]] == ["nlp"] and member["hidden"] == 1 and "job" not in member
    admin = fleet["admin"].get("/api/v1/fleet/rules").json()
    assert [r["team"] for r in admin["rules"]] == ["nlp", "vision"] and admin["hidden"] == 0

"""The budgets API: who sets and reads which budgets, effective months that may not overlap, and
bad input answered with a 4xx naming the field (never a 500, never a partial write)."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Project, Role, Team
from phantomhub.planning.models import Budget
from phantomhub.planning.services import MAX_BUDGET_USD
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]  # sums and JSON keys on SQLite too (make run)
URL = "/api/v1/planning/budgets"


def _client(name: str, *, team: Team | None = None, role: str = Role.MEMBER, **profile: bool) -> APIClient:
    user = User.objects.create_user(name, password="pw")
    if team is not None:
        Membership.objects.create(user=user, team=team, role=role)
    if profile:
        Profile.objects.create(user=user, **profile)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def people(owner: Tenant, outsider: Tenant) -> dict[str, APIClient]:
    nlp, vision = owner.project.team, outsider.project.team
    return {
        "member": _client("member", team=nlp),
        "lead": _client("lead", team=nlp, role=Role.ADMIN),
        "vision_lead": _client("vision-lead", team=vision, role=Role.ADMIN),
        "finance": _client("finance", is_finance=True),
        "admin": _client("admin", is_org_admin=True),
    }


def _project(**over: Any) -> dict[str, Any]:
    return {"scope": "project", "project": "llm-pretrain", "amount_usd": "5000.00", "effective_from": "2026-01", **over}


def test_finance_sets_a_team_budget_and_a_lead_sets_a_project_budget(people: dict[str, APIClient]) -> None:
    made = people["finance"].post(
        URL, {"scope": "team", "team": "nlp", "amount_usd": 20000, "effective_from": "2026-01"}, format="json"
    )
    assert made.status_code == 201, made.content
    assert made.json()["team"] == "nlp" and made.json()["effective_to"] is None
    made = people["lead"].post(URL, _project(gpu_key="H100-SXM", effective_to="2026-06"), format="json")
    assert made.status_code == 201, made.content
    budget = Budget.objects.get(pk=made.json()["id"])
    assert (budget.effective_from, budget.effective_to, budget.amount_usd) == (date(2026, 1, 1), date(2026, 6, 1), 5000)


def test_a_lead_may_not_set_the_team_budget_nor_another_teams_projects(people: dict[str, APIClient]) -> None:
    assert (
        people["lead"]
        .post(URL, {"scope": "team", "team": "nlp", "amount_usd": 1, "effective_from": "2026-01"}, format="json")
        .status_code
        == 403
    )
    assert people["vision_lead"].post(URL, _project(), format="json").status_code == 403
    assert people["member"].post(URL, _project(), format="json").status_code == 403
    assert not Budget.objects.exists()


def test_members_read_their_teams_budgets_only(people: dict[str, APIClient], outsider: Tenant) -> None:
    mine = people["admin"].post(URL, _project(), format="json").json()
    theirs = people["admin"].post(URL, _project(project="detector"), format="json").json()
    listed = [b["id"] for b in people["member"].get(URL).json()["budgets"]]
    assert listed == [mine["id"]]
    assert people["member"].get(f"{URL}/{theirs['id']}").status_code == 404
    assert people["member"].get(f"{URL}/status?month=2026-02").json()["rows"][0]["budget"]["id"] == mine["id"]
    assert len(people["member"].get(f"{URL}/status?month=2026-02").json()["rows"]) == 1
    assert {b["id"] for b in people["finance"].get(URL).json()["budgets"]} == {mine["id"], theirs["id"]}
    assert people["vision_lead"].delete(f"{URL}/{mine['id']}").status_code == 404  # not seen, so not there


def test_overlapping_months_of_the_same_target_are_refused_naming_the_field(people: dict[str, APIClient]) -> None:
    first = people["admin"].post(URL, _project(effective_to="2026-06"), format="json")
    assert first.status_code == 201
    again = people["admin"].post(URL, _project(effective_from="2026-06"), format="json")
    assert again.status_code == 409
    assert "effective_from" in again.json()["error"]["fields"] and again.json()["error"]["code"] == "overlap"
    open_ended = people["admin"].post(URL, _project(effective_from="2025-01", effective_to=None), format="json")
    assert open_ended.status_code == 409  # an open end reaches every later month
    # Adjacent months, another GPU model, and the team's own budget do not overlap.
    assert people["admin"].post(URL, _project(effective_from="2026-07"), format="json").status_code == 201
    assert people["admin"].post(URL, _project(gpu_key="H100-SXM"), format="json").status_code == 201
    assert (
        people["admin"]
        .post(URL, {"scope": "team", "team": "nlp", "amount_usd": 9, "effective_from": "2026-01"}, format="json")
        .status_code
        == 201
    )
    # Stretching the first over the second by a patch is refused the same way, and changes nothing.
    stretched = people["admin"].patch(f"{URL}/{first.json()['id']}", {"effective_to": "2026-08"}, format="json")
    assert stretched.status_code == 409 and "effective_from" in stretched.json()["error"]["fields"]
    assert Budget.objects.get(pk=first.json()["id"]).effective_to == date(2026, 6, 1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_project(amount_usd="-1"), "amount_usd"),
        (_project(amount_usd=str(MAX_BUDGET_USD + 1)), "amount_usd"),
        (_project(amount_usd="1e400"), "amount_usd"),
        (_project(amount_usd="NaN"), "amount_usd"),
        (_project(amount_usd="12.345"), "amount_usd"),
        (_project(amount_usd="lots"), "amount_usd"),
        ({k: v for k, v in _project().items() if k != "amount_usd"}, "amount_usd"),
        (_project(effective_from="2026-13"), "effective_from"),
        (_project(effective_from="1999-12"), "effective_from"),
        (_project(effective_from="soon"), "effective_from"),
        (_project(effective_to="2025-12"), "effective_to"),
        (_project(scope="org"), "scope"),
        (_project(project="nope"), "project"),
        (_project(team="nlp"), "team"),
        ({"scope": "team", "amount_usd": 1, "effective_from": "2026-01"}, "team"),
        (_project(gpu_key="x" * 129), "gpu_key"),
        (_project(note="a\x00b"), "note"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(people: dict[str, APIClient], body: dict[str, Any], field: str) -> None:
    response = people["admin"].post(URL, body, format="json")
    assert 400 <= response.status_code < 500, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not Budget.objects.exists()


def test_a_budget_body_that_is_not_an_object_is_refused(people: dict[str, APIClient]) -> None:
    response = people["admin"].post(URL, [1, 2], format="json")
    assert response.status_code == 400 and "body" in response.json()["error"]["fields"]


def test_a_budgets_target_cannot_be_patched_and_deleting_needs_the_writer(people: dict[str, APIClient]) -> None:
    made = people["lead"].post(URL, _project(), format="json").json()
    moved = people["lead"].patch(f"{URL}/{made['id']}", {"project": "detector"}, format="json")
    assert moved.status_code == 400 and "project" in moved.json()["error"]["fields"]
    assert people["lead"].patch(f"{URL}/{made['id']}", {"amount_usd": "7000"}, format="json").json()["amount_usd"] == "7000.00"
    assert people["member"].delete(f"{URL}/{made['id']}").status_code == 403
    assert people["lead"].delete(f"{URL}/{made['id']}").status_code == 204
    assert not Budget.objects.exists()


def test_a_gpu_name_is_stored_as_the_catalogs_key(people: dict[str, APIClient]) -> None:
    made = people["admin"].post(URL, _project(gpu_key="NVIDIA H100 80GB HBM3"), format="json")
    assert made.status_code == 201 and made.json()["gpu_key"] == "H100-SXM"


def test_the_status_names_a_bad_month_or_filter(people: dict[str, APIClient]) -> None:
    assert "month" in people["admin"].get(f"{URL}/status?month=2026-13").json()["error"]["fields"]
    assert "team" in people["admin"].get(f"{URL}/status?team=nope").json()["error"]["fields"]
    assert "project" in people["admin"].get(f"{URL}?project=nope").json()["error"]["fields"]


def test_a_filter_on_a_team_or_project_not_seen_answers_as_one_that_does_not_exist(people: dict[str, APIClient]) -> None:
    for url in (f"{URL}?team=vision", f"{URL}/status?team=vision", f"{URL}?project=detector"):
        nowhere = url.replace("vision", "nope").replace("detector", "nope")
        hidden, missing = people["member"].get(url), people["member"].get(nowhere)
        assert hidden.status_code == missing.status_code == 400, url  # nlp's member cannot tell vision exists
        assert set(hidden.json()["error"]["fields"]) == set(missing.json()["error"]["fields"])
    assert people["member"].get(f"{URL}?team=nlp").status_code == 200


def test_a_project_budget_follows_its_project_to_its_team_filter(people: dict[str, APIClient]) -> None:
    made = people["admin"].post(URL, _project(), format="json").json()
    assert [b["id"] for b in people["admin"].get(f"{URL}?team=nlp").json()["budgets"]] == [made["id"]]
    assert people["admin"].get(f"{URL}?team=vision").json()["budgets"] == []
    assert Project.objects.get(slug="llm-pretrain").team.slug == "nlp"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("amount_usd", True),
        ("amount_usd", {"a": 1}),
        ("team", ["nlp"]),
        ("gpu_key", 7),
        ("effective_from", 202601),
        ("scope", ["team"]),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_by_name(people: dict[str, APIClient], field: str, value: Any) -> None:
    body = {"scope": "team", "team": "nlp", "amount_usd": "10", "effective_from": "2026-01", field: value}
    response = people["admin"].post(URL, body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"], response.content

"""Who launched a run: registration stores and checks it, the runs list filters by it, the run page
shows it, and the people leaderboard sums it, only where the organisation turned it on and only
over the runs the reader may see (docs/portal-api.md, "People")."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.telemetry.models import Run
from phantomhub.waste import services, sweeps
from phantomhub.waste.models import OrgSettings, RunAnalysis
from tests.conftest import Tenant
from tests.portal.runs import client_for as _client
from tests.portal.runs import finished_run

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
PEOPLE = "/api/v1/portal/leaderboards/people"


def _run(tenant: Tenant, name: str, start: datetime, seconds: int, data_s: float, launched_by: str | None) -> str:
    return finished_run(tenant, name, start, seconds, data_s, **({"launched_by": launched_by} if launched_by is not None else {}))


@pytest.fixture
def org(owner: Tenant, outsider: Tenant) -> dict[str, Any]:
    """ann launches a run in nlp and one in vision, bob one in nlp, and one nlp run says no one."""
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    start = timezone.now().replace(microsecond=0) - timedelta(days=2)
    runs = {
        "nlp-ann": _run(owner, "nlp-ann", start, 600, 0.5, "ann"),
        "nlp-bob": _run(owner, "nlp-bob", start + timedelta(hours=1), 600, 0.02, "bob"),
        "nlp-nobody": _run(owner, "nlp-nobody", start + timedelta(hours=2), 300, 0.1, None),
        "vision-ann": _run(outsider, "vision-ann", start, 300, 0.3, "ann"),
    }
    services.run_analyze(run_id=uuid.UUID(runs["nlp-bob"]))
    sweeps.analysis_sweep(inline=True)
    users = {name: User.objects.create_user(name, password="pw-" + name) for name in ("member", "stranger", "fin", "root")}
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.VIEWER)
    Membership.objects.create(user=users["stranger"], team=outsider.project.team, role=Role.MEMBER)
    Profile.objects.create(user=users["fin"], is_finance=True)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    return {"runs": runs, "users": users, "owner": owner, "outsider": outsider}


def _switch(org: dict[str, Any], on: bool) -> None:
    response = _client(org["users"]["root"]).put("/api/v1/portal/settings", {"people_leaderboard": on}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["people_leaderboard"] is on


def _cost(*run_ids: str) -> float:
    """The runs' whole cost from their analyses: each run lies within the 7 days asked for."""
    return float(sum(RunAnalysis.objects.get(run_id=r).cost_usd for r in run_ids))


def test_registration_stores_the_launcher_and_rejects_a_bad_one(owner: Tenant) -> None:
    run_id = owner.create_run(launched_by="  ann  ")
    assert Run.objects.get(client_id=run_id).launched_by == "ann"  # blanks around it removed
    resumed = owner.client.post("/api/v1/runs", {"id": run_id, "launched_by": "bob"}, format="json")
    assert resumed.status_code == 200 and resumed.json()["launched_by"] == "bob"
    for bad in ["x" * 129, "ann\nroot", "", 7, ["ann"]]:
        response = owner.client.post("/api/v1/runs", {"id": str(uuid.uuid4()), "launched_by": bad}, format="json")
        assert response.status_code == 400, (bad, response.content)
        assert "launched_by" in response.json()["error"]["fields"]
    assert Run.objects.filter(project=owner.project).count() == 1  # nothing written by a refused body


def test_the_runs_list_filters_by_launcher_and_the_run_page_shows_it(org: dict[str, Any]) -> None:
    root, member = _client(org["users"]["root"]), _client(org["users"]["member"])

    def names(client: APIClient, **params: Any) -> set[str]:
        response = client.get("/api/v1/portal/runs", params)
        assert response.status_code == 200, response.content
        return {row["name"] for row in response.json()["results"]}

    assert names(root, launched_by="ann") == {"nlp-ann", "vision-ann"}
    assert names(member, launched_by="ann") == {"nlp-ann"}  # the filter never widens what one sees
    assert names(root, launched_by="carol") == set()
    response = root.get("/api/v1/portal/runs", {"launched_by": "x" * 129})
    assert response.status_code == 400 and "launched_by" in response.json()["error"]["fields"]
    page = member.get(f"/api/v1/portal/runs/{org['runs']['nlp-bob']}").json()
    assert page["run"]["launched_by"] == "bob"
    exported = b"".join(root.get("/api/v1/portal/runs.csv", {"launched_by": "ann"}).streaming_content).decode()
    assert {row["launched_by"] for row in csv.DictReader(io.StringIO(exported))} == {"ann"}


def test_the_people_leaderboard_is_off_by_default_and_says_so(org: dict[str, Any]) -> None:
    assert OrgSettings.get().people_leaderboard is False
    root = _client(org["users"]["root"])
    assert root.get("/api/v1/portal/settings").json()["people_leaderboard"] is False
    for path in (PEOPLE, PEOPLE + ".csv"):
        response = root.get(path, {"period": "7d"})
        assert response.status_code == 404, response.content
        assert "switched off" in response.json()["error"]["message"]
    # Off, runs still show who launched them to those who may see the runs.
    page = _client(org["users"]["member"]).get(f"/api/v1/portal/runs/{org['runs']['nlp-ann']}").json()
    assert page["run"]["launched_by"] == "ann"


def test_only_an_org_admin_turns_it_on_and_a_bad_value_names_the_field(org: dict[str, Any]) -> None:
    for who in ("member", "fin"):
        response = _client(org["users"][who]).put("/api/v1/portal/settings", {"people_leaderboard": True}, format="json")
        assert response.status_code == 403
    bad = _client(org["users"]["root"]).put("/api/v1/portal/settings", {"people_leaderboard": "perhaps"}, format="json")
    assert bad.status_code == 400 and "people_leaderboard" in bad.json()["error"]["fields"]
    assert OrgSettings.get().people_leaderboard is False


# who → {person: the runs their row sums}
SEEN = {
    "member": {"ann": ["nlp-ann"], "bob": ["nlp-bob"]},
    "stranger": {"ann": ["vision-ann"]},
    "fin": {"ann": ["nlp-ann", "vision-ann"], "bob": ["nlp-bob"]},
    "root": {"ann": ["nlp-ann", "vision-ann"], "bob": ["nlp-bob"]},
}


@pytest.mark.parametrize("who", sorted(SEEN))
def test_on_a_persons_row_sums_only_the_runs_the_reader_may_see(org: dict[str, Any], who: str) -> None:
    _switch(org, True)
    board = _client(org["users"][who]).get(PEOPLE, {"period": "7d", "sort": "cost_usd"})
    assert board.status_code == 200, board.content
    body, expected = board.json(), SEEN[who]
    assert {row["key"]: row["runs"] for row in body["rows"]} == {p: len(r) for p, r in expected.items()}
    for row in body["rows"]:
        assert row["cost_usd"] == pytest.approx(_cost(*(org["runs"][n] for n in expected[row["key"]])), abs=0.011)
    assert [row["cost_usd"] for row in body["rows"]] == sorted(row["cost_usd"] for row in body["rows"])
    assert body["count"] == len(expected)
    assert body["totals"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in body["rows"]), abs=0.011)
    sees_nobody = who in ("member", "fin", "root")  # the nlp run with no launcher
    assert body["unattributed"]["runs"] == (1 if sees_nobody else 0)
    teams = _client(org["users"][who]).get("/api/v1/portal/leaderboards/teams", {"period": "7d"}).json()
    assert body["totals"]["cost_usd"] + body["unattributed"]["cost_usd"] == pytest.approx(teams["totals"]["cost_usd"], abs=0.02)


def test_the_people_csv_has_a_line_per_person(org: dict[str, Any]) -> None:
    _switch(org, True)
    response = _client(org["users"]["fin"]).get(PEOPLE + ".csv", {"period": "7d"})
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {row["launched_by"]: int(row["runs"]) for row in rows} == {"ann": 2, "bob": 1}


def test_a_project_token_and_anonymous_callers_are_refused(org: dict[str, Any]) -> None:
    _switch(org, True)
    assert _client(None).get(PEOPLE).status_code == 401
    assert org["owner"].client.get(PEOPLE).status_code == 403
    response = _client(org["users"]["root"]).get(PEOPLE, {"sort": "started_at"})
    assert response.status_code == 400 and "sort" in response.json()["error"]["fields"]

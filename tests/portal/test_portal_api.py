"""The portal read API: the access matrix, leaderboards from analyses, finance reviews and closes."""

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
from phantomhub.portal import finance
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import services, sweeps
from phantomhub.waste.models import RunAnalysis
from tests.conftest import Tenant
from tests.portal.runs import client_for as _client
from tests.portal.runs import finished_run

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _run(tenant: Tenant, name: str, start: datetime, seconds: int, data_s: float) -> str:
    return finished_run(tenant, name, start, seconds, data_s, tags=["nightly", name])


@pytest.fixture
def org(owner: Tenant, outsider: Tenant) -> dict[str, Any]:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(days=2)
    runs = {
        "nlp-starved": _run(owner, "nlp-starved", start, 600, 0.5),
        "nlp-healthy": _run(owner, "nlp-healthy", start + timedelta(hours=1), 600, 0.02),
        "vision-a": _run(outsider, "vision-a", start, 300, 0.3),
    }
    # The healthy run first: the starved one's recoverable data stall is measured against it.
    services.run_analyze(run_id=uuid.UUID(runs["nlp-healthy"]))
    sweeps.analysis_sweep(inline=True)
    users = {
        name: User.objects.create_user(name, password="pw-" + name) for name in ("lead", "member", "stranger", "fin", "root")
    }
    Membership.objects.create(user=users["lead"], team=owner.project.team, role=Role.ADMIN)
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.VIEWER)
    Membership.objects.create(user=users["stranger"], team=outsider.project.team, role=Role.MEMBER)
    Profile.objects.create(user=users["fin"], is_finance=True)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    return {"runs": runs, "users": users, "month": f"{start:%Y-%m}", "owner": owner, "outsider": outsider}


@pytest.mark.parametrize(
    ("who", "sees"),
    [
        ("lead", {"nlp-starved", "nlp-healthy"}),
        ("member", {"nlp-starved", "nlp-healthy"}),
        ("stranger", {"vision-a"}),
        ("fin", {"nlp-starved", "nlp-healthy", "vision-a"}),
        ("root", {"nlp-starved", "nlp-healthy", "vision-a"}),
    ],
)
def test_people_see_exactly_the_runs_their_role_allows(org: dict[str, Any], who: str, sees: set[str]) -> None:
    client = _client(org["users"][who])
    names = {row["name"] for row in client.get("/api/v1/portal/runs").json()["results"]}
    assert names == sees
    for name, run_id in org["runs"].items():
        assert client.get(f"/api/v1/portal/runs/{run_id}").status_code == (200 if name in sees else 404)


def test_anonymous_callers_get_401_and_project_tokens_see_their_project(org: dict[str, Any]) -> None:
    assert _client(None).get("/api/v1/portal/runs").status_code == 401
    names = {row["name"] for row in org["outsider"].client.get("/api/v1/portal/runs").json()["results"]}
    assert names == {"vision-a"}


def test_the_team_leaderboard_ranks_by_recoverable_spend_computed_from_analyses(org: dict[str, Any]) -> None:
    board = _client(org["users"]["root"]).get("/api/v1/portal/leaderboards/teams", {"period": "7d"}).json()
    rows = board["rows"]
    expected: dict[str, Decimal] = {}
    for analysis in RunAnalysis.objects.select_related("team"):
        expected[analysis.team.slug] = expected.get(analysis.team.slug, Decimal(0)) + analysis.recoverable_usd
    assert [row["key"] for row in rows] == sorted(expected, key=lambda slug: -expected[slug])
    for row in rows:
        assert row["recoverable_usd"] == pytest.approx(float(expected[row["key"]]), abs=0.011)
        assert row["previous"] is None and row["change"] is None
    by_cost = _client(org["users"]["root"]).get("/api/v1/portal/leaderboards/teams", {"sort": "cost_usd", "period": "7d"}).json()
    assert [r["cost_usd"] for r in by_cost["rows"]] == sorted(r["cost_usd"] for r in rows)


def test_run_leaderboard_and_overview_figures_agree(org: dict[str, Any]) -> None:
    client = _client(org["users"]["fin"])
    runs = client.get("/api/v1/portal/leaderboards/runs", {"period": "7d"}).json()["rows"]
    assert runs[0]["name"] == "nlp-starved"
    overview = client.get("/api/v1/portal/overview", {"period": "7d"}).json()
    assert overview["totals"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in runs), abs=0.011)
    assert overview["totals"]["runs"] == 3
    assert sum(overview["by_category"].values()) == pytest.approx(overview["totals"]["cost_usd"], abs=0.05)
    assert overview["worst_runs"][0]["name"] == "nlp-starved"
    assert overview["by_gpu"][0]["gpu"] == "H100-SXM"


def test_runs_filter_sort_and_page(org: dict[str, Any]) -> None:
    client = _client(org["users"]["root"])

    def names(**params: Any) -> list[str]:
        response = client.get("/api/v1/portal/runs", params)
        assert response.status_code == 200, response.content
        return [row["name"] for row in response.json()["results"]]

    assert names(team="nlp", sort="-recoverable_usd") == ["nlp-starved", "nlp-healthy"]
    assert names(team="nlp", sort="recoverable_usd") == ["nlp-healthy", "nlp-starved"]
    assert names(q="vision") == ["vision-a"]
    assert names(tag="nlp-healthy") == ["nlp-healthy"]
    assert names(status="running") == []
    assert len(names(page_size=2)) == 2 and len(names(page_size=2, page=2)) == 1
    for params, field in [({"sort": "colour"}, "sort"), ({"status": "sleeping"}, "status"), ({"page": "0"}, "page"),
                          ({"from": "yesterday"}, "from")]:  # fmt: skip
        response = client.get("/api/v1/portal/runs", params)
        assert response.status_code == 400 and field in response.json()["error"]["fields"]


def test_finance_review_csv_totals_match_and_a_closed_month_stays_put(org: dict[str, Any], monkeypatch: Any) -> None:
    fin, root, member = (_client(org["users"][n]) for n in ("fin", "root", "member"))
    monkeypatch.setattr(finance, "today_utc", lambda: timezone.now().date() + timedelta(days=40))  # the month has ended
    month = org["month"]
    review = fin.get(f"/api/v1/portal/finance/{month}").json()
    assert review["closed"] is False and {r["team"] for r in review["rows"]} == {"nlp", "vision"}
    cost = sum(a.cost_usd for a in RunAnalysis.objects.all())
    assert review["totals"]["cost_usd"] == pytest.approx(float(cost), abs=0.011)
    assert review["price_entries"][0]["gpu"] == "H100-SXM"
    rows = list(csv.DictReader(io.StringIO(fin.get(f"/api/v1/portal/finance/{month}.csv").content.decode())))
    assert rows[-1]["team"] == "TOTAL" and float(rows[-1]["cost_usd"]) == pytest.approx(float(cost), abs=0.011)
    assert sum(float(r["cost_usd"]) for r in rows[:-1]) == pytest.approx(float(rows[-1]["cost_usd"]), abs=0.011)
    # Members see their own team's rows only.
    assert {r["team"] for r in member.get(f"/api/v1/portal/finance/{month}").json()["rows"]} == {"nlp"}
    assert member.post(f"/api/v1/portal/finance/{month}/close").status_code == 403
    assert fin.post(f"/api/v1/portal/finance/{month}/close").json()["closed"] is True
    assert fin.post(f"/api/v1/portal/finance/{month}/close").status_code == 409
    # Late telemetry: a new run in the closed month moves the live rollups but not the review.
    _run(org["owner"], "late", timezone.now() - timedelta(days=2, hours=-2), 300, 0.1)
    sweeps.analysis_sweep(inline=True)
    frozen = fin.get(f"/api/v1/portal/finance/{month}").json()
    assert frozen["totals"] == review["totals"] and frozen["closed_by"] == "fin"
    assert fin.post(f"/api/v1/portal/finance/{month}/reopen").status_code == 403
    reopened = root.post(f"/api/v1/portal/finance/{month}/reopen", {"reason": "late run"}, format="json").json()
    assert reopened["closed"] is False and reopened["totals"]["cost_usd"] > review["totals"]["cost_usd"]


def test_settings_are_read_by_all_and_written_by_admins(org: dict[str, Any]) -> None:
    member, root = _client(org["users"]["member"]), _client(org["users"]["root"])
    assert member.get("/api/v1/portal/settings").json()["target_mfu"] == 0.5
    assert member.put("/api/v1/portal/settings", {"target_mfu": 0.4}, format="json").status_code == 403
    bad = root.put("/api/v1/portal/settings", {"recoverability": {"idle": 2}}, format="json")
    assert bad.status_code == 400 and "recoverability.idle" in bad.json()["error"]["fields"]
    assert root.put("/api/v1/portal/settings", {"target_mfu": 0.4}, format="json").json()["target_mfu"] == 0.4
    assert len(sweeps.runs_dirty()) == 3  # every analysis is recomputed under the new target


def test_tokens_are_managed_by_team_admins_and_personal_tokens_read_as_their_owner(org: dict[str, Any]) -> None:
    lead, member = _client(org["users"]["lead"]), _client(org["users"]["member"])
    created = lead.post("/api/v1/portal/tokens", {"project": "llm-pretrain", "name": "ci"}, format="json")
    assert created.status_code == 201 and created.json()["token"].startswith("phk_")
    assert member.post("/api/v1/portal/tokens", {"project": "llm-pretrain", "name": "ci"}, format="json").status_code == 404
    assert lead.post("/api/v1/portal/tokens", {"project": "detector", "name": "ci"}, format="json").status_code == 404
    personal = member.post("/api/v1/portal/tokens", {"kind": "personal", "name": "portal"}, format="json").json()
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {personal['token']}")
    assert {r["name"] for r in reader.get("/api/v1/portal/runs").json()["results"]} == {"nlp-starved", "nlp-healthy"}
    assert reader.post("/api/v1/runs", {"id": str(uuid.uuid4())}, format="json").status_code == 403
    assert member.delete(f"/api/v1/portal/tokens/{personal['id']}").status_code == 204
    assert reader.get("/api/v1/portal/runs").status_code == 401


def test_sign_in_and_out_with_a_session(org: dict[str, Any]) -> None:
    client = APIClient()
    assert client.get("/api/v1/portal/session").json()["authenticated"] is False
    bad = client.post("/api/v1/portal/session", {"username": "lead", "password": "nope"}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_credentials"
    good = client.post("/api/v1/portal/session", {"username": "lead", "password": "pw-lead"}, format="json").json()
    assert good["user"]["teams"] == [{"slug": "nlp", "name": "nlp", "role": "admin"}]
    assert client.get("/api/v1/portal/runs").status_code == 200
    assert client.delete("/api/v1/portal/session").status_code == 204
    assert client.get("/api/v1/portal/runs").status_code == 401


def test_team_and_project_pages(org: dict[str, Any]) -> None:
    lead = _client(org["users"]["lead"])
    team = lead.get("/api/v1/portal/teams/nlp").json()
    assert team["totals"]["runs"] == 2 and team["top_runs"][0]["name"] == "nlp-starved"
    assert lead.get("/api/v1/portal/teams/vision").status_code == 404
    project = lead.get("/api/v1/portal/projects/llm-pretrain").json()
    assert project["totals"]["cost_usd"] == team["totals"]["cost_usd"]


def test_overview_days_carry_categories_and_pages_compare_with_the_previous_period(org: dict[str, Any]) -> None:
    root = _client(org["users"]["root"])
    overview = root.get("/api/v1/portal/overview", {"period": "7d"}).json()
    for day in overview["by_day"]:
        assert sum(day["categories_usd"].values()) == pytest.approx(day["cost_usd"], abs=0.05)
    team = root.get("/api/v1/portal/teams/nlp", {"period": "7d"}).json()
    # The data starts inside this period: there is no complete previous period to compare with.
    assert team["previous_totals"] is None and team["totals"]["cost_usd"] > 0
    assert team["data_from"] == (timezone.now() - timedelta(days=2)).date().isoformat()


def test_the_team_list_follows_visibility(org: dict[str, Any]) -> None:
    listed = _client(org["users"]["member"]).get("/api/v1/portal/teams").json()
    assert listed == [{"slug": "nlp", "name": "nlp", "projects": [{"slug": "llm-pretrain", "name": "llm-pretrain"}]}]
    assert {t["slug"] for t in _client(org["users"]["fin"]).get("/api/v1/portal/teams").json()} == {"nlp", "vision"}


def test_finance_lists_only_the_price_entries_that_priced_the_month(org: dict[str, Any]) -> None:
    price_set(gpu="A100-80GB", usd_per_gpu_hour=Decimal("1"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    review = _client(org["users"]["fin"]).get(f"/api/v1/portal/finance/{org['month']}").json()
    assert [(e["gpu"], e["usd_per_gpu_hour"]) for e in review["price_entries"]] == [("H100-SXM", "36.0000")]

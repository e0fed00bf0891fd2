"""Closed months are frozen: closing copies the month's figures aside, and every page reading the
month (finance, overview, leaderboards, team and project pages, their CSVs) serves them, whatever
later happens to prices; the live difference is shown beside them with who caused it."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.portal import finance
from phantomhub.portal.models import ClosedRunDay, MonthLog
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import sweeps
from phantomhub.waste.models import RunDay
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
S = 10**9


def _run(tenant: Tenant, name: str, start: datetime, seconds: int) -> str:
    run_id = tenant.create_run(
        name=name, gpu_model="H100-SXM", gpu_count=1, dtype="bf16",
        allocation_start=start.isoformat(), started_at=start.isoformat(),
    )  # fmt: skip
    t0 = int(start.timestamp()) * S
    steps = {
        "step": list(range(seconds)),
        "t_start_ns": [t0 + i * S for i in range(seconds)],
        "dur_ns": [S] * seconds,
        "data_ns": [S // 4] * seconds,
        "forward_ns": [S // 4] * seconds,
        "backward_ns": [S // 2] * seconds,
        "flops": [0.15 * 989.4e12] * seconds,
    }
    assert tenant.post_steps(run_id, {"rank": 0, "steps": steps}).status_code == 200
    event = {"id": "end", "kind": "finish", "t_ns": t0 + seconds * S, "status": "finished"}
    tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")
    return run_id


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _month_before(day: date) -> date:
    return (day.replace(day=1) - timedelta(days=1)).replace(day=1)


@pytest.fixture
def books(owner: Tenant, outsider: Tenant) -> dict[str, Any]:
    """Two runs on the 10th of last month (nlp, vision), one today; H100 at $36/GPU-hour."""
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    today = timezone.now().date()
    month = _month_before(today)
    at = datetime(month.year, month.month, 10, 9, tzinfo=UTC)
    runs = {
        "nlp": _run(owner, "nlp-a", at, 900),
        "vision": _run(outsider, "vision-a", at + timedelta(hours=2), 600),
        "now": _run(owner, "nlp-now", timezone.now().replace(microsecond=0) - timedelta(hours=2), 300),
    }
    sweeps.analysis_sweep(inline=True)
    users = {name: User.objects.create_user(name) for name in ("fin", "root", "member")}
    Profile.objects.create(user=users["fin"], is_finance=True)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.VIEWER)
    return {"runs": runs, "users": users, "month": f"{month:%Y-%m}", "start": month, "owner": owner, "outsider": outsider}


def _pages(client: APIClient, month: str, team: str, project: str) -> dict[str, Any]:
    """Every figure of the month a page or CSV shows, by where it is shown."""
    finance_page = client.get(f"/api/v1/portal/finance/{month}").json()
    overview = client.get("/api/v1/portal/overview", {"period": month}).json()
    teams = client.get("/api/v1/portal/leaderboards/teams", {"period": month}).json()
    projects = client.get("/api/v1/portal/leaderboards/projects", {"period": month}).json()
    runs = client.get("/api/v1/portal/leaderboards/runs", {"period": month}).json()
    team_page = client.get(f"/api/v1/portal/teams/{team}", {"period": month}).json()
    project_page = client.get(f"/api/v1/portal/projects/{project}", {"period": month}).json()
    finance_csv = list(csv.DictReader(io.StringIO(client.get(f"/api/v1/portal/finance/{month}.csv").content.decode())))
    board_csv = client.get("/api/v1/portal/leaderboards/projects.csv", {"period": month})
    board_rows = list(csv.DictReader(io.StringIO(b"".join(board_csv.streaming_content).decode())))
    return {
        "finance": finance_page["totals"]["cost_usd"],
        "finance_rows": {r["project"]: r["cost_usd"] for r in finance_page["rows"]},
        "finance_csv": float(finance_csv[-1]["cost_usd"]),
        "overview": overview["totals"]["cost_usd"],
        "overview_days": round(sum(d["cost_usd"] for d in overview["by_day"]), 2),
        "teams": round(sum(r["cost_usd"] for r in teams["rows"]), 2),
        "projects": {r["key"]: r["cost_usd"] for r in projects["rows"]},
        "projects_csv": {r["project"]: float(r["cost_usd"]) for r in board_rows},
        "runs": round(sum(r["cost_usd"] for r in runs["rows"]), 2),
        "team": team_page["totals"]["cost_usd"],
        "project": project_page["totals"]["cost_usd"],
        "notes": [overview["closed_month"], teams["closed_month"], team_page["closed_month"], project_page["closed_month"]],
    }


def test_a_price_change_across_a_closed_month_leaves_every_page_at_the_closed_figures(books: dict[str, Any]) -> None:
    fin, root = _client(books["users"]["fin"]), _client(books["users"]["root"])
    month, team, project = books["month"], books["owner"].project.team.slug, books["owner"].project.slug
    before = _pages(fin, month, team, project)
    assert before["notes"] == [None] * 4  # an open month says nothing
    closed = fin.post(f"/api/v1/portal/finance/{month}/close")
    assert closed.status_code == 200 and closed.json()["closed"] is True
    assert closed.json()["adjustment"]["differs"] is False
    frozen = _pages(fin, month, team, project)
    assert {k: v for k, v in frozen.items() if k != "notes"} == {k: v for k, v in before.items() if k != "notes"}
    assert all(note["differs"] is False and note["closed_by"] == "fin" for note in frozen["notes"])

    # The B200 of the issue is this H100: a new price from the 1st of the closed month.
    body = {"gpu": "H100-SXM", "usd_per_gpu_hour": "45", "effective_from": f"{books['start']}T00:00:00Z"}
    refused = root.post("/api/v1/pricing/prices", body, format="json")
    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "closed_month" and month in error["message"] and "confirm_closed" in error["fields"]
    assert PriceEntry.objects.count() == 1  # nothing written
    confirmed = root.post("/api/v1/pricing/prices?confirm_closed=1", body, format="json")
    assert confirmed.status_code == 201, confirmed.content
    sweeps.analysis_sweep(inline=True)

    after = _pages(fin, month, team, project)
    assert {k: v for k, v in after.items() if k != "notes"} == {k: v for k, v in before.items() if k != "notes"}
    live = round(
        float(sum(d.cost_usd for d in RunDay.objects.filter(day__gte=books["start"], day__lte=books["start"].replace(day=28)))), 2
    )
    assert live == pytest.approx(before["finance"] * 45 / 36, abs=0.02)  # the live rollups did move
    for note in after["notes"]:
        assert note["differs"] is True and note["difference"]["cost_usd"] > 0
        (cause,) = [c for c in note["causes"] if c["kind"] == "price"]
        assert cause["by"] == "root" and cause["after_usd_per_gpu_hour"] == "45.0000" and cause["at"]
    review = fin.get(f"/api/v1/portal/finance/{month}").json()
    adjustment = review["adjustment"]
    assert adjustment["differs"] and adjustment["as_of"]
    assert adjustment["difference"]["cost_usd"] == pytest.approx(live - before["finance"], abs=0.011)
    assert {r["project"] for r in adjustment["rows"]} == set(before["finance_rows"])
    assert [c["by"] for c in adjustment["causes"] if c["kind"] == "price"] == ["root"]
    # The closed review keeps the prices it was closed with.
    assert [e["usd_per_gpu_hour"] for e in review["price_entries"]] == ["36.0000"]


def test_editing_or_deleting_a_price_in_force_in_a_closed_month_asks_first(books: dict[str, Any]) -> None:
    fin, root = _client(books["users"]["fin"]), _client(books["users"]["root"])
    assert fin.post(f"/api/v1/portal/finance/{books['month']}/close").status_code == 200
    entry = PriceEntry.objects.get()
    refused = root.patch(f"/api/v1/pricing/prices/{entry.pk}", {"usd_per_gpu_hour": "40"}, format="json")
    assert refused.status_code == 409 and books["month"] in refused.json()["error"]["message"]
    assert root.patch(f"/api/v1/pricing/prices/{entry.pk}", {"note": "negotiated"}, format="json").status_code == 200
    confirmed = root.patch(
        f"/api/v1/pricing/prices/{entry.pk}", {"usd_per_gpu_hour": "40", "confirm_closed": True}, format="json"
    )
    assert confirmed.status_code == 200
    assert root.delete(f"/api/v1/pricing/prices/{entry.pk}").status_code == 409
    assert root.delete(f"/api/v1/pricing/prices/{entry.pk}?confirm_closed=1").status_code == 204
    # A price from now on reaches no closed month: no question asked.
    assert root.post("/api/v1/pricing/prices", {"gpu": "H100-SXM", "usd_per_gpu_hour": "30"}, format="json").status_code == 201


def test_the_current_month_and_a_month_without_spend_cannot_be_closed(books: dict[str, Any]) -> None:
    fin = _client(books["users"]["fin"])
    current = f"{timezone.now():%Y-%m}"
    refused = fin.post(f"/api/v1/portal/finance/{current}/close")
    assert refused.status_code == 400 and "not over" in refused.json()["error"]["fields"]["month"]
    empty = f"{_month_before(books['start']):%Y-%m}"
    refused = fin.post(f"/api/v1/portal/finance/{empty}/close")
    assert refused.status_code == 400 and "no spend" in refused.json()["error"]["fields"]["month"]
    future = f"{timezone.now() + timedelta(days=40):%Y-%m}"
    assert fin.post(f"/api/v1/portal/finance/{future}/close").status_code == 400
    page = fin.get(f"/api/v1/portal/finance/{current}").json()
    assert page["closable"]["ok"] is False and "not over" in page["closable"]["reason"]
    assert fin.get(f"/api/v1/portal/finance/{books['month']}").json()["closable"] == {"ok": True, "reason": None}


def test_reopening_says_why_and_is_recorded(books: dict[str, Any]) -> None:
    fin, root, member = (_client(books["users"][n]) for n in ("fin", "root", "member"))
    month = books["month"]
    closed = fin.post(f"/api/v1/portal/finance/{month}/close").json()
    assert ClosedRunDay.objects.count() == 2
    assert fin.post(f"/api/v1/portal/finance/{month}/reopen", {"reason": "late invoice"}, format="json").status_code == 403
    refused = root.post(f"/api/v1/portal/finance/{month}/reopen", {}, format="json")
    assert refused.status_code == 400 and "reason" in refused.json()["error"]["fields"]
    reopened = root.post(f"/api/v1/portal/finance/{month}/reopen", {"reason": "late invoice"}, format="json").json()
    assert reopened["closed"] is False and ClosedRunDay.objects.count() == 0
    history = reopened["history"]
    assert [(h["action"], h["by"], h["reason"]) for h in history] == [("reopen", "root", "late invoice"), ("close", "fin", "")]
    assert history[0]["totals"] == closed["totals"]
    assert MonthLog.objects.count() == 2
    # Members read the record, not the organization's totals.
    assert [h["totals"] for h in member.get(f"/api/v1/portal/finance/{month}").json()["history"]] == [None, None]


def test_a_member_sees_the_adjustment_of_their_rows_without_who(books: dict[str, Any]) -> None:
    fin, root, member = (_client(books["users"][n]) for n in ("fin", "root", "member"))
    month = books["month"]
    assert fin.post(f"/api/v1/portal/finance/{month}/close").status_code == 200
    body = {"gpu": "H100-SXM", "usd_per_gpu_hour": "45", "effective_from": f"{books['start']}T00:00:00Z", "confirm_closed": True}
    assert root.post("/api/v1/pricing/prices", body, format="json").status_code == 201
    sweeps.analysis_sweep(inline=True)
    review = member.get(f"/api/v1/portal/finance/{month}").json()
    assert {r["project"] for r in review["adjustment"]["rows"]} == {books["owner"].project.slug}
    assert [c["by"] for c in review["adjustment"]["causes"] if c["kind"] == "price"] == [None]


def test_late_telemetry_moves_live_figures_only_and_is_named(books: dict[str, Any]) -> None:
    fin = _client(books["users"]["fin"])
    month = books["month"]
    closed = fin.post(f"/api/v1/portal/finance/{month}/close").json()
    start = books["start"]
    _run(books["owner"], "nlp-late", datetime(start.year, start.month, 12, 9, tzinfo=UTC), 300)
    sweeps.analysis_sweep(inline=True)
    review = fin.get(f"/api/v1/portal/finance/{month}").json()
    assert review["totals"] == closed["totals"]
    assert {"kind": "telemetry", "runs_added": 1} in review["adjustment"]["causes"]
    overview = fin.get("/api/v1/portal/overview", {"period": month}).json()
    assert overview["totals"]["cost_usd"] == closed["totals"]["cost_usd"] and overview["totals"]["runs"] == 2


def test_the_receiver_names_only_the_closed_months_a_span_reaches(books: dict[str, Any]) -> None:
    assert _client(books["users"]["fin"]).post(f"/api/v1/portal/finance/{books['month']}/close").status_code == 200
    start = datetime.combine(books["start"], datetime.min.time(), UTC)
    reached = finance.closed_months_reached
    assert reached(None, start=start - timedelta(days=3), end=start) == []
    assert reached(None, start=start - timedelta(days=3), end=start + timedelta(seconds=1)) == [books["month"]]
    assert reached(None, start=start + timedelta(days=40), end=None) == []
    assert reached(None, start=start + timedelta(days=20), end=None) == [books["month"]]
    assert uuid.UUID(books["runs"]["nlp"])


def test_a_policy_change_moves_live_figures_only_and_is_named_with_who(books: dict[str, Any]) -> None:
    fin, root = _client(books["users"]["fin"]), _client(books["users"]["root"])
    month = books["month"]
    closed = fin.post(f"/api/v1/portal/finance/{month}/close").json()
    assert root.put("/api/v1/portal/settings", {"target_mfu": 0.9}, format="json").status_code == 200
    sweeps.analysis_sweep(inline=True)
    review = fin.get(f"/api/v1/portal/finance/{month}").json()
    assert review["totals"] == closed["totals"]
    assert review["adjustment"]["difference"]["waste_usd"] != 0
    (policy,) = [c for c in review["adjustment"]["causes"] if c["kind"] == "policy"]
    assert policy["by"] == "root" and policy["before"] == {"target_mfu": 0.5} and policy["after"] == {"target_mfu": 0.9}


def test_only_changes_that_reprice_the_month_are_named_as_causes() -> None:
    from phantomhub.pricing.models import PriceAudit

    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    entry = {"gpu": "B200", "usd_per_gpu_hour": "14.2400", "effective_from": "2026-01-01T00:00:00+00:00", "effective_to": None}

    def reaches(action: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
        return finance._audit_reaches(PriceAudit(action=action, before=before, after=after), start, end)

    assert reaches("update", entry, entry | {"usd_per_gpu_hour": "15.0000"})
    assert not reaches("update", entry, entry | {"note": "contract"})
    assert not reaches("update", entry, entry | {"effective_to": "2026-12-15T00:00:00+00:00"})  # ends after the month
    assert reaches("update", entry, entry | {"effective_to": "2026-11-15T00:00:00+00:00"})
    assert not reaches("close", entry, entry | {"effective_to": "2026-11-15T00:00:00+00:00"})  # its create says it
    assert reaches("create", None, entry | {"effective_from": "2026-11-20T00:00:00+00:00"})
    assert not reaches("create", None, entry | {"effective_from": "2026-12-01T00:00:00+00:00"})
    assert reaches("delete", entry, None)

"""Lost work in dollars on the portal's pages: a job's rework, restarts and checkpoints
(docs/waste-model.md, section 13), summed from the same run-days and project-days as every other
figure, so the leaderboards, the overview, team and project pages, the runs list, finance and
every CSV say the same $0.34 for the worked example's three attempts; a closed month keeps the
lost dollars it was closed with, and a month closed before they were priced reads 0."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.portal import finance
from phantomhub.portal.models import ClosedMonth, ClosedProjectDay, ClosedRunDay, MonthLog
from phantomhub.pricing.services import price_set
from phantomhub.waste import services, sweeps
from phantomhub.waste.models import ProjectDay, RunDay
from phantomhub.waste.rollups import rollups_rebuild
from tests.conftest import Tenant
from tests.waste.test_analysis_service import T0, price_36  # noqa: F401
from tests.waste.test_job_analysis import KEY, three_attempts

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
MONTH = f"{T0:%Y-%m}"  # 2026-09
DAYS = {"from": "2026-09-01", "to": "2026-09-30"}
LOST = 0.34  # the worked example's: $0.06 + $0.17 + $0.11


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _csv(response: Any) -> tuple[list[str], list[dict[str, str]]]:
    assert response.status_code == 200, response.content[:300] if hasattr(response, "content") else response
    body = (b"".join(response.streaming_content) if response.streaming else response.content).decode()
    reader = csv.DictReader(io.StringIO(body))
    return list(reader.fieldnames or []), list(reader)


def _right_after_recoverable(header: list[str], prefix: str = "") -> None:
    assert header.index(f"{prefix}lost_usd") == header.index(f"{prefix}recoverable_usd") + 1


@pytest.fixture
def job(owner: Tenant, price_36: None, monkeypatch: Any) -> dict[str, Any]:  # noqa: F811
    """The worked example's job (three attempts, one H100 at $36 per GPU-hour: a cent a second)
    analysed and rolled up, and who reads it."""
    monkeypatch.setattr(finance, "today_utc", lambda: date(2026, 12, 5))  # September is over
    runs = three_attempts(owner)
    for run in runs:
        assert services.run_analyze(run_id=uuid.UUID(run)) is not None
    rollups_rebuild(days=[T0.date()])
    assert ProjectDay.objects.get(day=T0.date()).lost_usd == Decimal("0.34")
    users = {name: User.objects.create_user(name) for name in ("root", "member")}
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.VIEWER)
    return {"runs": runs, "root": _client(users["root"]), "member": _client(users["member"]), "owner": owner}


def _everywhere(client: APIClient, runs: list[str]) -> dict[str, Any]:
    """The month's lost dollars wherever a page or CSV shows them."""
    period = {"period": MONTH}
    boards = {kind: client.get(f"/api/v1/portal/leaderboards/{kind}", period).json() for kind in ("teams", "projects", "runs")}
    review = client.get(f"/api/v1/portal/finance/{MONTH}").json()
    overview = client.get("/api/v1/portal/overview", period).json()
    team = client.get("/api/v1/portal/teams/nlp", period).json()
    project = client.get("/api/v1/portal/projects/llm-pretrain", period).json()
    listed = client.get("/api/v1/portal/runs", DAYS).json()
    header, finance_lines = _csv(client.get(f"/api/v1/portal/finance/{MONTH}.csv"))
    _right_after_recoverable(header)
    out: dict[str, Any] = {
        "finance_total": review["totals"]["lost_usd"],
        "finance_rows": {r["project"]: r["lost_usd"] for r in review["rows"]},
        "finance_csv": {line["team"]: Decimal(line["lost_usd"]) for line in finance_lines},
        "overview": overview["totals"]["lost_usd"],
        "overview_days": round(sum(d["lost_usd"] for d in overview["by_day"]), 2),
        "overview_gpus": round(sum(g["lost_usd"] for g in overview["by_gpu"]), 2),
        "worst_runs": round(sum(r["lost_usd"] for r in overview["worst_runs"]), 2),
        "team": team["totals"]["lost_usd"],
        "team_projects": {p["key"]: p["lost_usd"] for p in team["projects"]},
        "project": project["totals"]["lost_usd"],
        "project_runs": {r["key"]: r["lost_usd"] for r in project["top_runs"]},
        "list_period_total": listed["totals"]["period_lost_usd"],
        "list_period": {r["id"]: r["period_lost_usd"] for r in listed["results"]},
    }
    for kind, board in boards.items():
        out[f"{kind}_total"] = board["totals"]["lost_usd"]
        out[kind] = {r["key"]: r["lost_usd"] for r in board["rows"]}
        header, lines = _csv(client.get(f"/api/v1/portal/leaderboards/{kind}.csv", period))
        _right_after_recoverable(header)
        key = {"teams": "team", "projects": "project", "runs": "run_id"}[kind]
        out[f"{kind}_csv"] = {line[key]: Decimal(line["lost_usd"]) for line in lines}
    header, lines = _csv(client.get("/api/v1/portal/runs.csv", DAYS))
    _right_after_recoverable(header)
    _right_after_recoverable(header, "period_")
    out["list_csv_period"] = {line["id"]: Decimal(line["period_lost_usd"]) for line in lines}
    return out


def _expected(runs: list[str], total: float, per_run: list[float]) -> dict[str, Any]:
    cents = Decimal(str(total)).quantize(Decimal("0.01"))
    by_run = dict(zip(runs, per_run, strict=True))
    return {
        "finance_total": total,
        "finance_rows": {"llm-pretrain": total},
        "finance_csv": {"nlp": cents, "TOTAL": cents},
        "overview": total,
        "overview_days": total,
        "overview_gpus": total,
        "worst_runs": total,
        "team": total,
        "team_projects": {"llm-pretrain": total},
        "project": total,
        "project_runs": by_run,
        "list_period_total": total,
        "list_period": by_run,
        "teams_total": total,
        "teams": {"nlp": total},
        "teams_csv": {"nlp": cents},
        "projects_total": total,
        "projects": {"llm-pretrain": total},
        "projects_csv": {"llm-pretrain": cents},
        "runs_total": total,
        "runs": by_run,
        "runs_csv": {r: Decimal(str(v)).quantize(Decimal("0.01")) for r, v in by_run.items()},
        "list_csv_period": {r: Decimal(str(v)).quantize(Decimal("0.01")) for r, v in by_run.items()},
    }


def test_the_worked_examples_job_loses_the_same_34_cents_on_every_page_and_csv(job: dict[str, Any]) -> None:
    root, runs = job["root"], job["runs"]
    assert _everywhere(root, runs) == _expected(runs, LOST, [0.06, 0.17, 0.11])
    # The runs list's whole-run figures (the analyses') and its totals say the same.
    listed = root.get("/api/v1/portal/runs", {"q": "a"}).json()
    assert {r["id"]: r["lost_usd"] for r in listed["results"]} == dict(zip(runs, [0.06, 0.17, 0.11], strict=True))
    assert listed["totals"]["lost_usd"] == LOST
    _, lines = _csv(root.get("/api/v1/portal/runs.csv"))
    assert sum(Decimal(line["lost_usd"]) for line in lines) == Decimal("0.34")
    # The lost dollars are part of the cost (idle), not beside it, and none of the recoverable.
    review = root.get(f"/api/v1/portal/finance/{MONTH}").json()
    assert review["totals"]["cost_usd"] == 0.98 and review["totals"]["categories_usd"]["idle"] >= LOST
    # A member of the team sees the same (their rows are the whole month's).
    assert job["member"].get(f"/api/v1/portal/finance/{MONTH}").json()["totals"]["lost_usd"] == LOST
    # Two attempts side by side carry their lost dollars.
    compared = root.get("/api/v1/portal/compare", {"runs": ",".join(runs[:2])}).json()
    assert [side["run"]["lost_usd"] for side in compared["runs"]] == [0.06, 0.17]
    assert [side["analysis"]["lost_usd"] for side in compared["runs"]] == [0.06, 0.17]
    assert KEY  # the job of tests/waste/test_job_analysis.py


def test_lists_and_boards_sort_by_lost_dollars_where_they_sort_by_recoverable(job: dict[str, Any]) -> None:
    root = job["root"]
    a1, a2, a3 = job["runs"]
    assert [r["id"] for r in root.get("/api/v1/portal/runs", {"sort": "-lost_usd"}).json()["results"]] == [a2, a3, a1]
    assert [r["id"] for r in root.get("/api/v1/portal/runs", {"sort": "lost_usd"}).json()["results"]] == [a1, a3, a2]
    by_period = root.get("/api/v1/portal/runs", {**DAYS, "sort": "-period_lost_usd"}).json()["results"]
    assert [r["id"] for r in by_period] == [a2, a3, a1]
    refused = root.get("/api/v1/portal/runs", {"sort": "-period_lost_usd"})
    assert refused.status_code == 400 and "sort" in refused.json()["error"]["fields"]
    board = root.get("/api/v1/portal/leaderboards/runs", {"period": MONTH, "sort": "-lost_usd"}).json()
    assert [r["key"] for r in board["rows"]] == [a2, a3, a1]
    # Cut in the database: the first page of one row is the largest.
    top = root.get("/api/v1/portal/leaderboards/runs", {"period": MONTH, "sort": "-lost_usd", "page_size": 1}).json()
    assert [r["key"] for r in top["rows"]] == [a2] and top["totals"]["lost_usd"] == LOST
    for kind in ("teams", "projects"):
        answer = root.get(f"/api/v1/portal/leaderboards/{kind}", {"period": MONTH, "sort": "lost_usd"})
        assert answer.status_code == 200 and answer.json()["rows"][0]["lost_usd"] == LOST
    _, lines = _csv(root.get("/api/v1/portal/runs.csv", {"sort": "-lost_usd"}))
    assert [line["id"] for line in lines] == [a2, a3, a1]


def test_a_closed_month_keeps_its_lost_dollars_when_a_later_analysis_changes_the_live_ones(job: dict[str, Any]) -> None:
    root, runs = job["root"], job["runs"]
    closed = root.post(f"/api/v1/portal/finance/{MONTH}/close")
    assert closed.status_code == 200, closed.content
    assert closed.json()["totals"]["lost_usd"] == LOST
    assert ClosedMonth.objects.get().snapshot["totals"]["lost_usd"] == LOST
    assert sum(d.lost_usd for d in ClosedRunDay.objects.all()) == Decimal("0.34")
    assert MonthLog.objects.get().totals["lost_usd"] == LOST
    # The price doubles back to before the month: every attempt is analysed again, live lost
    # work doubles (a cent a second becomes two), the closed month's does not move.
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("72"), effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    sweeps.analysis_sweep(inline=True)
    rollups_rebuild(days=[T0.date()])
    assert sum(d.lost_usd for d in RunDay.objects.filter(run_id__in=runs)) == Decimal("0.68")
    assert ProjectDay.objects.get(day=T0.date()).lost_usd == Decimal("0.68")
    assert _everywhere(root, runs) == _expected(runs, LOST, [0.06, 0.17, 0.11])
    # Beside the frozen figures, the live ones and the difference.
    review = root.get(f"/api/v1/portal/finance/{MONTH}").json()
    assert review["adjustment"]["live_totals"]["lost_usd"] == 0.68
    assert review["adjustment"]["difference"]["lost_usd"] == LOST
    (row,) = review["adjustment"]["rows"]
    assert row["difference"]["lost_usd"] == LOST
    note = root.get("/api/v1/portal/leaderboards/projects", {"period": MONTH}).json()["closed_month"]
    assert (note["frozen"]["lost_usd"], note["live"]["lost_usd"], note["difference"]["lost_usd"]) == (LOST, 0.68, LOST)
    # Reopened, the month follows the live rollups again.
    reopened = root.post(f"/api/v1/portal/finance/{MONTH}/reopen", {"reason": "repriced"}, format="json").json()
    assert reopened["totals"]["lost_usd"] == 0.68
    assert reopened["history"][0]["totals"]["lost_usd"] == LOST  # the totals it was closed with
    assert _everywhere(root, runs) == _expected(runs, 0.68, [0.12, 0.34, 0.22])


def test_a_month_closed_before_lost_work_was_priced_reads_0_and_never_fails(job: dict[str, Any]) -> None:
    root, member = job["root"], job["member"]
    assert root.post(f"/api/v1/portal/finance/{MONTH}/close").status_code == 200
    # As a close by older code left it: a snapshot without lost_usd, frozen days without it
    # (migration 0004 gives them 0), a log's totals without it.
    closed = ClosedMonth.objects.get()
    snapshot = closed.snapshot
    for row in snapshot["rows"]:
        del row["lost_usd"]
    del snapshot["totals"]["lost_usd"]
    closed.snapshot = snapshot
    closed.save(update_fields=["snapshot"])
    ClosedRunDay.objects.update(lost_usd=0)
    ClosedProjectDay.objects.update(lost_usd=0)
    log = MonthLog.objects.get()
    log.totals = {k: v for k, v in log.totals.items() if k != "lost_usd"}
    log.save(update_fields=["totals"])

    review = root.get(f"/api/v1/portal/finance/{MONTH}").json()
    assert review["totals"]["lost_usd"] == 0 and [r["lost_usd"] for r in review["rows"]] == [0]
    assert review["history"][0]["totals"]["lost_usd"] == 0
    assert review["adjustment"]["difference"]["lost_usd"] == LOST  # the live rollups have it
    _, lines = _csv(root.get(f"/api/v1/portal/finance/{MONTH}.csv"))
    assert [line["lost_usd"] for line in lines] == ["0.00", "0.00"]
    assert member.get(f"/api/v1/portal/finance/{MONTH}").json()["totals"]["lost_usd"] == 0
    for kind in ("teams", "projects", "runs"):
        assert root.get(f"/api/v1/portal/leaderboards/{kind}", {"period": MONTH}).json()["totals"]["lost_usd"] == 0
    assert root.get("/api/v1/portal/runs", DAYS).json()["totals"]["period_lost_usd"] == 0

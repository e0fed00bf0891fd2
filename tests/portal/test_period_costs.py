"""Period costs everywhere: a list filtered by a period shows each run's cost within it (from the
run-days finance sums) beside its whole cost, with totals over every matching run, and nothing is
cut without saying so. A run across a month boundary costs the same October dollars in the runs
list, its CSV and the project page; a month of 109 runs says 109 on the runs board and its CSV; the
runs list's total foots to finance to the cent under any filter."""

from __future__ import annotations

import csv
import io
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.accounts.services import project_get_or_create, team_get_or_create
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.telemetry.models import Run
from phantomhub.waste import sweeps
from phantomhub.waste.core.model import CATEGORIES
from phantomhub.waste.models import RunAnalysis, RunDay
from phantomhub.waste.rollups import rollups_rebuild
from tests.conftest import Tenant, rows_for_the_module, tenant_for
from tests.portal.test_consistent_figures import _run

OCTOBER = {"from": "2026-10-01", "to": "2026-10-31"}
NOVEMBER = {"from": "2026-11-01", "to": "2026-11-30"}
STORED = 108  # with the crossing run, October has 109 runs


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _stored_runs(count: int, rng: random.Random) -> None:
    """`count` runs billed in October as analysis stores them (a run, its analysis, its run-days,
    rolled up): over three teams, four projects, two GPUs and three statuses; some start in
    September and some run into November, so their October cost is part of their whole cost."""
    projects = []
    for team_slug, slugs in (("nlp", ["llm-finetune", "asr"]), ("vision", ["det"]), ("rl", ["agents"])):
        team = team_get_or_create(slug=team_slug)
        projects += [project_get_or_create(team=team, slug=slug) for slug in slugs]
    days: list[RunDay] = []
    for i in range(count):
        project = projects[i % len(projects)]
        gpu = "H100-SXM" if i % 3 else "A100-80GB"
        first = date(2026, 10, 1) + timedelta(days=rng.randint(-2, 30))
        spans = [first + timedelta(days=k) for k in range(rng.randint(1, 3))]
        spans = [d for d in spans if d.month == 10] or [date(2026, 10, 1)]  # billed in October
        if i % 17 == 0:
            spans.append(date(2026, 11, 1))  # and into November
        if i % 19 == 0:
            spans.insert(0, date(2026, 9, 30))  # from September
        start = datetime.combine(spans[0], datetime.min.time(), tzinfo=UTC) + timedelta(hours=rng.randint(0, 20))
        run = Run.objects.create(
            id=uuid.uuid4(), project=project, name=f"stored-{i:03d}", status=("finished", "failed", "crashed")[i % 3],
            gpu_model=gpu, gpu_count=8, allocation_start=start, started_at=start, last_seen_at=start,
            finished_at=start + timedelta(hours=24 * len(spans)),
        )  # fmt: skip
        whole = {"cost": Decimal(0), "waste": Decimal(0), "recoverable": Decimal(0), "lost": Decimal(0), "seconds": 0.0}
        for day in spans:
            cats = {name: Decimal(str(round(rng.uniform(0, 30), 2))) for name in CATEGORIES}
            cost = sum(cats.values(), Decimal(0))
            waste = cost - cats["useful_compute"]
            recoverable = (waste * Decimal(str(round(rng.uniform(0, 1), 2)))).quantize(Decimal("0.01"))
            lost = (cats["idle"] * (i % 5) / 4).quantize(Decimal("0.01"))  # a job's lost work: part of idle
            seconds = rng.uniform(1_000, 100_000)
            days.append(
                RunDay(run=run, day=day, project=project, team_id=project.team_id, gpu_key=gpu, gpu_seconds=seconds,
                       cost_usd=cost, categories_usd={k: float(v) for k, v in cats.items()}, waste_usd=waste,
                       recoverable_usd=recoverable, lost_usd=lost, mfu_gpu_seconds=seconds * 0.3, mfu_known_gpu_seconds=seconds)
            )  # fmt: skip
            for key, value in (("cost", cost), ("waste", waste), ("recoverable", recoverable), ("lost", lost)):
                whole[key] += value
            whole["seconds"] += seconds
        RunAnalysis.objects.create(
            run=run, project=project, team_id=project.team_id, analysed_seq=run.ingest_seq, complete=True,
            analysed_at=start, gpu_key=gpu, gpu_hours=whole["seconds"] / 3600, cost_usd=whole["cost"],
            waste_usd=whole["waste"], recoverable_usd=whole["recoverable"],
            waste_share=float(whole["waste"] / whole["cost"]) if whole["cost"] else 0.0, mfu=0.3,
            lost={"usd": float(whole["lost"])},
        )  # fmt: skip
    RunDay.objects.bulk_create(days)
    rollups_rebuild(days={d.day for d in days})


@pytest.fixture(scope="module")
def october_rows(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """One real run across the end of October (ingested and analysed: 20 minutes on one H100 at
    $36 per GPU-hour, ten of them in October), and 108 stored runs billed in October; made once
    for the module."""
    with rows_for_the_module(django_db_blocker):
        PriceEntry.objects.all().delete()
        price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
        crossing = _run(tenant_for("nlp", "llm-pretrain"), "crossing", datetime(2026, 10, 31, 23, 50, tzinfo=UTC), 1200)
        sweeps.analysis_sweep(inline=True)
        _stored_runs(STORED, random.Random(29))
        root = User.objects.create_user("root", password="pw")
        Profile.objects.create(user=root, is_org_admin=True)
        yield {"crossing": crossing, "root": root.pk}


@pytest.fixture
def october(october_rows: dict[str, Any], db: None) -> dict[str, Any]:
    return {**october_rows, "root": _client(User.objects.get(pk=october_rows["root"]))}


def _csv(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode() if response.streaming else response.content.decode()
    return list(csv.DictReader(io.StringIO(body)))


def _cents(values: list[Any]) -> Decimal:
    return sum((Decimal(str(v)) for v in values if v not in (None, "")), Decimal(0))


def _all_rows(client: APIClient, params: dict[str, str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    page = 1
    while True:
        answer = client.get("/api/v1/portal/runs", {**params, "page": page, "page_size": 50}).json()
        rows += answer["results"]
        if page >= answer["pages"]:
            return rows
        page += 1


@pytest.mark.django_db
def test_a_run_across_a_month_boundary_costs_its_october_dollars_in_the_list_its_csv_and_the_project_page(
    october: dict[str, Any],
) -> None:
    root = october["root"]
    listed = root.get("/api/v1/portal/runs", {**OCTOBER, "q": "crossing"}).json()
    (row,) = listed["results"]
    assert listed["period"] == {"start": "2026-10-01", "end": "2026-10-31"}
    # 20 minutes at $36 per GPU-hour, ten of them in October: both costs, each under its own name.
    assert row["whole_cost_usd"] == row["cost_usd"] == 12.0
    assert row["period_cost_usd"] == 6.0
    assert row["period_gpu_hours"] == pytest.approx(1 / 6, abs=0.001)
    november = root.get("/api/v1/portal/runs", {**NOVEMBER, "q": "crossing"}).json()["results"][0]
    assert november["period_cost_usd"] + row["period_cost_usd"] == row["whole_cost_usd"]

    (line,) = _csv(root.get("/api/v1/portal/runs.csv", {**OCTOBER, "q": "crossing"}))
    assert (line["period_start"], line["period_end"]) == ("2026-10-01", "2026-10-31")
    assert Decimal(line["period_cost_usd"]) == Decimal("6.00") and Decimal(line["cost_usd"]) == Decimal("12")

    project = root.get("/api/v1/portal/projects/llm-pretrain", {"period": "2026-10"}).json()
    top = next(r for r in project["top_runs"] if r["key"] == october["crossing"])
    assert top["cost_usd"] == top["period_cost_usd"] == row["period_cost_usd"]
    assert top["whole_cost_usd"] == row["whole_cost_usd"]
    board = root.get("/api/v1/portal/leaderboards/runs", {"period": "2026-10", "page_size": 1000}).json()
    on_board = next(r for r in board["rows"] if r["key"] == october["crossing"])
    assert (on_board["period_cost_usd"], on_board["whole_cost_usd"]) == (6.0, 12.0)
    # The project page's total is the runs list's total for the project and the month.
    of_project = root.get("/api/v1/portal/runs", {**OCTOBER, "project": "llm-pretrain"}).json()
    assert of_project["totals"]["period_cost_usd"] == project["totals"]["cost_usd"]
    assert of_project["totals"]["runs"] == project["totals"]["runs"]


@pytest.mark.django_db
def test_a_month_of_109_runs_says_109_on_the_runs_board_and_its_csv_has_109_rows(october: dict[str, Any]) -> None:
    root = october["root"]
    review = root.get("/api/v1/portal/finance/2026-10").json()
    assert review["totals"]["runs"] == 109
    board = root.get("/api/v1/portal/leaderboards/runs", {"period": "2026-10"}).json()
    assert (board["count"], len(board["rows"]), board["page_size"], board["pages"]) == (109, 100, 100, 2)
    rest = root.get("/api/v1/portal/leaderboards/runs", {"period": "2026-10", "page": 2}).json()
    assert len(rest["rows"]) == 9
    assert not {r["key"] for r in board["rows"]} & {r["key"] for r in rest["rows"]}
    everything = root.get("/api/v1/portal/leaderboards/runs", {"period": "2026-10", "page_size": 1000}).json()
    assert len(everything["rows"]) == everything["count"] == 109 and everything["pages"] == 1
    assert [r["key"] for r in everything["rows"]] == [r["key"] for r in board["rows"] + rest["rows"]]
    # The board's totals are every row's, and finance's, to the cent.
    assert board["totals"]["runs"] == 109
    assert review["totals"]["lost_usd"] > 0
    for key in ("cost_usd", "lost_usd"):
        assert board["totals"][key] == review["totals"][key]
        assert _cents([r[key] for r in everything["rows"]]) == Decimal(str(review["totals"][key]))
    lines = _csv(root.get("/api/v1/portal/leaderboards/runs.csv", {"period": "2026-10"}))
    assert len(lines) == 109
    for key in ("cost_usd", "lost_usd"):
        assert _cents([line[key] for line in lines]) == Decimal(str(review["totals"][key]))
    assert {line["run_id"] for line in lines} == {r["key"] for r in everything["rows"]}
    crossing = next(line for line in lines if line["run_id"] == october["crossing"])
    assert (Decimal(crossing["cost_usd"]), Decimal(crossing["whole_cost_usd"])) == (Decimal(6), Decimal(12))
    # The runs list says the same 109, over pages, and its CSV has every one of them.
    listed = root.get("/api/v1/portal/runs", OCTOBER).json()
    assert (listed["count"], listed["pages"], len(listed["results"])) == (109, 3, 50)
    assert len(_csv(root.get("/api/v1/portal/runs.csv", OCTOBER))) == 109
    # Teams and projects boards count their rows and total the same month too.
    teams = root.get("/api/v1/portal/leaderboards/teams", {"period": "2026-10"}).json()
    assert teams["count"] == len(teams["rows"]) == 3
    assert teams["totals"]["cost_usd"] == review["totals"]["cost_usd"] and teams["totals"]["runs"] == 109
    assert teams["totals"]["lost_usd"] == review["totals"]["lost_usd"]
    assert _cents([r["lost_usd"] for r in teams["rows"]]) == Decimal(str(review["totals"]["lost_usd"]))


FILTERS = [
    {},
    {"team": "nlp"},
    {"team": "vision"},
    {"project": "llm-finetune"},
    {"project": "llm-pretrain"},
    {"gpu": "A100-80GB"},
    {"status": "failed"},
    {"q": "stored-01"},
    {"team": "rl", "status": "crashed"},
]


def _board_row_matches(row: dict[str, Any], filters: dict[str, str], runs: dict[str, Run]) -> bool:
    run = runs[row["key"]]
    return (
        filters.get("team", row["team"]) == row["team"]
        and filters.get("project", row["project"]) == row["project"]
        and filters.get("gpu", run.gpu_model) == run.gpu_model
        and filters.get("status", row["status"]) == row["status"]
        and filters.get("q", "") in row["name"]
    )


@pytest.mark.django_db
@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "none")
def test_the_runs_list_foots_to_finance_and_the_runs_board_to_the_cent_under_any_filter(
    october: dict[str, Any], filters: dict[str, str]
) -> None:
    root = october["root"]
    listed = root.get("/api/v1/portal/runs", {**OCTOBER, **filters}).json()
    rows = _all_rows(root, {**OCTOBER, **filters})
    assert len(rows) == listed["count"] == listed["totals"]["runs"] > 0
    total = Decimal(str(listed["totals"]["period_cost_usd"]))
    # The totals row is what the rows add up to, on every page and in the CSV.
    assert _cents([r["period_cost_usd"] for r in rows]) == total
    assert _cents([r["whole_cost_usd"] for r in rows]) == Decimal(str(listed["totals"]["whole_cost_usd"]))
    assert _cents([r["period_recoverable_usd"] for r in rows]) == Decimal(str(listed["totals"]["period_recoverable_usd"]))
    lost = Decimal(str(listed["totals"]["period_lost_usd"]))
    assert _cents([r["period_lost_usd"] for r in rows]) == lost
    assert _cents([r["lost_usd"] for r in rows]) == Decimal(str(listed["totals"]["lost_usd"]))
    lines = _csv(root.get("/api/v1/portal/runs.csv", {**OCTOBER, **filters}))
    assert len(lines) == listed["count"]
    assert _cents([line["period_cost_usd"] for line in lines]) == total
    assert _cents([line["period_lost_usd"] for line in lines]) == lost
    # The runs board over the month, its rows narrowed by the same filter, adds up to the same.
    board = root.get("/api/v1/portal/leaderboards/runs", {"period": "2026-10", "page_size": 1000}).json()
    runs = {str(r.pk): r for r in Run.objects.filter(pk__in=[r["key"] for r in board["rows"]])}
    matching = [r for r in board["rows"] if _board_row_matches(r, filters, runs)]
    assert len(matching) == listed["count"]
    assert _cents([r["cost_usd"] for r in matching]) == total
    assert _cents([r["lost_usd"] for r in matching]) == lost
    # Finance's rows of the team or project (or all of them) foot to it as well.
    if set(filters) <= {"team", "project"}:
        review = root.get("/api/v1/portal/finance/2026-10").json()
        chosen = [r for r in review["rows"] if all(r[k] == v for k, v in filters.items())]
        assert _cents([r["cost_usd"] for r in chosen]) == total
        assert _cents([r["lost_usd"] for r in chosen]) == lost
        if not filters:
            assert listed["totals"]["period_cost_usd"] == review["totals"]["cost_usd"]
            assert listed["totals"]["period_lost_usd"] == review["totals"]["lost_usd"]


@pytest.mark.django_db
def test_runs_sort_by_their_period_figures_only_where_the_list_has_a_period(october: dict[str, Any]) -> None:
    root = october["root"]
    refused = root.get("/api/v1/portal/runs", {"sort": "-period_cost_usd"})
    assert refused.status_code == 400 and "sort" in refused.json()["error"]["fields"]
    assert root.get("/api/v1/portal/runs.csv", {"sort": "-period_cost_usd"}).status_code == 400
    rows = _all_rows(root, {**OCTOBER, "sort": "-period_cost_usd"})
    costs = [r["period_cost_usd"] for r in rows]
    assert costs == sorted(costs, reverse=True) and len(rows) == 109
    # Without a period a row has no period figures, and says so with nulls, not zeros.
    plain = root.get("/api/v1/portal/runs", {"q": "crossing"}).json()
    assert plain["period"] is None and plain["results"][0]["period_cost_usd"] is None
    assert plain["totals"]["period_cost_usd"] is None and plain["totals"]["cost_usd"] == 12.0


@pytest.mark.django_db
def test_a_run_not_analysed_yet_has_no_period_cost_rather_than_zero(owner: Tenant, october: dict[str, Any]) -> None:
    owner.create_run(name="pending", gpu_model="H100-SXM", gpu_count=1, allocation_start="2026-10-15T10:00:00+00:00")
    (row,) = october["root"].get("/api/v1/portal/runs", {**OCTOBER, "q": "pending"}).json()["results"]
    assert row["analysed"] is False and row["period_cost_usd"] is None and row["cost_usd"] is None


@pytest.mark.django_db
def test_a_closed_month_keeps_its_period_costs_in_the_list_as_finance_keeps_them(october: dict[str, Any]) -> None:
    root = october["root"]
    assert root.post("/api/v1/portal/finance/2026-10/close").status_code == 200
    frozen = root.get("/api/v1/portal/finance/2026-10").json()["totals"]
    # A price change that reaches back into October moves the live figures, not the closed month's.
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("72"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    sweeps.analysis_sweep(inline=True)
    review = root.get("/api/v1/portal/finance/2026-10").json()
    assert review["totals"]["cost_usd"] == frozen["cost_usd"]
    listed = root.get("/api/v1/portal/runs", OCTOBER).json()
    assert listed["count"] == review["totals"]["runs"] == 109
    assert listed["totals"]["period_cost_usd"] == review["totals"]["cost_usd"]
    assert listed["totals"]["period_lost_usd"] == review["totals"]["lost_usd"] == frozen["lost_usd"] > 0
    board = root.get("/api/v1/portal/leaderboards/runs", {"period": "2026-10"}).json()
    assert board["totals"]["cost_usd"] == review["totals"]["cost_usd"]
    assert board["totals"]["lost_usd"] == review["totals"]["lost_usd"]
    (row,) = root.get("/api/v1/portal/runs", {**OCTOBER, "q": "crossing"}).json()["results"]
    assert row["period_cost_usd"] == 6.0  # October, as closed
    (line,) = _csv(root.get("/api/v1/portal/runs.csv", {**OCTOBER, "q": "crossing"}))
    assert Decimal(line["period_cost_usd"]) == Decimal("6.00")

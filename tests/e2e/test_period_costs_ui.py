"""Period costs in the browser, at 390, 1,024 and 1,440 px: a month of 109 runs says 109 on the runs
leaderboard (100 a page, the rest one click away), its totals row and its CSV foot to finance, and
a run across the end of the month shows the same October dollars ("In period") beside its whole
cost ("Whole run") on the leaderboard, its CSV, the runs list, the runs list's CSV and its
project's page. Its own server: the 109 runs would change the shared server's busiest month."""

from __future__ import annotations

import csv
import io
import os
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, Api, Server, _free_port, served
from tests.e2e.seed import Client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a long unit: handed out first (tests/conftest.py)

PROJECTS = [("nlp", "llm-pretrain"), ("nlp", "llm-finetune"), ("vision", "detector")]
STORED = 108  # with the crossing run, the month has 109
S = 10**9


def _month() -> date:
    """The first day of the month before last: wholly past, whatever day the test runs."""
    last_month = date.today().replace(day=1) - timedelta(days=1)
    return (last_month.replace(day=1) - timedelta(days=1)).replace(day=1)


def _month_end(first: date) -> date:
    return (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)


def _post_run(client: Client, *, name: str, project: str, team: str, gpu: str, start: datetime, seconds: int, status: str) -> str:
    rid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"phantomhub-e2e-period/{name}"))
    client.post("/api/v1/runs", {
        "id": rid, "name": name, "team": team, "project": project, "gpu_model": gpu, "gpu_count": 8, "world_size": 1,
        "dtype": "bf16", "pricing_tier": "on_demand", "allocation_start": start.isoformat(), "started_at": start.isoformat(),
    })  # fmt: skip
    t0 = int(start.timestamp()) * S
    steps = {
        "step": list(range(seconds)),
        "t_start_ns": [t0 + i * S for i in range(seconds)],
        "dur_ns": [S] * seconds,
        "data_ns": [S // 5] * seconds,
        "forward_ns": [S // 4] * seconds,
        "backward_ns": [S // 2] * seconds,
        "flops": [8 * 0.3 * 989.4e12 * 0.75] * seconds,
    }
    client.post(f"/api/v1/runs/{rid}/steps", {"rank": 0, "steps": steps})
    finish = {"id": f"{rid}-end", "kind": "finish", "t_ns": t0 + seconds * S, "status": status}
    client.post(f"/api/v1/runs/{rid}/events", {"events": [finish]})
    return rid


def _seed(url: str, tokens: dict[str, str], first: date) -> str:
    """108 runs inside the month and one across its last midnight (40 minutes, 30 of them inside)."""
    rng = random.Random(29)
    end = _month_end(first)
    for i in range(STORED):
        team, project = PROJECTS[i % len(PROJECTS)]
        day = first + timedelta(days=rng.randint(0, end.day - 2))
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=rng.randint(0, 20))
        _post_run(Client(url, tokens[project]), name=f"october-{i:03d}", project=project, team=team,
                  gpu="H100-SXM" if i % 3 else "A100-80GB", start=start, seconds=rng.randint(120, 600),
                  status="failed" if i % 7 == 0 else "finished")  # fmt: skip
    crossing = datetime.combine(end, datetime.min.time(), tzinfo=UTC) + timedelta(hours=23, minutes=30)
    return _post_run(Client(url, tokens["llm-pretrain"]), name="month-crossing", project="llm-pretrain", team="nlp",
                     gpu="H100-SXM", start=crossing, seconds=2400, status="finished")  # fmt: skip


@pytest.fixture(scope="module")
def month_server(tmp_path_factory: pytest.TempPathFactory, server: Server) -> Iterator[dict[str, Any]]:
    """A second PhantomHub (own SQLite database, own gunicorn) holding the 109-run month. `server`
    comes first: the browser fixture it shares needs it, and its checks (chromium, frontend/dist)."""
    tmp = tmp_path_factory.mktemp("phantomhub-e2e-period")
    port = _free_port()
    env = {**server.env, "PHANTOMHUB_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "PHANTOMHUB_VAR_DIR": str(tmp / "var"),
           "PHANTOMHUB_PORT": str(port)}  # fmt: skip
    with served(tmp, env, port) as srv:
        tokens = {project: srv.manage("createtoken", "--team", team, "--project", project).strip() for team, project in PROJECTS}
        first = _month()
        crossing = _seed(srv.url, tokens, first)
        srv.manage("sweep")
        yield {"server": srv, "api": Api(srv.url, *ADMIN), "month": f"{first:%Y-%m}", "first": first, "crossing": crossing}


@pytest.fixture
def month_page(browser: Any, month_server: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[Any]:
    width = int(request.param)
    context = browser.new_context(
        base_url=month_server["server"].url, viewport={"width": width, "height": 900}, accept_downloads=True
    )
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def usd(value: float | Decimal) -> str:
    return f"${Decimal(str(value)):,.2f}"


def _download(page: Any, test_id: str) -> list[dict[str, str]]:
    with page.expect_download() as info:
        page.get_by_test_id(test_id).click()
    return list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text(encoding="utf-8"))))


def _cents(values: list[str]) -> Decimal:
    return sum((Decimal(v) for v in values if v), Decimal(0))


def _cell(page: Any, table: str, row_key: str, column: str) -> str:
    cell = page.locator(f'[data-testid="{table}"] tr[data-row-key="{row_key}"] td[data-col="{column}"]')
    return str(cell.text_content()).strip()


def _total(page: Any, table: str, column: str) -> str:
    return str(page.locator(f'[data-testid="{table}-totals"] td[data-col="{column}"]').text_content()).strip()


@pytest.mark.parametrize("month_page", [390, 1024, 1440], indirect=True, ids=lambda w: f"{w}px")
def test_a_109_run_month_and_a_month_crossing_run_read_the_same_from_leaderboard_to_csv(
    month_page: Any, month_server: dict[str, Any], tmp_path: Path
) -> None:
    page, api, month, crossing = month_page, month_server["api"], month_server["month"], month_server["crossing"]
    first = month_server["first"]
    review = api.get_json(f"/api/v1/portal/finance/{month}")
    finance_total = Decimal(str(review["totals"]["cost_usd"]))
    assert review["totals"]["runs"] == 109
    run = api.get_json(f"/api/v1/portal/runs?from={first}&to={_month_end(first)}&q=month-crossing")["results"][0]
    in_month, whole = Decimal(str(run["period_cost_usd"])), Decimal(str(run["whole_cost_usd"]))
    assert 0 < in_month < whole  # 30 of its 40 minutes are in the month

    # The runs leaderboard: 100 of 109, a totals row that is finance's, every row one click away.
    page.goto(f"/leaderboards?kind=runs&period={month}")
    page.get_by_test_id("leaderboard-runs").locator("tbody tr").first.wait_for()
    assert page.get_by_test_id("leaderboard-count").text_content() == "100 of 109 runs"
    assert page.get_by_test_id("leaderboard-shown").text_content() == "1–100 of 109"
    assert "Total · 109 runs" in str(page.get_by_test_id("leaderboard-runs-totals").text_content())
    assert _total(page, "leaderboard-runs", "cost_usd") == usd(finance_total)
    page.get_by_test_id("leaderboard-show-all").click()
    page.wait_for_function("() => document.querySelectorAll('[data-testid=leaderboard-runs] tbody tr').length === 109")
    assert page.get_by_test_id("leaderboard-count").text_content() == "109 runs"
    assert _cell(page, "leaderboard-runs", crossing, "cost_usd") == usd(in_month)
    assert _cell(page, "leaderboard-runs", crossing, "whole_cost_usd") == usd(whole)
    board = _download(page, "leaderboard-csv")
    assert len(board) == 109
    assert _cents([line["cost_usd"] for line in board]) == finance_total
    line = next(line for line in board if line["run_id"] == crossing)
    assert (Decimal(line["cost_usd"]), Decimal(line["whole_cost_usd"])) == (in_month, whole)

    # From the leaderboard to the run, and from the run page to its month's runs (the sidebar keeps the month).
    page.locator(f'[data-testid="leaderboard-runs"] tr[data-row-key="{crossing}"] a.row-link').click()
    page.wait_for_url(f"**/runs/{crossing}?period={month}")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    page.wait_for_url(f"**/runs?from={first}&to={_month_end(first)}")
    page.get_by_test_id("runs-table").locator("tbody tr").first.wait_for()
    assert page.locator(".page-header .page-subtitle").text_content() == "109 runs matching 2 filters"
    assert page.get_by_test_id("runs-shown").text_content() == "1–50 of 109"
    assert "Total · 109 runs" in str(page.get_by_test_id("runs-table-totals").text_content())
    assert _total(page, "runs-table", "period_cost_usd") == usd(finance_total)
    assert page.get_by_role("columnheader", name="Whole run").count() == 1
    assert page.get_by_test_id("runs-period-note").is_visible()
    listed = _download(page, "runs-csv")
    assert len(listed) == 109
    assert _cents([line["period_cost_usd"] for line in listed]) == finance_total
    mine = next(line for line in listed if line["id"] == crossing)
    assert (Decimal(mine["period_cost_usd"]), Decimal(mine["cost_usd"])) == (in_month, whole)
    page.get_by_label("Search").fill("month-crossing")
    page.get_by_label("Search").press("Enter")
    page.wait_for_url("**q=month-crossing**")
    page.locator(f'[data-testid="runs-table"] tr[data-row-key="{crossing}"]').wait_for()
    page.wait_for_function("() => document.querySelectorAll('[data-testid=runs-table] tbody tr').length === 1")
    assert _cell(page, "runs-table", crossing, "period_cost_usd") == usd(in_month)
    assert _cell(page, "runs-table", crossing, "cost_usd") == usd(whole)
    assert _total(page, "runs-table", "period_cost_usd") == usd(in_month)
    # A filter narrows the rows and their totals row alike (the API tests foot every filter to finance).
    page.goto(f"/runs?status=failed&from={first}&to={_month_end(first)}")
    failed = api.get_json(f"/api/v1/portal/runs?status=failed&from={first}&to={_month_end(first)}&page_size=200")
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=runs-table] tbody tr').length === {failed['count']}")
    assert _total(page, "runs-table", "period_cost_usd") == usd(failed["totals"]["period_cost_usd"])
    assert _cents([str(r["period_cost_usd"]) for r in failed["results"]]) == Decimal(str(failed["totals"]["period_cost_usd"]))
    shots = os.environ.get("PHANTOMHUB_E2E_SHOTS")  # docs/screenshots/runs-period.png is the 1,440 px one
    page.screenshot(path=str(Path(shots or tmp_path) / f"runs-period-{page.viewport_size['width']}.png"), full_page=True)

    # The run's project page for the month: its top runs show the same dollars in the month.
    page.goto(f"/projects/llm-pretrain?period={month}")
    page.locator(f'[data-testid="top-runs"] tr[data-row-key="{crossing}"]').wait_for()
    assert _cell(page, "top-runs", crossing, "period_cost_usd") == usd(in_month)
    assert _cell(page, "top-runs", crossing, "cost_usd") == usd(whole)
    project = api.get_json(f"/api/v1/portal/projects/llm-pretrain?period={month}")
    of_project = api.get_json(f"/api/v1/portal/runs?from={first}&to={_month_end(first)}&project=llm-pretrain")
    assert of_project["totals"]["period_cost_usd"] == project["totals"]["cost_usd"]

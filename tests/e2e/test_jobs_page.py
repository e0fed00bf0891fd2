"""The job page in headless Chromium: a job of three attempts (an OOM, a SIGKILL, a clean finish),
posted through the ingest API with checkpoints and restores, analysed by `sweep`, opened from the
jobs list. The timeline draws every segment the API gives, shaded by kind; the header, the legend
and the attempts table show the API's dollars; the run page of an attempt links back to the job.
Its own server: a job's lost dollars would change the shared server's figures. Saves
docs/screenshots/job.png."""

from __future__ import annotations

import urllib.error
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, Api, Server, _free_port, served
from tests.e2e.seed import Client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a long unit: handed out first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SHOT = ROOT / "docs" / "screenshots" / "job.png"
TEAM, PROJECT = "nlp", "llm-pretrain"
JOB_KEY = "torchelastic/e2e-3f2a9c"
S = 10**9


def usd(value: float) -> str:
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def _post(client: Client, path: str, body: dict[str, Any]) -> None:
    """The ingest API's answer, with its message when it refuses."""
    try:
        client.post(path, body)
    except urllib.error.HTTPError as err:
        raise AssertionError(f"POST {path}: {err.code} {err.read().decode()}") from err


def _phase(rid: str, name: str, t: int, seconds: int, **data: Any) -> dict[str, Any]:
    dur = seconds * S
    return {"id": f"{name}-{t}", "kind": "phase", "name": name, "rank": 0, "t_ns": t + dur, "t_start_ns": t, "dur_ns": dur,
            "data": data}  # fmt: skip


def _register(client: Client, n: int, start: datetime) -> str:
    rid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"phantomhub-e2e-job/{n}"))
    at = start.isoformat()
    _post(client, "/api/v1/runs", {
        "id": rid, "name": f"pretrain-attempt-{n}", "team": TEAM, "project": PROJECT, "gpu_model": "H100-SXM",
        "gpu_count": 8, "world_size": 1, "dtype": "bf16", "pricing_tier": "on_demand", "allocation_start": at,
        "started_at": at, "job": {"key": JOB_KEY, "attempt": n - 1, "source": "torchelastic"},
    })  # fmt: skip
    return rid


def _attempt(
    client: Client, n: int, start: datetime, steps: range, saves: list[int], restored: int | None, end: dict[str, Any]
) -> str:
    """One attempt: registered in the job, 20 s of start-up, a 10 s restore (after a restart), its
    steps of one second each with 15 s blocking saves after the steps in `saves`, then its finish
    event (`end`: status and data.cause)."""
    rid = _register(client, n, start)
    t = int(start.timestamp()) * S + 20 * S
    events: list[dict[str, Any]] = []
    if restored is not None:
        events.append(_phase(rid, "restore", t, 10, step=restored, bytes=8 * 2**30))
        t += 10 * S
    cols: dict[str, list[Any]] = {
        k: [] for k in ("step", "t_start_ns", "dur_ns", "data_ns", "forward_ns", "backward_ns", "flops")
    }
    for step in steps:
        for k, v in (("step", step), ("t_start_ns", t), ("dur_ns", S), ("data_ns", S // 10), ("forward_ns", 3 * S // 10),
                     ("backward_ns", 6 * S // 10), ("flops", 8 * 0.3 * 989.4e12 * 0.9)):  # fmt: skip
            cols[k].append(v)
        t += S
        if step in saves:
            events.append(_phase(rid, "checkpoint", t, 15, step=step, bytes=8 * 2**30, **{"async": False}))
            t += 15 * S
    _post(client, f"/api/v1/runs/{rid}/steps", {"rank": 0, "host": f"node-{n}", "steps": cols})
    events.append({"id": "finish", "kind": "finish", "rank": 0, "t_ns": t + 5 * S, **end})
    _post(client, f"/api/v1/runs/{rid}/events", {"events": events})
    return rid


@pytest.fixture(scope="module")
def job_server(tmp_path_factory: pytest.TempPathFactory, server: Server) -> Iterator[dict[str, Any]]:
    """A PhantomHub of its own holding one job of three attempts. `server` comes first: the browser
    fixture needs it, and its checks (chromium, frontend/dist)."""
    tmp = tmp_path_factory.mktemp("phantomhub-e2e-job")
    port = _free_port()
    env = {**server.env, "PHANTOMHUB_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
           "PHANTOMHUB_VAR_DIR": str(tmp / "var"), "PHANTOMHUB_PORT": str(port)}  # fmt: skip
    with served(tmp, env, port) as srv:
        client = Client(srv.url, srv.manage("createtoken", "--team", TEAM, "--project", PROJECT).strip())
        start = (datetime.now(UTC) - timedelta(days=2)).replace(hour=8, minute=0, second=0, microsecond=0)
        oom = {"status": "failed", "data": {"cause": "oom", "exception": "torch.OutOfMemoryError"}}
        killed = {"status": "crashed", "data": {"cause": "sigkill"}}
        done = {"status": "finished", "data": {"cause": "finished"}}
        runs = [
            # 600 steps, saves after 199 and 399, out of memory at 599.
            _attempt(client, 1, start, range(0, 600), [199, 399], None, oom),
            # restarted from step 399 (400–599 again), a save after 899, killed at 1199.
            _attempt(client, 2, start + timedelta(seconds=900), range(400, 1200), [899], 399, killed),
            # restarted from 899 (900–1199 again), on to 1499, finished.
            _attempt(client, 3, start + timedelta(seconds=1900), range(900, 1500), [], 899, done),
        ]
        srv.manage("sweep")
        api = Api(srv.url, *ADMIN)
        listed = api.get_json(f"/api/v1/portal/jobs?project={PROJECT}")
        assert listed["count"] == 1, listed
        yield {"server": srv, "api": api, "listed": listed["results"][0], "job_id": listed["results"][0]["id"], "runs": runs,
               "month": f"{start:%Y-%m}"}  # fmt: skip


@pytest.fixture
def job_page(browser: Any, job_server: dict[str, Any]) -> Iterator[Any]:
    context = browser.new_context(base_url=job_server["server"].url, viewport={"width": 1440, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The timeline and the advice chart within the Content-Security-Policy: nothing refused.
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text or m.text.startswith("Refused to") else None,
    )
    page.goto("/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    yield page
    context.close()
    assert not errors, f"JavaScript errors or refusals of the policy on the page: {errors}"


def test_the_job_page_draws_and_lists_the_apis_attempts_and_dollars(job_page: Any, job_server: dict[str, Any]) -> None:
    page, api, job_id = job_page, job_server["api"], job_server["job_id"]
    job = api.get_json(f"/api/v1/portal/jobs/{job_id}")
    assert job["attempts_total"] == 3 and job["attempts_shown"] == 3
    assert [a["end_cause"] for a in job["attempts"]] == ["oom", "sigkill", "finished"]

    # From the sidebar's jobs list, most lost first, to the job.
    page.get_by_role("link", name="Jobs").first.click()
    row = page.get_by_test_id("jobs-table").locator(f'tr[data-row-key="{job_id}"]')
    listed = job_server["listed"]  # summed from the run-day rows finance sums
    assert row.locator('td[data-col="lost_usd"]').inner_text().strip() == usd(listed["lost_usd"])
    assert row.locator('td[data-col="cost_usd"]').inner_text().strip() == usd(listed["cost_usd"])
    row.get_by_role("link", name=JOB_KEY).click()
    page.get_by_role("heading", name=JOB_KEY).wait_for()
    assert page.url.endswith(f"/jobs/{job_id}")

    # The header's figures are the API's.
    assert usd(job["cost_usd"]) in page.get_by_test_id("job-cost").inner_text()
    assert usd(job["lost_usd"]["total"]) in page.get_by_test_id("job-lost").inner_text()
    for cause in ("rework", "restart", "checkpoint"):
        assert usd(job["lost_usd"][cause]) in page.get_by_test_id(f"job-lost-{cause}").inner_text(), cause
    assert job["lost_usd"]["rework"] > 0 and job["lost_usd"]["restart"] > 0 and job["lost_usd"]["checkpoint"] > 0, job["lost_usd"]

    # The timeline: one rect per segment of every attempt, shaded by its kind, one line per attempt.
    timeline = page.get_by_test_id("job-timeline")
    segments = [s for a in job["attempts"] for s in a["segments"]]
    assert timeline.locator("rect.seg").count() == len(segments)
    for kind in ("restart", "rework", "checkpoint", "work"):
        want = sum(1 for s in segments if s["kind"] == kind)
        assert timeline.locator(f"rect.seg.seg-{kind}").count() == want, kind
        if kind != "work":
            assert want > 0, (kind, segments)
            fill = timeline.locator(f"rect.seg-{kind}").first.evaluate("el => getComputedStyle(el).fill")
            assert fill not in ("", "none", "rgb(0, 0, 0)"), (kind, fill)
    assert timeline.locator("line.timeline-boundary").count() == 3
    legend = page.get_by_test_id("timeline-legend")
    for cause in ("rework", "restart", "checkpoint"):
        assert usd(job["lost_usd"][cause]) in legend.locator(f'li[data-kind="{cause}"]').inner_text(), cause

    # The attempts table: each attempt's cost and dollars by cause, its end cause, its run.
    table = page.get_by_test_id("attempts-table")
    for a in job["attempts"]:
        row = table.locator(f'tr[data-row-key="{a["run_id"]}"]')
        assert row.locator('td[data-col="cost"]').inner_text().strip() == usd(a["cost_usd"])
        for cause in ("rework", "restart", "checkpoint"):
            cell = row.locator(f'td[data-col="{cause}"]').inner_text().strip()
            assert cell == usd(a["lost_usd"][cause]), (a["index"], cause)
        assert row.locator('td[data-col="lost"]').inner_text().strip() == usd(a["lost_usd"]["total"])
    first = table.locator(f'tr[data-row-key="{job["attempts"][0]["run_id"]}"]')
    assert "out of memory" in first.inner_text() and "torch.OutOfMemoryError" in first.inner_text()

    # The failure rate's evidence and the advice (or why there is none), in the API's words.
    assert page.get_by_test_id("failure-rate-evidence").inner_text().strip() != ""
    if job["advice"] is None:
        assert "No advice" in page.get_by_test_id("no-advice").inner_text()
    else:
        assert usd(job["advice"]["saving_usd_per_month"]) in page.get_by_test_id("advice-saving").inner_text()

    page.get_by_test_id("job-timeline").scroll_into_view_if_needed()
    page.evaluate("window.scrollTo(0, 0)")
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOT), full_page=True)

    # The second attempt's run page says where it belongs and links back.
    second = job["attempts"][1]
    page.goto(f"/runs/{second['run_id']}")
    line = page.get_by_test_id("run-job")
    assert f"Attempt 2 of 3 of job {JOB_KEY}" in line.inner_text()
    line.get_by_role("link", name=JOB_KEY).click()
    page.get_by_role("heading", name=JOB_KEY).wait_for()


def test_the_project_page_lists_the_months_failure_causes_as_the_api_does(job_page: Any, job_server: dict[str, Any]) -> None:
    page, api, month = job_page, job_server["api"], job_server["month"]
    failures = api.get_json(f"/api/v1/portal/projects/{PROJECT}/failures?month={month}")
    failed = [r for r in failures["rows"] if r["end_cause"] != "finished"]
    assert {r["end_cause"] for r in failed} == {"oom", "sigkill"}, failures
    page.goto(f"/projects/{PROJECT}?period={month}")
    table = page.get_by_test_id("project-failures")
    rows = table.locator("tbody tr")
    rows.first.wait_for()
    assert rows.count() == len(failed)
    words = {"oom": "out of memory", "sigkill": "killed (SIGKILL)"}
    for r in failed:
        row = rows.filter(has_text=words[r["end_cause"]])
        assert row.locator('td[data-col="lost_usd"]').inner_text().strip() == usd(r["lost_usd"])
        assert row.locator('td[data-col="rework_usd"]').inner_text().strip() == usd(r["rework_usd"])
        assert row.locator('td[data-col="restart_usd"]').inner_text().strip() == usd(r["restart_usd"])
    page.get_by_test_id("project-jobs-link").click()
    page.get_by_test_id("jobs-table").locator(f'tr[data-row-key="{job_server["job_id"]}"]').wait_for()


def test_leaderboards_and_finance_show_the_lost_dollars_the_api_gives(job_page: Any, job_server: dict[str, Any]) -> None:
    page, api, month = job_page, job_server["api"], job_server["month"]
    board = api.get_json(f"/api/v1/portal/leaderboards/projects?period={month}")
    [row] = [r for r in board["rows"] if r["key"] == PROJECT]
    if "lost_usd" not in row:
        pytest.skip("this server's leaderboards do not price lost work yet")
    assert row["lost_usd"] > 0
    page.goto(f"/leaderboards?kind=projects&period={month}")
    cell = page.get_by_test_id("leaderboard-projects").locator(f'tr[data-row-key="{PROJECT}"] td[data-col="lost_usd"]')
    assert cell.inner_text().strip() == usd(row["lost_usd"])
    total = page.get_by_test_id("leaderboard-projects-totals").locator('td[data-col="lost_usd"]')
    assert total.inner_text().strip() == usd(board["totals"]["lost_usd"])

    finance = api.get_json(f"/api/v1/portal/finance/{month}")
    [frow] = [r for r in finance["rows"] if r["project"] == PROJECT]
    page.goto(f"/finance?month={month}")
    cell = page.get_by_test_id("finance-table").locator(f'tr[data-row-key="{TEAM}/{PROJECT}"] td[data-col="lost_usd"]')
    assert cell.inner_text().strip() == usd(frow["lost_usd"])
    assert page.get_by_test_id("finance-total").locator('td[data-col="lost_usd"]').inner_text().strip() == usd(
        finance["totals"]["lost_usd"]
    )
    # The job's lost dollars are in the project's (the run-day rows both sum).
    assert frow["lost_usd"] == pytest.approx(job_server["listed"]["lost_usd"], abs=0.005)

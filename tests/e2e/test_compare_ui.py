"""Comparing runs in headless Chromium: tick runs in the runs table, compare, open the shared URL;
and the run page's comparison with the project baseline. Figures are checked against the API."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.conftest import ADMIN, Api, Server
from tests.e2e.seed import RUNS, run_id

pytestmark = pytest.mark.e2e

BY_NAME = {spec.name: run_id(spec) for spec in RUNS}


def usd(value: float) -> str:
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def ms(value: float) -> str:
    """Milliseconds as the UI writes them (lib/format.ts formatMs)."""
    if abs(value) >= 999.5:
        return f"{value / 1000:.2f} s"
    if abs(value) >= 99.95:
        return f"{value:.0f} ms"
    if abs(value) >= 9.995:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def row_cells(page: Any, table_test_id: str, label: str) -> list[str]:
    row = page.get_by_test_id(table_test_id).locator("tbody tr").filter(has=page.get_by_text(label, exact=True)).first
    row.wait_for()
    return [str(t).strip() for t in row.locator("td").all_inner_texts()]


def check_comparison(page: Any, api: Api, ids: list[str]) -> None:
    body = api.get_json(f"/api/v1/portal/compare?runs={','.join(ids)}")
    steps = row_cells(page, "compare-steps", "Step time")
    costs = row_cells(page, "compare-money", "Cost")
    for i, side in enumerate(body["runs"]):
        comp = side["analysis"]["composition"]
        assert steps[i + 1] == ms(comp["step_ms"]), (steps, comp)
        assert costs[i + 1] == usd(side["analysis"]["cost_usd"])
    data = row_cells(page, "compare-steps", "Data wait")
    for i, side in enumerate(body["runs"]):
        comp = side["analysis"]["composition"]
        assert data[i + 1] == f"{ms(comp['parts_ms']['data'])} ({comp['shares']['data'] * 100:.0f}%)"
    differing = len(body["config"]["differences"])
    summary = page.get_by_text(re.compile(r"keys? differs? · \d+ the same in all")).first
    assert summary.inner_text().startswith(f"{differing} key")


def test_tick_runs_compare_and_open_the_shared_url(signed_in: Any, api: Api, server: Server, browser: Any) -> None:
    page = signed_in
    page.goto("/runs")
    page.get_by_test_id("runs-table").locator("tbody tr").first.wait_for()
    compare = page.get_by_test_id("compare-action")
    assert compare.is_disabled()
    picked = ["pretrain-ddp-straggler", "pretrain-ddp-tuned", "detector-starved"]
    for name in picked:
        page.get_by_label(f"Select {name} to compare").check()
    assert page.get_by_test_id("compare-picked").inner_text() == "3 selected"
    assert urlsplit(page.url).path == "/runs"  # ticking a box opens no run
    compare.click()
    page.wait_for_url(re.compile(r"/compare\?runs="))
    ids = parse_qs(urlsplit(page.url).query)["runs"][0].split(",")
    assert ids == [BY_NAME[n] for n in picked]
    page.get_by_role("heading", name="Compare runs").wait_for()
    check_comparison(page, api, ids)
    shared = page.url

    # The URL is the comparison: a fresh browser signs in and lands on the same figures.
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    other = context.new_page()
    try:
        other.goto(shared)
        other.wait_for_url(re.compile(r"/login"))
        other.get_by_label("Username").fill(ADMIN[0])
        other.get_by_label("Password").fill(ADMIN[1])
        other.get_by_role("button", name="Sign in").click()
        other.get_by_role("heading", name="Compare runs").wait_for()
        assert parse_qs(urlsplit(other.url).query)["runs"][0].split(",") == ids
        check_comparison(other, api, ids)
    finally:
        context.close()


def test_a_link_naming_one_run_asks_for_more(signed_in: Any) -> None:
    signed_in.goto(f"/compare?runs={BY_NAME['ranker-small']}")
    signed_in.get_by_text("Pick 2 to 4 runs to compare").wait_for()


def test_the_run_page_compares_the_run_with_its_project_baseline(signed_in: Any, api: Api) -> None:
    rid = BY_NAME["pretrain-ddp-straggler"]
    baseline = api.get_json(f"/api/v1/portal/runs/{rid}")["baseline"]
    assert baseline["status"] == "compared", baseline
    page = signed_in
    page.goto(f"/runs/{rid}")
    summary = page.get_by_test_id("baseline-summary")
    summary.wait_for()
    assert summary.locator("strong").inner_text().strip() == baseline["summary"]
    step = next(m for m in baseline["metrics"] if m["metric"] == "step_ms")
    cells = row_cells(page, "baseline-table", "Step time")
    assert cells[1] == ms(step["baseline"]) and cells[2] == ms(step["run"])
    sign = "+" if step["delta_usd_per_month"] > 0 else "−"
    assert cells[4].startswith(sign + usd(abs(step["delta_usd_per_month"])))
    # The first run of a project has no baseline, and the page says why instead of showing zeros.
    first = BY_NAME["ranker-small"]
    reason = api.get_json(f"/api/v1/portal/runs/{first}")["baseline"]["reason"]
    page.goto(f"/runs/{first}")
    none = page.get_by_test_id("baseline-none")
    none.wait_for()
    assert reason in none.inner_text()

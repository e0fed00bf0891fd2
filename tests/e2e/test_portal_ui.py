"""The web UI in headless Chromium against a real, seeded PhantomHub (issue 5's browser scenarios)."""

from __future__ import annotations

import csv
import io
import re
import time
import urllib.error
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Api, Server
from tests.portal.pdfs import assert_not_blank, csv_table, pages_text, pdf_table, rendered

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a long unit: handed out first (tests/conftest.py)

CATEGORIES = ["useful_compute", "compute_inefficiency", "data_stall", "comm_exposed", "host_overhead", "idle"]


def usd(value: float) -> str:
    """Money as the UI shows it (Intl.NumberFormat en-US, USD)."""
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def rows_keys(page: Any, table_test_id: str) -> list[str]:
    table = page.get_by_test_id(table_test_id)
    table.locator("tbody tr").first.wait_for()
    return [str(key) for key in table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.rowKey)")]


def rows_keys_when(page: Any, table_test_id: str, wanted: list[str], timeout_s: float = 10.0) -> list[str]:
    """The table's row keys once they equal `wanted`, or as they stand when the time is up."""
    deadline = time.monotonic() + timeout_s
    keys = rows_keys(page, table_test_id)
    while keys != wanted and time.monotonic() < deadline:
        page.wait_for_timeout(100)
        keys = rows_keys(page, table_test_id)
    return keys


def test_signing_in_leads_to_the_overview_with_the_api_totals(page: Any, api: Api) -> None:
    page.goto("/")
    page.wait_for_url(re.compile(r"/login"))
    page.get_by_label("Username").fill("e2e-admin")
    page.get_by_label("Password").fill("wrong password")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("alert").filter(has_text="do not match").wait_for()

    page.get_by_label("Password").fill("e2e-password-1234")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    totals = api.get_json("/api/v1/portal/overview?period=30d")["totals"]
    assert totals["cost_usd"] > 0
    spend = page.get_by_test_id("stat-spend")
    assert usd(totals["cost_usd"]) in spend.inner_text()
    assert usd(totals["recoverable_usd"]) in page.get_by_test_id("stat-recoverable").inner_text()


def test_team_leaderboard_is_ordered_by_the_recoverable_spend_of_the_ingested_runs(signed_in: Any, api: Api) -> None:
    page = signed_in
    # What the API computed from the ingested telemetry, run by run, summed per team.
    since = (datetime.now(UTC) - timedelta(days=29)).date().isoformat()
    runs = api.get_json(f"/api/v1/portal/runs?from={since}&page_size=200")["results"]
    per_team: dict[str, float] = defaultdict(float)
    for run in runs:
        assert run["analysed"], run
        per_team[run["team"]] += run["recoverable_usd"]
    assert len(set(per_team.values())) == len(per_team), "seed must give every team a distinct recoverable spend"

    # The API's board must agree with the run-by-run sums. Its figures come from daily rollups: a run
    # that spans midnight is rounded to the cent once per day, so allow a cent per run and day.
    board_rows = api.get_json("/api/v1/portal/leaderboards/teams?period=30d")["rows"]
    board = {row["key"]: row for row in board_rows}
    assert set(board) == set(per_team)
    for team, row in board.items():
        assert row["recoverable_usd"] == pytest.approx(per_team[team], abs=0.02 * max(1, row["runs"]))
    expected = [row["key"] for row in board_rows]
    for higher, lower in pairwise(expected):
        assert per_team[higher] >= per_team[lower] - 0.02 * (board[higher]["runs"] + board[lower]["runs"])

    page.get_by_role("link", name="Leaderboards").click()
    shown = rows_keys(page, "leaderboard-teams")
    assert shown == expected
    for team in expected:
        row = page.locator(f'[data-testid="leaderboard-teams"] tbody tr[data-row-key="{team}"]')
        assert usd(board[team]["recoverable_usd"]) in row.inner_text()

    # Sorting is a button: by spend (descending first), and the choice lives in the URL.
    page.get_by_role("button", name="Sort by Spend").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"sort=-cost_usd"))
    by_cost = sorted(board, key=lambda team: -board[team]["cost_usd"])
    assert by_cost != expected, "seed must rank teams differently by spend, or this check proves nothing"
    # The URL changes before the re-sorted rows are drawn: wait for the table, not the URL.
    assert rows_keys_when(page, "leaderboard-teams", by_cost) == by_cost


def test_a_run_opened_from_the_leaderboard_shows_its_breakdown(signed_in: Any, api: Api) -> None:
    page = signed_in
    page.goto("/leaderboards?kind=runs")
    top = rows_keys(page, "leaderboard-runs")[0]
    # Keyboard: Tab reaches the row, Enter opens it.
    page.locator(f'[data-testid="leaderboard-runs"] tbody tr[data-row-key="{top}"]').focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/runs/{top}")

    detail = api.get_json(f"/api/v1/portal/runs/{top}")
    analysis = detail["analysis"]
    page.get_by_role("heading", name=detail["run"]["name"]).wait_for()
    breakdown = page.get_by_test_id("breakdown")
    for category in CATEGORIES:
        row = breakdown.locator(f'tr[data-category="{category}"]')
        assert usd(analysis["categories"][category]["usd"]) in row.inner_text()
    assert usd(analysis["cost_usd"]) in page.get_by_test_id("run-cost").inner_text()
    assert usd(analysis["recoverable_usd"]) in page.get_by_test_id("run-recoverable").inner_text()

    # Every figure can show its formula and inputs: the cost's comes from the analysis' explain map.
    page.get_by_role("button", name="How cost is computed").click()
    dialog = page.get_by_role("dialog", name="cost: formula and inputs")
    # In words on the page, and as the analysis wrote it under "As the analysis writes it".
    assert analysis["explain"]["cost_usd"]["formula"] in str(dialog.text_content())
    page.keyboard.press("Escape")
    assert dialog.count() == 0

    # A client-side route survives a reload (Django serves the app for it).
    page.reload()
    page.get_by_test_id("breakdown").wait_for()


EVIDENCE_WORDS = {
    "own_stretch": "best stretch",
    "peers": "peer runs",
    "target": "target",
    "straggler": "stragglers",
    "project_median": "project median",
    "none": "no evidence",
}
CATEGORY_WORDS = {
    "compute_inefficiency": "compute inefficiency",
    "data_stall": "data stall",
    "comm_exposed": "exposed communication",
    "host_overhead": "host overhead",
    "idle": "idle",
}
SNAKE_CASE = re.compile(r"\b[a-z]+_[a-z_]+\b")
Analysis = dict[str, Any]


def words(locator: Any) -> str:
    """A locator's text with whitespace collapsed (flex items come back line by line from inner_text)."""
    return " ".join(str(locator.text_content()).split())


def _analyses(api: Api, server: Server) -> dict[str, Analysis]:
    out = {run_id: api.get_json(f"/api/v1/portal/runs/{run_id}")["analysis"] for run_id in server.run_ids}
    return {run_id: a for run_id, a in out.items() if a is not None}


def _category_where(analyses: dict[str, Analysis], kind: str, *, peers: bool = False, window: bool = False) -> tuple[str, str]:
    """A (run id, waste category) with money spent whose evidence is of ``kind``."""
    for run_id, a in analyses.items():
        for c in CATEGORY_WORDS:
            fig = a["categories"][c]
            ev = fig["evidence"]
            if fig["usd"] > 0 and ev["kind"] == kind and (not peers or ev["peer_run_ids"]) and (not window or ev["window"]):
                return run_id, c
    raise AssertionError(f"the seed has no run with {kind} evidence for a category")


def _recommendation_where(analyses: dict[str, Analysis], recurrence: str) -> tuple[str, dict[str, Any]]:
    for run_id, a in analyses.items():
        for rec in a["recommendations"]:
            if (rec["saving_usd"] or 0) > 0 and rec["recurrence"]["kind"] == recurrence:
                return run_id, rec
    raise AssertionError(f"the seed has no {recurrence} run with a priced recommendation")


def test_the_run_page_shows_each_recoverable_figure_with_its_range_and_evidence(signed_in: Any, api: Api, server: Server) -> None:
    page = signed_in
    analyses = _analyses(api, server)
    # A run where some waste category has no evidence: the page says so instead of "$0.00".
    run_id, category = _category_where(analyses, "none")
    a = analyses[run_id]
    page.goto(f"/runs/{run_id}")
    breakdown = page.get_by_test_id("breakdown")
    breakdown.wait_for()
    cell = page.get_by_test_id(f"recoverable-{category}").inner_text()
    assert cell.startswith("no evidence") and "$" not in cell
    expected_range = f"{usd(a['recoverable_low_usd'])}–{usd(a['recoverable_high_usd'])}"
    if a["recoverable_low_usd"] == a["recoverable_high_usd"]:
        expected_range = usd(a["recoverable_low_usd"])
    assert page.get_by_test_id("run-recoverable-range").inner_text().startswith(f"range {expected_range}")
    for c in CATEGORY_WORDS:
        fig = a["categories"][c]
        if fig["usd"] <= 0:
            continue
        line = breakdown.locator(f'tr[data-evidence-for="{c}"]')
        assert line.locator(".ev-badge").inner_text() == EVIDENCE_WORDS[fig["evidence"]["kind"]]
        if fig["evidence"]["kind"] != "none":
            assert usd(fig["recoverable_usd"]) in page.get_by_test_id(f"recoverable-{c}").inner_text()
    # No internal names in what the table and the headline say (the ƒ popovers, closed here, show formulas).
    assert not SNAKE_CASE.search(breakdown.inner_text())
    assert not SNAKE_CASE.search(page.get_by_test_id("run-stats").inner_text())


def test_a_peer_run_is_one_click_away_and_a_best_stretch_lights_up_on_the_chart(signed_in: Any, api: Api, server: Server) -> None:
    page = signed_in
    analyses = _analyses(api, server)
    run_id, category = _category_where(analyses, "peers", peers=True)
    evidence = analyses[run_id]["categories"][category]["evidence"]
    peer = evidence["peer_run_ids"][0]
    name = next(r["name"] for r in evidence["peer_runs"] if r["id"] == peer)
    page.goto(f"/runs/{run_id}?period=7d")
    line = page.get_by_test_id("breakdown").locator(f'tr[data-evidence-for="{category}"]')
    line.get_by_role("link", name=name, exact=True).click()
    page.wait_for_url(f"**/runs/{peer}?period=7d")
    page.get_by_test_id("breakdown").wait_for()

    run_id, category = _category_where(analyses, "own_stretch", window=True)
    page.goto(f"/runs/{run_id}")
    words = CATEGORY_WORDS[category]
    control = page.get_by_role("button", name=f"Highlight the {words} stretch on the step-time chart")
    assert control.get_attribute("aria-pressed") == "false"
    control.click()
    assert control.get_attribute("aria-pressed") == "true"
    assert words in page.get_by_test_id("chart-highlight").inner_text()
    # ECharts drew the marked area: its label is in the chart's SVG.
    page.locator("#step-time svg text", has_text="best stretch").first.wait_for()


def test_recommendations_save_on_the_run_and_per_month_only_when_the_work_recurs(
    signed_in: Any, api: Api, server: Server
) -> None:
    page = signed_in
    analyses = _analyses(api, server)
    for recurrence in ("recurring", "one_off"):
        recs = [r for a in analyses.values() for r in a["recommendations"]]
        if recurrence == "one_off" and not any((r["saving_usd"] or 0) > 0 and r["recurrence"]["kind"] == "one_off" for r in recs):
            continue  # every seeded project recurs as of reading (tests/waste/test_recurrence.py has the one-off case)
        run_id, rec = _recommendation_where(analyses, recurrence)
        page.goto(f"/runs/{run_id}")
        card = page.get_by_test_id(f"rec-{rec['code']}").first
        assert f"saves {usd(rec['saving_usd'])} on this run" in words(card.get_by_test_id("rec-saving"))
        monthly = words(card.get_by_test_id("rec-monthly"))
        if recurrence == "recurring":
            assert f"{usd(rec['saving_usd_per_month'])} / month at this project's volume in the 30 days" in monthly
        else:
            assert rec["saving_usd_per_month"] is None
            assert monthly.startswith("no monthly figure: no other run of this project in the 30 days")
    # What the recommendations claim never adds up to more than the run's recoverable dollars.
    for a in analyses.values():
        claimed = sum(r["saving_usd"] or 0 for r in a["recommendations"])
        assert claimed <= a["recoverable_usd"] + 0.005 * max(1, len(a["recommendations"]))


def test_a_runs_filter_survives_a_reload(signed_in: Any, api: Api) -> None:
    page = signed_in
    page.get_by_role("link", name="Runs").click()
    page.get_by_test_id("runs-table").wait_for()
    page.get_by_label("Status").select_option("failed")
    page.wait_for_url(re.compile(r"status=failed"))
    failed = [run["id"] for run in api.get_json("/api/v1/portal/runs?status=failed")["results"]]
    assert failed, "the seed has a failed run"
    page.wait_for_function("n => document.querySelectorAll('[data-testid=runs-table] tbody tr').length === n", arg=len(failed))
    assert sorted(rows_keys(page, "runs-table")) == sorted(failed)

    page.reload()
    assert page.get_by_label("Status").input_value() == "failed"
    assert sorted(rows_keys(page, "runs-table")) == sorted(failed)

    # A text filter lands in the URL too, and back restores the previous view.
    page.get_by_label("Search").fill("nothing-is-called-this")
    page.wait_for_url(re.compile(r"q=nothing-is-called-this"))
    page.get_by_text("No runs match these filters").wait_for()
    page.reload()
    assert page.get_by_label("Search").input_value() == "nothing-is-called-this"
    page.get_by_text("No runs match these filters").wait_for()


def _busiest_month(api: Api) -> tuple[str, dict[str, Any]]:
    now = datetime.now(UTC)
    months = [f"{now:%Y-%m}", f"{(now.replace(day=1) - timedelta(days=1)):%Y-%m}"]
    reports = {m: api.get_json(f"/api/v1/portal/finance/{m}") for m in months}
    month = max(months, key=lambda m: reports[m]["totals"]["cost_usd"])
    return month, reports[month]


def test_the_finance_csv_totals_match_the_api(signed_in: Any, api: Api, server: Server) -> None:
    page = signed_in
    month, report = _busiest_month(api)
    assert report["totals"]["cost_usd"] > 0
    page.goto(f"/finance?month={month}")
    assert usd(report["totals"]["cost_usd"]) in page.get_by_test_id("finance-spend").inner_text()
    with page.expect_download() as download_info:
        page.get_by_test_id("finance-csv").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    total = next(row for row in rows if row["team"] == "TOTAL")
    body = [row for row in rows if row["team"] != "TOTAL"]
    assert len(body) == len(report["rows"])

    totals = report["totals"]
    assert float(total["cost_usd"]) == pytest.approx(totals["cost_usd"], abs=0.005)
    assert float(total["recoverable_usd"]) == pytest.approx(totals["recoverable_usd"], abs=0.005)
    assert float(total["waste_usd"]) == pytest.approx(totals["waste_usd"], abs=0.005)
    assert int(total["runs"]) == totals["runs"]
    for category in CATEGORIES:
        assert float(total[f"{category}_usd"]) == pytest.approx(totals["categories_usd"][category], abs=0.005)
    # The rows add up to the total (to the cent, per row).
    assert sum(float(r["cost_usd"]) for r in body) == pytest.approx(totals["cost_usd"], abs=0.01 * len(body))
    # The table's footer shows the same total.
    footer = page.get_by_test_id("finance-table").locator("tfoot")
    assert usd(totals["cost_usd"]) in footer.inner_text()


def test_the_finance_pdf_downloads_from_the_page_with_the_csv_s_figures(signed_in: Any, api: Api, tmp_path: Path) -> None:
    page = signed_in
    month, report = _busiest_month(api)
    page.goto(f"/finance?month={month}")
    page.get_by_test_id("finance-spend").wait_for()
    with page.expect_download() as pdf_download:
        page.get_by_role("link", name="Download PDF").click()
    with page.expect_download() as csv_download:
        page.get_by_test_id("finance-csv").click()
    pdf = Path(pdf_download.value.path()).read_bytes()
    assert pdf.startswith(b"%PDF-")
    pages = pages_text(pdf, tmp_path)
    images = rendered(pdf, tmp_path)
    assert len(images) == len(pages) >= 1
    for image in images:
        assert_not_blank(image)
    status = f"{month} CLOSED on" if report["closed"] else f"{month} LIVE: figures may change"
    assert all(status in text for text in pages)
    rows, total = pdf_table("\n".join(pages))
    csv_rows, csv_total = csv_table(Path(csv_download.value.path()).read_bytes())
    assert len(rows) == len(report["rows"]) and rows == csv_rows and total == csv_total


def test_the_dark_theme_toggle_is_remembered(signed_in: Any) -> None:
    page = signed_in
    before = page.evaluate("document.documentElement.dataset.theme")
    page.get_by_role("button", name=re.compile(r"Switch to (dark|light) theme")).click()
    after = page.evaluate("document.documentElement.dataset.theme")
    assert {before, after} == {"light", "dark"}
    page.reload()
    page.get_by_role("heading", name="Overview").wait_for()
    assert page.evaluate("document.documentElement.dataset.theme") == after


def _is_focused(locator: Any) -> bool:
    return bool(locator.evaluate("el => el === document.activeElement"))


def test_an_admin_edits_and_deletes_prices_and_the_audit_trail_records_both(signed_in: Any, api: Api) -> None:
    page = signed_in
    # T4 prices (shipped examples): no seeded run is on a T4, so these changes re-price nothing the other tests read.
    t4 = [p for p in api.get_json("/api/v1/pricing/prices") if p["gpu"] == "T4"]
    assert len(t4) >= 2, "the example price book has at least two T4 prices"
    edited, deleted = t4[0], t4[1]
    page.goto("/settings?tab=prices")
    book = page.get_by_test_id("price-book")

    # Edit: the API refuses an end before the start and names the field; the dialog says so and stays open.
    book.locator(f'tr[data-row-key="{edited["id"]}"]').get_by_role("button", name=re.compile(r"^Edit price T4")).click()
    dialog = page.get_by_role("dialog", name="Edit price")
    assert _is_focused(dialog.get_by_label("$ / GPU-hour"))
    dialog.get_by_label("$ / GPU-hour").fill("0.4321")
    dialog.get_by_label("Effective to").fill("2020-01-01")
    dialog.get_by_label("Note").fill("e2e: negotiated")
    dialog.get_by_label("Example price").uncheck()
    dialog.get_by_role("button", name="Save").click()
    assert "effective_to: must be after effective_from" in dialog.get_by_role("alert").inner_text()
    assert dialog.get_by_label("Effective to").get_attribute("aria-invalid") == "true"
    unchanged = api.get_json(f"/api/v1/pricing/prices/{edited['id']}")
    assert Decimal(unchanged["usd_per_gpu_hour"]) == Decimal(edited["usd_per_gpu_hour"])

    dialog.get_by_label("Effective to").fill("2031-01-01")
    dialog.get_by_role("button", name="Save").click()
    dialog.wait_for(state="detached")
    page.get_by_test_id("price-notice").filter(has_text="Saved T4").wait_for()
    book.locator(f'tr[data-row-key="{edited["id"]}"]').filter(has_text="$0.4321").wait_for()
    after = api.get_json(f"/api/v1/pricing/prices/{edited['id']}")
    assert Decimal(after["usd_per_gpu_hour"]) == Decimal("0.4321")
    assert after["effective_to"].startswith("2031-01-01T00:00:00")
    assert after["note"] == "e2e: negotiated"
    assert after["is_example"] is False

    # Delete, with the keyboard: Enter opens the confirmation with Cancel focused; Shift+Tab, Enter deletes.
    book.locator(f'tr[data-row-key="{deleted["id"]}"]').get_by_role("button", name=re.compile(r"^Delete price T4")).focus()
    page.keyboard.press("Enter")
    confirm = page.get_by_role("alertdialog", name="Delete price?")
    assert _is_focused(confirm.get_by_role("button", name="Cancel"))
    page.keyboard.press("Shift+Tab")
    assert _is_focused(confirm.get_by_role("button", name="Delete price"))
    page.keyboard.press("Enter")
    confirm.wait_for(state="detached")
    book.locator(f'tr[data-row-key="{deleted["id"]}"]').wait_for(state="detached")
    assert deleted["id"] not in {p["id"] for p in api.get_json("/api/v1/pricing/prices")}
    with pytest.raises(urllib.error.HTTPError) as gone:
        api.get_json(f"/api/v1/pricing/prices/{deleted['id']}")
    assert gone.value.code == 404

    # The audit trail (API and page) has both changes, newest first, by the admin, with the prices before and after.
    latest, previous = api.get_json("/api/v1/pricing/audit")[:2]
    assert (latest["action"], latest["entry_id"], latest["actor"]) == ("delete", deleted["id"], "e2e-admin")
    assert latest["after"] is None
    assert Decimal(latest["before"]["usd_per_gpu_hour"]) == Decimal(deleted["usd_per_gpu_hour"])
    assert (previous["action"], previous["entry_id"], previous["actor"]) == ("update", edited["id"], "e2e-admin")
    assert Decimal(previous["before"]["usd_per_gpu_hour"]) == Decimal(edited["usd_per_gpu_hour"])
    assert Decimal(previous["after"]["usd_per_gpu_hour"]) == Decimal("0.4321")
    trail = page.get_by_test_id("price-audit").locator("tbody tr")
    trail.first.filter(has_text="delete").wait_for()
    first, second = trail.nth(0).inner_text(), trail.nth(1).inner_text()
    assert "e2e-admin" in first and "T4" in first and "→ –" in first
    assert "update" in second and "e2e-admin" in second and "→ $0.4321" in second

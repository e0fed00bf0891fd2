"""Issue 10 in the browser: a figure followed across pages stays the same figure, a run's time is
the one finance uses, tables foot, time is drawn as time, money columns are reachable at every
width, and no explanation or recommendation leaks an internal name or an unformatted number."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.conftest import Api, Server
from tests.e2e.test_portal_ui import _analyses, _busiest_month, usd

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a long unit: handed out first (tests/conftest.py)

MONEY = re.compile(r"-?\$[\d,]+\.\d\d+")  # cents, or more decimals on a run under a dime


def money(text: str) -> Decimal:
    """The first dollar figure in a cell ($1,234.56), or 0 for a cell that shows none (–, no evidence)."""
    found = MONEY.search(text)
    return Decimal(found.group(0).replace("$", "").replace(",", "")) if found else Decimal(0)


def cells(page: Any, selector: str) -> list[list[str]]:
    """Every row's cells as text (textContent: columns hidden on narrow screens included)."""
    rows = page.locator(selector).evaluate_all("rows => rows.map(r => Array.from(r.children).map(c => c.textContent))")
    return [[str(c) for c in row] for row in rows]


def month_bounds(month: str) -> tuple[str, str]:
    first = date.fromisoformat(f"{month}-01")
    last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    return first.isoformat(), last.isoformat()


def test_a_months_figures_are_the_same_from_leaderboard_to_team_to_project_to_run(signed_in: Any, api: Api) -> None:
    page = signed_in
    month, report = _busiest_month(api)
    teams = api.get_json(f"/api/v1/portal/leaderboards/teams?period={month}")["rows"]
    team = teams[0]
    page.goto(f"/leaderboards?period={month}")
    row = page.locator(f'[data-testid="leaderboard-teams"] tbody tr[data-row-key="{team["key"]}"]')
    assert usd(team["cost_usd"]) in row.inner_text() and usd(team["recoverable_usd"]) in row.inner_text()
    row.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/teams/{team['key']}?period={month}")
    assert usd(team["cost_usd"]) in page.get_by_test_id("stat-spend").inner_text()
    assert usd(team["recoverable_usd"]) in page.get_by_test_id("stat-recoverable").inner_text()
    # Finance's rows of the team add up to the same figure for the month.
    in_finance = sum(Decimal(str(r["cost_usd"])) for r in report["rows"] if r["team"] == team["key"])
    assert usd(float(in_finance)) == usd(team["cost_usd"])

    team_page = api.get_json(f"/api/v1/portal/teams/{team['key']}?period={month}")
    project = team_page["projects"][0]
    page.locator(f'[data-testid="team-projects"] tbody tr[data-row-key="{project["key"]}"]').click()
    page.wait_for_url(f"**/projects/{project['key']}?period={month}")
    assert usd(project["cost_usd"]) in page.get_by_test_id("stat-spend").inner_text()
    assert usd(project["recoverable_usd"]) in page.get_by_test_id("stat-recoverable").inner_text()

    # A run of the project billed wholly inside the month: the run page's cost is its figure there.
    project_page = api.get_json(f"/api/v1/portal/projects/{project['key']}?period={month}")
    first, last = month_bounds(month)
    runs = {r["id"]: r for r in api.get_json(f"/api/v1/portal/runs?project={project['key']}&page_size=200")["results"]}
    span = {key: (r["started_at"][:10], r["ended_at"][:10]) for key, r in runs.items()}
    inside = [r for r in project_page["top_runs"] if first <= span[r["key"]][0] <= span[r["key"]][1] <= last]
    assert inside, "the busiest month has a run that lies wholly inside it"
    run = inside[0]
    page.locator(f'[data-testid="top-runs"] tbody tr[data-row-key="{run["key"]}"]').click()
    page.wait_for_url(f"**/runs/{run['key']}?period={month}")
    assert usd(run["cost_usd"]) in page.get_by_test_id("run-cost").inner_text()
    assert usd(run["recoverable_usd"]) in page.get_by_test_id("run-recoverable").inner_text()
    # The crumbs lead back to the same month.
    assert page.get_by_role("navigation", name="Breadcrumb").get_by_role("link").first.get_attribute("href") == (
        f"/teams/{team['key']}?period={month}"
    )


def test_the_runs_of_a_month_are_the_runs_finance_counts(signed_in: Any, api: Api) -> None:
    page = signed_in
    month, report = _busiest_month(api)
    first, last = month_bounds(month)
    page.goto(f"/finance?month={month}")
    page.get_by_test_id("finance-table").wait_for()
    page.get_by_role("link", name="Runs", exact=True).click()  # the sidebar carries the month
    page.wait_for_url(f"**/runs?from={first}&to={last}")
    runs = report["totals"]["runs"]
    page.get_by_text(re.compile(rf"^{runs} runs? matching 2 filters$")).wait_for()
    listed = api.get_json(f"/api/v1/portal/runs?from={first}&to={last}&page_size=200")
    assert listed["count"] == runs
    # Each run is dated by its billed time: the header says when its GPUs were allocated.
    row = listed["results"][0]
    page.goto(f"/runs/{row['id']}")
    start = datetime.fromisoformat(row["started_at"]).astimezone(UTC)
    shown = f"billed from {start:%b} {start.day}, {start.year}, {start:%H:%M} UTC"
    assert shown in page.get_by_role("heading", level=1).locator("xpath=..").inner_text()


def test_every_table_foots_to_the_cent(signed_in: Any, api: Api, server: Server) -> None:
    page = signed_in
    for run_id, a in _analyses(api, server).items():
        page.goto(f"/runs/{run_id}")
        page.get_by_test_id("breakdown").wait_for()
        body = cells(page, '[data-testid="breakdown"] tr[data-category]')
        total = cells(page, '[data-testid="breakdown-total"]')[0]
        for col in (2, 4):  # cost, recoverable
            assert sum(money(r[col]) for r in body) == money(total[col]), (run_id, col, body, total)
        share = [Decimal(re.search(r"[\d.]+", r[3]).group(0)) for r in body]  # type: ignore[union-attr]
        assert sum(share) == Decimal("100.0") if a["cost_usd"] > 0 else True, (run_id, share)
        hours = [Decimal(re.search(r"([\d,.]+) GPU-h", r[1]).group(1).replace(",", "")) for r in body]  # type: ignore[union-attr]
        assert sum(hours) == Decimal(re.search(r"([\d,.]+) GPU-h", total[1]).group(1).replace(",", "")), (run_id, hours)  # type: ignore[union-attr]

    month, _ = _busiest_month(api)
    page.goto(f"/finance?month={month}")
    page.get_by_test_id("finance-total").wait_for()
    body = cells(page, '[data-testid="finance-table"] tbody tr')
    total = cells(page, '[data-testid="finance-total"]')[0]
    for col in range(1, 11):  # spend, waste, recoverable, lost to failures, six categories
        assert sum(money(r[col]) for r in body) == money(total[col]), (col, [r[col] for r in body], total[col])
    gpu = [Decimal(re.sub(r"[^\d.]", "", r[12])) for r in body]
    assert sum(gpu) == Decimal(re.sub(r"[^\d.]", "", total[12]))
    assert sum(int(r[11].replace(",", "")) for r in body) == int(total[11].replace(",", ""))


def test_a_team_chart_over_30_days_has_30_days_and_a_day_opens_its_runs(signed_in: Any, api: Api) -> None:
    page = signed_in
    team = api.get_json("/api/v1/portal/leaderboards/teams?period=30d")["rows"][0]["key"]
    days = api.get_json(f"/api/v1/portal/teams/{team}")["by_day"]
    assert len(days) == 30
    page.goto(f"/teams/{team}")
    chart = page.locator(".chart[data-points]").first
    chart.wait_for()
    assert chart.get_attribute("data-points") == "30"
    first, last = days[0]["day"], days[-1]["day"]
    assert datetime.fromisoformat(first).strftime("%b") in str(chart.get_attribute("aria-label"))
    assert last > first
    # A click on a day's bar (useful compute, the bottom of each stack) opens that day's runs.
    bars = chart.locator('path[fill="#2f9e6e"]')
    box = chart.bounding_box()
    assert box is not None
    tallest, height = None, 0.0
    for i in range(bars.count()):
        b = bars.nth(i).bounding_box()
        if b and b["y"] > box["y"] + 50 and b["height"] > height:  # below the legend: a bar
            tallest, height = bars.nth(i), b["height"]
    assert tallest is not None, "the chart drew a bar for a day with spend"
    tallest.click(force=True)  # the recoverable line's point may sit on it: either opens the day
    page.wait_for_url(re.compile(rf"/runs\?team={team}&from=(\d{{4}}-\d\d-\d\d)&to=\1$"))
    day = re.search(r"from=([\d-]+)", page.url).group(1)  # type: ignore[union-attr]
    expected = next(d["runs"] for d in days if d["day"] == day)
    page.wait_for_function("n => document.querySelectorAll('[data-testid=runs-table] tbody tr').length === n", arg=expected)


def test_without_a_complete_previous_period_nothing_is_compared(signed_in: Any, api: Api) -> None:
    page = signed_in
    overview = api.get_json("/api/v1/portal/overview?period=90d")
    assert overview["previous_totals"] is None and overview["data_from"]
    page.goto("/?period=90d")
    assert "no previous" in page.get_by_test_id("stat-spend").inner_text()
    assert "the data starts" in page.get_by_test_id("no-previous").inner_text()
    page.goto("/leaderboards?period=90d")
    page.get_by_test_id("leaderboard-teams").wait_for()
    assert "no complete previous period" in page.locator(".page-subtitle").inner_text()


MONEY_HEADERS = {
    "runs-table": ["Cost", "Recoverable"],
    "finance-table": ["Spend", "Waste", "Recoverable"],
    "leaderboard-teams": ["Spend", "Recoverable", "Waste"],
    "breakdown": ["Cost", "Recoverable"],
}

REACHABLE = """([table, names]) => {
  const t = document.querySelector(`[data-testid="${table}"]`);
  const box = t.closest('.table-wrap');
  const wrap = box.getBoundingClientRect();
  const view = Math.min(wrap.right, window.innerWidth);
  const cue = box.parentElement.querySelector('.scroll-cue');
  const cueShown = !!cue && cue.getBoundingClientRect().width > 0;
  return names.map((name) => {
    const th = Array.from(t.querySelectorAll('thead th'))
      .find((h) => h.textContent.trim().toLowerCase().startsWith(name.toLowerCase()));
    if (!th) return [name, 'missing'];
    const r = th.getBoundingClientRect();
    if (r.width === 0) return [name, 'hidden'];
    if (r.left >= wrap.left - 1 && r.right <= view + 1) return [name, 'visible'];
    return [name, cueShown ? 'behind-cue' : 'cut-off'];
  });
}"""


@pytest.mark.parametrize("width", [800, 1280, 1600])
def test_every_money_column_is_visible_or_reachable_with_a_cue(signed_in: Any, api: Api, server: Server, width: int) -> None:
    page = signed_in
    page.set_viewport_size({"width": width, "height": 900})
    month, _ = _busiest_month(api)
    run_id = next(iter(_analyses(api, server)))
    pages = [("/runs", "runs-table"), (f"/finance?month={month}", "finance-table"), ("/leaderboards", "leaderboard-teams")]
    for path, table in [*pages, (f"/runs/{run_id}", "breakdown")]:
        page.goto(path)
        page.get_by_test_id(table).wait_for()
        page.wait_for_timeout(150)  # the scroll cue is measured after layout
        found = dict(page.evaluate(REACHABLE, [table, MONEY_HEADERS[table]]))
        assert all(state in ("visible", "behind-cue") for state in found.values()), (width, path, found)
        for name, state in found.items():
            if state == "behind-cue":  # scrolling the table sideways brings it into view
                header = page.get_by_test_id(table).locator("thead th").filter(has_text=re.compile(rf"^{name}", re.I)).first
                header.scroll_into_view_if_needed()
                assert header.is_visible(), (width, path, name)


SNAKE = re.compile(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b")
LEAKS = [
    (SNAKE, "an internal name"),
    (re.compile(r"\b[A-Z]{2,}_[A-Z_]{2,}\b|\bsee [A-Z]{4,}\b"), "a recommendation code"),
    (re.compile(r"\d\.?\d*e[+-]?\d+", re.I), "exponent form"),
    (re.compile(r"(?<![\d,.])\d{7,}"), "a number without separators"),
    (re.compile(r"\d\.\d{5,}"), "too many decimals"),
    (re.compile(r"\d\s+(ratio|count)\b|\d %|\bratio of steps\b"), "a unit as the analysis names it"),
]
# What people read: the panel or card without the code a reader types and the analysis' raw text.
READABLE = """el => {
  const copy = el.cloneNode(true);
  copy.querySelectorAll('code, .explain-raw, .explain-btn, .visually-hidden').forEach((n) => n.remove());
  const out = [];
  const walk = (n) => { if (n.nodeType === 3) out.push(n.textContent); else n.childNodes.forEach(walk); };
  walk(copy);
  return out.join(' ').replace(/\\s+/g, ' ');
}"""


def _leaks(text: str) -> list[str]:
    return [f"{why}: {m.group(0)!r}" for pattern, why in LEAKS for m in pattern.finditer(text)]


def test_no_explanation_or_recommendation_leaks_an_internal_name_or_an_unformatted_number(
    signed_in: Any, api: Api, server: Server
) -> None:
    page = signed_in
    problems: list[str] = []
    for run_id in _analyses(api, server):
        page.goto(f"/runs/{run_id}")
        page.get_by_test_id("breakdown").wait_for()
        page.locator(".rec-fixes").evaluate_all("ds => ds.forEach(d => d.open = true)")
        for card in page.locator(".rec, [data-testid=straggler], .evidence").all():
            problems += [f"{run_id} card: {p}" for p in _leaks(card.evaluate(READABLE))]
        buttons = page.locator("button.explain-btn")
        for i in range(buttons.count()):
            button = buttons.nth(i)
            if not button.is_visible():
                continue
            label = str(button.get_attribute("aria-label"))
            button.scroll_into_view_if_needed()
            button.click()
            dialog = page.get_by_role("dialog")
            problems += [f"{run_id} {label}: {p}" for p in _leaks(dialog.evaluate(READABLE))]
            page.keyboard.press("Escape")
            dialog.wait_for(state="detached")
    assert not problems, "\n".join(problems[:40])


def test_an_explain_popover_floats_over_the_table_without_scrolling_it(signed_in: Any, api: Api, server: Server) -> None:
    page = signed_in
    run_id = next(iter(_analyses(api, server)))
    page.goto(f"/runs/{run_id}")
    table = page.get_by_test_id("breakdown")
    table.wait_for()
    before = table.evaluate("t => [t.closest('.table-wrap').scrollTop, t.closest('.table-wrap').scrollLeft]")
    table.locator("tbody button.explain-btn").last.click()
    dialog = page.get_by_role("dialog")
    assert dialog.evaluate("d => d.parentElement === document.body && getComputedStyle(d).position === 'fixed'")
    assert table.evaluate("t => [t.closest('.table-wrap').scrollTop, t.closest('.table-wrap').scrollLeft]") == before
    assert table.locator("thead").is_visible()

"""Render a screenshot of each page of the web UI into docs/screenshots/*.png.

    .venv/bin/python scripts/screenshots.py [URL] [--user demo --password phantomhub-demo]

Runs against a running PhantomHub (default http://127.0.0.1:8000, e.g. `make run`), signs in,
and uses headless Chromium from the system (never a downloaded browser). Every page is light,
the overview and the run page also dark; the run page also at 800 px wide (run-detail-narrow)
and with a category's best stretch highlighted on the step-time chart (run-evidence). The pages
with wide tables (runs, finance, the run page, a team, the leaderboards) are also taken at 800,
1,280 and 1,600 px wide (`<page>-<width>.png`, the first screen): every money column is in view
there, or the table shows that it scrolls sideways to it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def settle(page: Page) -> None:
    """Wait until the page's data has arrived and its charts have drawn."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('.state-loading, .is-refreshing')", timeout=20_000)
    page.wait_for_timeout(400)  # ECharts draws on the next frame(s)


def api_json(page: Page, path: str) -> Any:
    return page.evaluate(
        "async (p) => { const r = await fetch(p, {credentials: 'same-origin'}); return r.ok ? r.json() : null; }", path
    )


def pick_run(page: Page) -> str | None:
    """The run page worth showing: the costliest recoverable run with a straggler, else the top one."""
    runs = api_json(page, "/api/v1/portal/runs?sort=-recoverable_usd&page_size=40") or {"results": []}
    ids = [r["id"] for r in runs["results"] if r.get("analysed")]
    for run_id in ids[:40]:
        detail = api_json(page, f"/api/v1/portal/runs/{run_id}")
        analysis = (detail or {}).get("analysis") or {}
        if analysis.get("stragglers") and (detail or {}).get("series") and (detail or {}).get("phases"):
            return run_id
    for run_id in ids[:40]:
        detail = api_json(page, f"/api/v1/portal/runs/{run_id}")
        if detail and (detail.get("analysis") or {}).get("stragglers"):
            return run_id
    return ids[0] if ids else None


def compare_pair(page: Page) -> list[str] | None:
    """Two analysed runs of one project (the costliest recoverable first): what people compare."""
    runs = api_json(page, "/api/v1/portal/runs?sort=-recoverable_usd&page_size=40") or {"results": []}
    by_project: dict[str, list[str]] = {}
    for r in runs["results"]:
        if r.get("analysed"):
            by_project.setdefault(str(r.get("project")), []).append(r["id"])
    return next((ids[:2] for ids in by_project.values() if len(ids) >= 2), None)


def pick_stretch_run(page: Page) -> str | None:
    """The costliest run whose recoverable dollars rest on its own best stretch somewhere."""
    runs = api_json(page, "/api/v1/portal/runs?sort=-recoverable_usd&page_size=40") or {"results": []}
    for row in runs["results"]:
        if not row.get("analysed"):
            continue
        analysis = (api_json(page, f"/api/v1/portal/runs/{row['id']}") or {}).get("analysis") or {}
        for fig in (analysis.get("categories") or {}).values():
            if fig["usd"] > 0 and fig["evidence"]["kind"] == "own_stretch" and fig["evidence"]["window"]:
                return str(row["id"])
    return None


def shoot_evidence(page: Page, out: Path, run_id: str) -> None:
    """The breakdown's evidence and the step-time chart with the first best stretch highlighted."""
    page.goto(f"/runs/{run_id}")
    settle(page)
    control = page.get_by_role("button", name=re.compile(r"^Highlight the .* stretch on the step-time chart$")).first
    if control.count() == 0:
        return
    control.click()
    page.wait_for_timeout(800)  # the smooth scroll, then ECharts redraws
    page.locator("#breakdown").screenshot(path=str(out / "run-evidence.png"))
    page.locator("#step-time").screenshot(path=str(out / "run-stretch.png"))
    print(f"  run-evidence.png, run-stretch.png  ←  /runs/{run_id} (best stretch highlighted)")


def busiest_month(page: Page) -> str:
    now = datetime.now(UTC)
    months = [f"{now:%Y-%m}", f"{(now.replace(day=1) - timedelta(days=1)):%Y-%m}"]
    costs = {m: ((api_json(page, f"/api/v1/portal/finance/{m}") or {}).get("totals") or {}).get("cost_usd", 0) for m in months}
    return max(months, key=lambda m: costs[m])


def shoot(page: Page, out: Path, name: str, path: str, *, full_page: bool = True) -> None:
    page.goto(path)
    settle(page)
    page.screenshot(path=str(out / f"{name}.png"), full_page=full_page)
    print(f"  {name}.png  ←  {path}")


def shoot_widths(page: Page, out: Path, widths: list[int], run_id: str | None, width: int) -> None:
    """The wide-table pages at each width: the first screen, where a money column either shows
    or the table's sideways-scroll cue does."""
    board = api_json(page, "/api/v1/portal/leaderboards/teams?period=30d") or {"rows": []}
    pages = [("runs", "/runs"), ("finance", f"/finance?month={busiest_month(page)}")]
    pages.append(("leaderboards", "/leaderboards?kind=projects"))
    if board["rows"]:
        pages.append(("team", f"/teams/{board['rows'][0]['key']}"))
    if run_id:
        pages.append(("run-detail", f"/runs/{run_id}"))
    for w in widths:
        page.set_viewport_size({"width": w, "height": 900})
        for name, path in pages:
            page.goto(path)
            settle(page)
            if name in ("team", "run-detail"):  # the table further down: the projects, the breakdown
                target = page.locator('[data-testid="team-projects"], [data-testid="breakdown"]').first
                if target.count():
                    target.scroll_into_view_if_needed()
                    page.wait_for_timeout(200)
            page.screenshot(path=str(out / f"{name}-{w}.png"))
            print(f"  {name}-{w}.png  ←  {path}")
    page.set_viewport_size({"width": width, "height": 900})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="phantomhub-demo")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--widths", default="800,1280,1600", help="widths for the wide-table pages (comma-separated)")
    parser.add_argument("--only-widths", action="store_true", help="take only the pages at --widths")
    args = parser.parse_args()
    chromium = os.environ.get("PHANTOMHUB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found (apt-get install chromium)", file=sys.stderr)
        return 2
    if not args.url.startswith(("http://", "https://")):
        print(f"not an http(s) URL: {args.url}", file=sys.stderr)
        return 2
    try:
        urllib.request.urlopen(args.url.rstrip("/") + "/api/v1/health", timeout=5)  # noqa: S310 (scheme checked above)
    except OSError as exc:
        print(f"no PhantomHub at {args.url}: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.url.rstrip("/")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        for scheme in ("light", "dark"):
            context = browser.new_context(
                base_url=base, viewport={"width": args.width, "height": 900}, color_scheme=scheme, device_scale_factor=1
            )
            page = context.new_page()
            suffix = "" if scheme == "light" else "-dark"
            page.goto("/login")
            page.wait_for_load_state("networkidle")
            if scheme == "light":
                page.screenshot(path=str(args.out / "signin.png"))
                print("  signin.png  ←  /login")
            page.get_by_label("Username").fill(args.user)
            page.get_by_label("Password").fill(args.password)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("heading", name="Overview").wait_for()

            run_id = pick_run(page)
            if scheme == "light":
                shoot_widths(page, args.out, [int(w) for w in args.widths.split(",") if w], run_id, args.width)
                if args.only_widths:
                    context.close()
                    break
            shoot(page, args.out, f"overview{suffix}", "/")
            if run_id:
                shoot(page, args.out, f"run-detail{suffix}", f"/runs/{run_id}")
            if scheme == "dark":
                context.close()
                continue
            shoot(page, args.out, "leaderboards", "/leaderboards")
            # Long lists: the first screen is what matters (and keeps the PNGs small).
            shoot(page, args.out, "leaderboards-runs", "/leaderboards?kind=runs", full_page=False)
            shoot(page, args.out, "runs", "/runs", full_page=False)
            if run_id:
                page.goto(f"/runs/{run_id}")
                settle(page)
                page.get_by_role("button", name="How recoverable spend is computed").click()
                page.wait_for_timeout(200)
                page.screenshot(path=str(args.out / "run-explain.png"), clip={"x": 0, "y": 0, "width": args.width, "height": 720})
                print(f"  run-explain.png  ←  /runs/{run_id} (ƒ open)")
                shoot_evidence(page, args.out, pick_stretch_run(page) or run_id)
                page.set_viewport_size({"width": 800, "height": 900})
                shoot(page, args.out, "run-detail-narrow", f"/runs/{run_id}")
                page.set_viewport_size({"width": args.width, "height": 900})
            board = api_json(page, "/api/v1/portal/leaderboards/teams?period=30d") or {"rows": []}
            if board["rows"]:
                team = board["rows"][0]["key"]
                shoot(page, args.out, "team", f"/teams/{team}")
                team_page = api_json(page, f"/api/v1/portal/teams/{team}") or {}
                projects = team_page.get("projects") or []
                if projects:
                    shoot(page, args.out, "project", f"/projects/{projects[0].get('key') or projects[0].get('slug')}")
            shoot(page, args.out, "finance", f"/finance?month={busiest_month(page)}")
            shoot(page, args.out, "budgets", "/budgets")
            shoot(page, args.out, "settings", "/settings")
            shoot(page, args.out, "settings-prices", "/settings?tab=prices")
            shoot(page, args.out, "settings-alerts", "/settings?tab=alerts")
            shoot(page, args.out, "settings-attribution", "/settings?tab=attribution")
            shoot(page, args.out, "settings-tokens", "/settings?tab=tokens")
            shoot(page, args.out, "settings-people", "/settings?tab=people")
            shoot(page, args.out, "settings-reports", "/settings?tab=reports")
            shoot(page, args.out, "audit", "/audit", full_page=False)
            shoot(page, args.out, "fleet", "/fleet?period=30d")
            pair = compare_pair(page)
            if pair:
                shoot(page, args.out, "compare", f"/compare?runs={','.join(pair)}")
            context.close()
        browser.close()
    print(f"screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

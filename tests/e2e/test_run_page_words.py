"""The demo's real CPU training runs (scripts/demo_training.py: healthy, a starved data loader, a
2-rank DDP job with a slow rank, through the agent, billed as an L4 at $0.82/GPU-hour) read in
Chromium at 390, 1,024 and 1,440 px: runs of a fraction of a cent show their split rather than
$0.00 everywhere, the price per GPU-hour is the price, the GPU-hours card agrees with the table,
the words follow the figures (no "Nothing spent on waiting for data" beside a data-starved run),
the headline relates the page's dollar figures, and popovers speak no code.

Its own server (a fresh SQLite, like conftest's), so these runs leave the shared seed alone."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, ROOT, Api, Server, _free_port, missing_reason, served

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a long unit: handed out first (tests/conftest.py)
SCENARIOS = {"healthy": "cpu-healthy", "starved": "cpu-starved-dataloader", "ddp-straggler": "ddp-slow-rank"}
WIDTHS = (390, 1024, 1440)
SCREENSHOT = ROOT / "docs" / "screenshots" / "run.png"
CODE = re.compile(
    r"10⁹|\bsegment[ _]\d|\w_ns\b|round_half_up|\$\d[\d,]*\.(?!0000)\d\d00(?!\d)|\d\.\d{5,}"
    r"|no saving left to claim|one-off run"
)


@pytest.fixture(scope="module")
def cpu_demo() -> Iterator[tuple[Server, dict[str, str]]]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the demo's real CPU runs cannot be trained")
    with tempfile.TemporaryDirectory(prefix="phantomhub-cpu-demo-") as tmp_dir:
        tmp = Path(tmp_dir)
        port = _free_port()
        env = {
            **os.environ,
            "PHANTOMHUB_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "PHANTOMHUB_DEBUG": "1",
            "PHANTOMHUB_VAR_DIR": str(tmp / "var"),
            "PHANTOMHUB_SECURE_COOKIES": "0",
            "PHANTOMHUB_REDIS_URL": "",
            "PHANTOMHUB_PORT": str(port),
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        with served(tmp, env, port) as srv:
            srv.manage("setprice", "--gpu", "L4", "--usd-per-hour", "0.82", "--from", "2020-01-01")
            token = srv.manage("createtoken", "--team", "demo", "--project", "quickstart").strip()
            train_env = {**env, "PHANTOMHUB_SERVER": srv.url, "PHANTOMHUB_TOKEN": token, "PHANTOMHUB_MODE": "online",
                         "PYTHONUNBUFFERED": "1"}  # fmt: skip
            train_env.pop("PHANTOMHUB_RUN_ID", None)
            for scenario in SCENARIOS:
                done = subprocess.run(
                    [sys.executable, str(ROOT / "scripts" / "demo_training.py"), scenario],
                    env=train_env, capture_output=True, text=True, timeout=300, check=False,
                )  # fmt: skip
                assert done.returncode == 0, f"training {scenario} failed:\n{done.stderr[-2000:]}"
            srv.manage("sweep")
            api = Api(srv.url, *ADMIN)
            ids = {row["name"]: row["id"] for row in api.get_json("/api/v1/portal/runs?page_size=200")["results"]}
            assert set(SCENARIOS.values()) <= set(ids), ids
            yield srv, {name: ids[name] for name in SCENARIOS.values()}


VISIBLE_TEXT = "d => { const c = d.cloneNode(true); c.querySelectorAll('details').forEach(n => n.remove()); return c.innerText; }"
WRONG_WORDS = re.compile(r"Nothing spent on (waiting for data|data stall)|no saving left to claim|one-off run")


def _dollars(text: str) -> float:
    m = re.search(r"\$([\d,]+\.\d+)", text)
    assert m, text
    return float(m.group(1).replace(",", ""))


def _sign_in(page: Any) -> None:
    page.goto("/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()


def _explanations(page: Any) -> list[str]:
    """Every ƒ popover's visible text (the raw 'as the analysis writes it' part left out)."""
    said = []
    buttons = page.get_by_role("button", name=re.compile(r"^How .* is computed$"))
    for i in range(buttons.count()):
        button = buttons.nth(i)
        button.scroll_into_view_if_needed()
        button.click()
        dialog = page.get_by_role("dialog")
        said.append(dialog.evaluate(VISIBLE_TEXT))
        page.keyboard.press("Escape")
    return said


def test_the_demo_cpu_runs_read_their_figures_at_three_widths(cpu_demo: tuple[Server, dict[str, str]], browser: Any) -> None:
    srv, ids = cpu_demo
    api = Api(srv.url, *ADMIN)
    for width in WIDTHS:
        context = browser.new_context(base_url=srv.url, viewport={"width": width, "height": 900})
        context.set_default_timeout(15_000)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc, seen=errors: seen.append(str(exc)))
        _sign_in(page)
        for name, run_id in ids.items():
            detail = api.get_json(f"/api/v1/portal/runs/{run_id}")
            a = detail["analysis"]
            assert a is not None and 0 < a["cost_exact_usd"] < 0.10, (name, a and a["cost_exact_usd"])
            page.goto(f"/runs/{run_id}")
            page.get_by_test_id("breakdown").first.wait_for()
            where = f"{name} at {width}px"
            cost = page.get_by_test_id("run-cost").inner_text()
            assert "$0.82 per GPU-hour" in cost, (where, cost)  # the price, not rounded cents over hours
            assert _dollars(cost) > 0, (where, cost)  # a fraction of a cent, shown, not $0.00
            cells = page.locator("table.breakdown tbody tr[data-category] td:nth-child(3)").all_inner_texts()
            parts = [_dollars(c) for c in cells]
            total = _dollars(page.get_by_test_id("breakdown-total").locator("td").nth(1).inner_text())
            assert abs(sum(parts) - total) < 1e-9 and total == _dollars(cost), (where, parts, total)
            card = page.get_by_test_id("run-gpu-hours").locator(".stat-value").inner_text().replace("GPU-h", "").strip()
            # The column gives way on a phone (docs/ui.md, widths): compare with its text, shown or not.
            assert f"{card} GPU-h" in (page.get_by_test_id("breakdown-total").text_content() or ""), (where, card)
            body = page.locator("main").inner_text()
            assert not WRONG_WORDS.search(body), where
            for line in ("headline-recoverable", "headline-recommendations"):
                assert page.get_by_test_id(line).inner_text().strip(), (where, line)
            if name == "cpu-starved-dataloader":
                data = parts[2]
                assert data > 0, (where, cells)  # the data stall's share of a starved run is not $0.00
            if name == "ddp-slow-rank" and width == WIDTHS[0]:
                # The run exists to show a straggler: rank 1, priced by what fixing it saves; and
                # the single-rank demo runs are no baseline for a 2-rank job.
                assert [s["rank"] for s in a["stragglers"]] == [1], a["stragglers"]
                straggler = next(r for r in a["recommendations"] if r["code"] == "STRAGGLER")
                assert straggler["saving_usd"] is None or straggler["saving_usd"] >= 0, straggler
                assert detail["baseline"]["status"] != "compared", detail["baseline"]
                reason = detail["baseline"]["reason"]
                assert "none of this run's shape" in reason or "no finished run" in reason, reason
            overflow = page.evaluate("() => document.scrollingElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, (where, overflow)
            assert not re.search(r"\w_ns\b|\bcomm ns\b", body), where
            if width == 1440 and name == "cpu-starved-dataloader":
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                page.evaluate("() => window.scrollTo(0, 0)")
                page.screenshot(path=str(SCREENSHOT), full_page=False)
            if width == 1440:
                for text in _explanations(page):
                    assert not CODE.search(text), (where, text)
        context.close()
        assert not errors, errors

"""The Content-Security-Policy holds the whole UI: every page of it (frontend/src/App.tsx's routes,
every settings tab), with its charts drawn and their tooltips open, in a real Chromium, makes the
browser refuse nothing, and the header is on the pages, the API's answers and the static files."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import ADMIN, Server

pytestmark = [pytest.mark.e2e, pytest.mark.live_server, pytest.mark.slow]

# Every violation the page sees, as the browser reports it to the page.
LISTEN = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample || ""} at ${e.sourceFile}:${e.lineNumber}`);
});
"""
SETTINGS_TABS = ["organization", "names", "tokens", "prices", "gpus", "attribution", "alerts"]
MUST = ["default-src 'self'", "script-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'self'",
        "form-action 'self'"]  # fmt: skip


def _watch(page: Any) -> list[str]:
    """Console lines about the policy ("Refused to ..."), collected from now on."""
    refused: list[str] = []

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text or message.text.startswith("Refused to"):
            refused.append(message.text)

    page.on("console", on_console)
    page.context.add_init_script(LISTEN)
    return refused


def _visit(page: Any, path: str) -> list[str]:
    """Open `path`, let it load, hover over every chart (ECharts writes its tooltips then), and
    return the violations the page saw."""
    response = page.goto(path)
    assert response is not None and response.ok, path
    _assert_policy(response.headers)
    page.wait_for_load_state("networkidle")
    page.locator("#root > *").first.wait_for()
    for chart in page.locator(".chart").all():
        box = chart.bounding_box()
        if box and box["width"] > 0:
            chart.scroll_into_view_if_needed()
            for fx in (0.3, 0.5, 0.7):
                page.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * 0.5)
                page.wait_for_timeout(150)
    return [f"{path}: {v}" for v in page.evaluate("window.__cspViolations || []")]


def _assert_policy(headers: dict[str, str]) -> None:
    policy = headers.get("content-security-policy", "")
    for directive in MUST:
        assert directive in policy, (directive, policy)


def test_every_page_of_the_ui_runs_under_the_policy_without_a_violation(server: Server, page: Any) -> None:
    refused = _watch(page)
    violations = _visit(page, "/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    first, second = server.run_ids[0], server.run_ids[1]
    paths = [
        "/",
        "/?period=90d",
        "/leaderboards",
        "/leaderboards?kind=runs",
        "/runs",
        f"/runs/{first}",
        f"/runs/{second}?period=7d",
        f"/compare?runs={first},{second}",
        "/teams/nlp",
        "/projects/llm-pretrain",
        "/finance",
        "/fleet",
        *(f"/settings?tab={tab}" for tab in SETTINGS_TABS),
        "/no-such-page",
    ]
    for path in paths:
        violations += _visit(page, path)
    assert not violations and not refused, sorted(set(violations + refused))


def test_the_charts_were_drawn_and_their_tooltips_shown_under_the_policy(server: Server, page: Any) -> None:
    refused = _watch(page)
    page.goto("/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    violations = _visit(page, f"/runs/{server.run_ids[0]}")
    chart = page.locator("#step-time")
    chart.locator("svg").first.wait_for()
    box = chart.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_timeout(300)
    violations += [f"tooltip: {v}" for v in page.evaluate("window.__cspViolations")]
    assert not violations and not refused, violations + refused


def test_the_api_documentation_and_the_admin_sign_in_run_under_it_too(server: Server, page: Any) -> None:
    refused = _watch(page)
    page.goto("/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    response = page.goto("/api/docs/")
    assert response is not None and response.ok
    _assert_policy(response.headers)
    page.locator(".swagger-ui .info").first.wait_for()
    violations = [f"docs: {v}" for v in page.evaluate("window.__cspViolations")]
    response = page.goto("/admin/login/")
    assert response is not None and response.ok
    _assert_policy(response.headers)
    page.wait_for_load_state("networkidle")
    violations += [f"admin: {v}" for v in page.evaluate("window.__cspViolations")]
    assert not violations and not refused, violations + refused


def test_the_header_is_on_api_answers_and_static_files(server: Server, page: Any) -> None:
    page.goto("/login")
    api = page.request.get("/api/v1/portal/session")
    assert api.ok
    _assert_policy(api.headers)
    script = page.locator("script[type=module]").first.get_attribute("src")
    asset = page.request.get(str(script))
    assert asset.ok
    _assert_policy(asset.headers)
    shell = page.request.get("/index.html")  # the built page as WhiteNoise answers it
    assert shell.ok
    _assert_policy(shell.headers)

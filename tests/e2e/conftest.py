"""Browser tests: a real PhantomHub (gunicorn, temporary SQLite) seeded through the ingest API,
driven by Playwright with the system's Chromium. Skipped, with the reason, when Chromium or the
built UI (frontend/dist) is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port as _free_port  # this xdist worker's own ports
from tests.e2e.seed import PROJECTS, seed

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "frontend" / "dist" / "index.html"
ADMIN = ("e2e-admin", "e2e-password-1234")
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: browser test against a real server (needs chromium and frontend/dist)")


def chromium_path() -> str | None:
    return os.environ.get("PHANTOMHUB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def missing_reason() -> str | None:
    if chromium_path() is None:
        return "chromium is not installed (apt-get install chromium)"
    if not DIST.is_file():
        return "the web UI is not built (cd frontend && npm ci && npm run build)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed"
    return None


@dataclass
class Server:
    url: str
    env: dict[str, str]
    run_ids: list[str]

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout


class Api:
    """The portal API as the signed-in admin sees it (session cookie), for checking the UI's figures."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        import http.cookiejar

        self.base_url = base_url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        session = self.get_json("/api/v1/portal/session")
        self._request(
            "POST",
            "/api/v1/portal/session",
            {"username": username, "password": password},
            {"X-CSRFToken": session["csrf_token"], "Referer": base_url + "/"},
        )

    def _request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with self.opener.open(req, timeout=30) as response:
            return bytes(response.read())

    def get_json(self, path: str) -> Any:
        return json.loads(self._request("GET", path))

    def get_text(self, path: str) -> str:
        return self._request("GET", path).decode()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("phantomhub-e2e")
    port = _free_port()
    env = {
        **os.environ,
        "PHANTOMHUB_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "PHANTOMHUB_DEBUG": "1",
        "PHANTOMHUB_VAR_DIR": str(tmp / "var"),
        "PHANTOMHUB_SECURE_COOKIES": "0",
        "PHANTOMHUB_REDIS_URL": "",
        "PHANTOMHUB_PORT": str(port),
        "PHANTOMHUB_EGRESS_ALLOW_NETWORKS": "127.0.0.1/32",  # the alert tests' local receiver (phantomhub/egress.py)
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    with served(tmp, env, port) as srv:
        tokens = {project: srv.manage("createtoken", "--team", team, "--project", project).strip() for team, project in PROJECTS}
        srv.run_ids = seed(srv.url, tokens)
        srv.manage("sweep")
        yield srv


@contextmanager
def served(tmp: Path, env: dict[str, str], port: int) -> Iterator[Server]:
    """A PhantomHub of its own on ``port`` (its database and var directory in ``env``): migrated,
    the organization admin ADMIN made, gunicorn serving until the block ends."""
    srv = Server(url=f"http://127.0.0.1:{port}", env=env, run_ids=[])
    srv.manage("migrate", "--no-input", "-v", "0")
    srv.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; from phantomhub.accounts.models import Profile; "
        f"u = get_user_model().objects.create_user({ADMIN[0]!r}, password={ADMIN[1]!r}); "
        "Profile.objects.create(user=u, is_org_admin=True)",
    )
    log = (tmp / "gunicorn.log").open("w")
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2",
         "--threads", "4", "--timeout", "60"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait_healthy(srv.url, gunicorn, tmp / "gunicorn.log")
        yield srv
    finally:
        gunicorn.terminate()
        try:
            gunicorn.wait(timeout=10)
        except subprocess.TimeoutExpired:
            gunicorn.kill()
        log.close()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/api/v1/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"PhantomHub did not answer on {url} within 30 s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def api(server: Server) -> Api:
    return Api(server.url, *ADMIN)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright, for one module's tests.

    A module's browser, not the session's: Playwright's sync API keeps an event loop running in
    this thread while it is open, and Django refuses database calls from a thread with a running
    loop, so a test that runs after the e2e modules on the same xdist worker must find it closed."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    context = browser.new_context(base_url=server.url, viewport={"width": 1440, "height": 900}, accept_downloads=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def signed_in(page: Any) -> Any:
    """A page signed in as the organization admin through the sign-in form."""
    page.goto("/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    return page

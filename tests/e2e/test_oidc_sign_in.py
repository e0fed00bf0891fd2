"""Single sign-on end to end: a real OpenID provider (oidc-provider, tests/e2e/oidc/provider.mjs),
a real PhantomHub (gunicorn) configured against it with local passwords off, and Chromium going
through the provider's own login page.

Proven here: sign-in lands with the access the group mapping gives; a group removed at the provider
takes that access away at the next request after the refresh; a person removed at the provider is
signed out there; local passwords off (no form, POST and admin refused, the break-glass link works
once); sign-out ends the provider's session; and every refusal (wrong issuer, wrong audience, an
expired ID token, a missing or another nonce, a replayed or missing state, the provider's
access_denied) shows its sentence on the sign-in page, never a 500. The refusals are real: the
provider's test switch re-signs the ID token with its own key, so only PhantomHub's checks stop it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.e2e.conftest import ADMIN, Server, chromium, missing_reason, served

pytestmark = [pytest.mark.e2e, pytest.mark.live_server]

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc"
CLIENT_ID, CLIENT_SECRET = "phantomhub", "test-client-secret-not-for-production"
REFRESH_S = 2
LABEL = "Sign in with Example SSO"
USERS: dict[str, dict[str, Any]] = {
    "sub-ann": {"username": "ann", "password": "ann-pass", "email": "ann@example.com", "groups": ["ml-nlp-leads"]},
    "sub-bob": {"username": "bob", "password": "bob-pass", "email": "bob@example.com", "groups": ["ml-nlp-leads", "staff"]},
    "sub-cyd": {"username": "cyd", "password": "cyd-pass", "email": "cyd@example.com", "groups": ["staff"]},
    # Same name as the local organization admin: must become a person of its own, never that one.
    "sub-e2e": {"username": ADMIN[0], "password": "imposter-pass", "email": "x@example.com", "groups": []},
}
SENTENCES = {
    "wrong_issuer": "issued by another provider (wrong issuer)",
    "wrong_audience": "issued for another application (wrong audience)",
    "token_expired": "had already expired",
    "nonce_mismatch": "does not belong to this sign-in (missing or wrong nonce)",
    "state_mismatch": "already used, expired, or belongs to another browser",
    "state_missing": "carried no sign-in state",
    "access_denied": "did not sign you in",
    "session_ended": "Your single sign-on session has ended; sign in again.",
    "breakglass_invalid": "emergency sign-in link is invalid, expired or already used",
}


@dataclass
class Stack:
    server: Server
    issuer: str
    users_file: Path
    log: Path

    def users_set(self, users: dict[str, dict[str, Any]]) -> None:
        self.users_file.write_text(json.dumps({"client": _client(self.server.url), "users": users}))

    def tamper(self, how: str) -> None:
        body = f"tamper={how}".encode()
        with urllib.request.urlopen(urllib.request.Request(f"{self.issuer}/_test/next-id-token", data=body), timeout=10) as r:
            assert r.status == 200


def _client(url: str) -> dict[str, Any]:
    return {
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": [f"{url}/api/v1/auth/oidc/callback"],
        "post_logout_redirect_uris": [f"{url}/login"],
    }


def _wait_for(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the OpenID provider exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the OpenID provider did not answer within 30 s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    if shutil.which("node") is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.skip("the test OpenID provider is not installed (make oidc-provider)")
    tmp = tmp_path_factory.mktemp("phantomhub-oidc")
    port, provider_port = free_port(), free_port()
    issuer, url = f"http://127.0.0.1:{provider_port}", f"http://127.0.0.1:{port}"
    users_file = tmp / "provider.json"
    users_file.write_text(json.dumps({"client": _client(url), "users": USERS}))
    provider_log = tmp / "provider.log"
    with provider_log.open("w") as out:
        provider = subprocess.Popen(
            ["node", "provider.mjs", "--port", str(provider_port), "--config", str(users_file)],
            cwd=PROVIDER_DIR, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_for(f"{issuer}/.well-known/openid-configuration", provider, provider_log)
        env = {
            **os.environ,
            "PHANTOMHUB_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "PHANTOMHUB_DEBUG": "1",
            "PHANTOMHUB_VAR_DIR": str(tmp / "var"),
            "PHANTOMHUB_SECURE_COOKIES": "0",
            "PHANTOMHUB_REDIS_URL": "",
            "PHANTOMHUB_PORT": str(port),
            "PHANTOMHUB_PUBLIC_URL": url,
            "PHANTOMHUB_OIDC_ISSUER": issuer,
            "PHANTOMHUB_OIDC_CLIENT_ID": CLIENT_ID,
            "PHANTOMHUB_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "PHANTOMHUB_OIDC_LABEL": LABEL,
            "PHANTOMHUB_OIDC_REFRESH_S": str(REFRESH_S),
            "PHANTOMHUB_LOCAL_PASSWORDS": "0",
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        with served(tmp, env, port) as srv:
            srv.manage(
                "shell",
                "-c",
                "from phantomhub.accounts.models import GroupMappingRule, Project, Team; "
                "nlp = Team.objects.create(slug='nlp', name='nlp'); "
                "Project.objects.create(team=nlp, slug='llm', name='llm'); "
                "GroupMappingRule.objects.create(pattern='ml-*-leads', grant='team_lead', team=nlp); "
                "GroupMappingRule.objects.create(pattern='staff', grant='team_viewer', team=nlp)",
            )
            yield Stack(server=srv, issuer=issuer, users_file=users_file, log=tmp / "gunicorn.log")
    finally:
        provider.terminate()
        provider.wait(timeout=10)


@pytest.fixture(scope="module")
def sso_browser(stack: Stack) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(sso_browser: Any, stack: Stack) -> Iterator[Any]:
    stack.users_set(USERS)
    context = sso_browser.new_context(base_url=stack.server.url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    server_errors: list[int] = []
    page.on("response", lambda r: server_errors.append(r.status) if r.status >= 500 else None)
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
    assert not server_errors, f"server errors: {server_errors}\n{stack.log.read_text()[-3000:]}"


def _provider_sign_in(page: Any, username: str, password: str, *, start: str = "/login") -> None:
    """From PhantomHub's sign-in page (where `start` leads a signed-out visitor), through the
    provider's login page."""
    page.goto(start)
    page.get_by_role("link", name=LABEL).click()
    page.get_by_label("Provider username").fill(username)
    page.get_by_label("Provider password").fill(password)
    page.get_by_role("button", name="Continue").click()


def _session(page: Any) -> Any:
    return page.request.get("/api/v1/portal/session")


def _csrf(page: Any) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")


def _team_rename(page: Any, name: str) -> int:
    """A team lead's write: the nlp team's display name (403 for anyone else)."""
    response = page.request.patch(
        "/api/v1/portal/teams/nlp",
        data=json.dumps({"display_name": name}),
        headers={"Content-Type": "application/json", "X-CSRFToken": _csrf(page), "Referer": page.url},
    )
    return int(response.status)


def _refused_with(page: Any, code: str) -> None:
    page.wait_for_url(re.compile(rf"/login\?error={code}$"))
    assert SENTENCES[code] in page.get_by_role("alert").inner_text()


def test_sign_in_through_the_provider_lands_with_the_mapped_access(page: Any) -> None:
    _provider_sign_in(page, "ann", "ann-pass", start="/runs?status=failed")
    page.get_by_role("heading", name="Runs").wait_for()  # back where the visitor was going
    assert page.url.endswith("/runs?status=failed")
    session = _session(page).json()
    assert session["user"]["username"] == "ann"
    assert session["user"]["teams"] == [{"slug": "nlp", "name": "nlp", "role": "admin"}]  # ml-*-leads: team lead
    assert _team_rename(page, "NLP") == 200


def test_a_provider_user_named_like_a_local_account_is_a_person_of_their_own(page: Any, stack: Stack) -> None:
    _provider_sign_in(page, ADMIN[0], "imposter-pass")
    page.get_by_role("heading", name="Overview").wait_for()
    user = _session(page).json()["user"]
    assert user["username"] == f"{ADMIN[0]}-2"
    assert user["is_org_admin"] is False


def test_a_group_removed_at_the_provider_loses_its_access_at_the_next_request_after_the_refresh(page: Any, stack: Stack) -> None:
    _provider_sign_in(page, "bob", "bob-pass")
    page.get_by_role("heading", name="Overview").wait_for()
    assert _team_rename(page, "NLP") == 200
    stack.users_set({**USERS, "sub-bob": {**USERS["sub-bob"], "groups": ["staff"]}})  # out of ml-nlp-leads
    time.sleep(REFRESH_S + 0.5)
    assert _team_rename(page, "NLP team") == 403  # the next request refreshed: lead no more
    assert _session(page).json()["user"]["teams"] == [{"slug": "nlp", "name": "NLP", "role": "viewer"}]  # staff: viewer


def test_a_person_removed_at_the_provider_is_signed_out_at_the_refresh(page: Any, stack: Stack) -> None:
    _provider_sign_in(page, "cyd", "cyd-pass")
    page.get_by_role("heading", name="Overview").wait_for()
    stack.users_set({k: v for k, v in USERS.items() if k != "sub-cyd"})
    time.sleep(REFRESH_S + 0.5)
    page.get_by_role("link", name="Runs").click()  # the UI's next request meets the ended session
    _signed_out = page.get_by_role("alert")
    _signed_out.wait_for()
    assert SENTENCES["session_ended"] in _signed_out.inner_text()
    assert page.get_by_role("link", name=LABEL).is_visible()
    assert _session(page).json()["authenticated"] is False


def test_sign_out_ends_the_provider_session_too(page: Any) -> None:
    _provider_sign_in(page, "ann", "ann-pass")
    page.get_by_role("heading", name="Overview").wait_for()
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="Yes, sign me out").click()  # the provider's own end-session page
    page.wait_for_url(re.compile(r"/login$"))
    page.get_by_role("link", name=LABEL).click()
    page.get_by_label("Provider username").wait_for()  # asked again: the provider's session is gone


def test_local_passwords_off_leaves_only_single_sign_on_and_the_break_glass_link(page: Any, stack: Stack) -> None:
    _provider_sign_in(page, "ann", "ann-pass")  # ann (a team lead, no org admin) exists, whatever ran before
    page.context.clear_cookies()
    page.goto("/login")
    page.get_by_role("link", name=LABEL).wait_for()
    assert page.get_by_label("Password").count() == 0
    session = _session(page).json()
    assert session["sign_in"] == {"oidc": {"label": LABEL, "url": "/api/v1/auth/oidc/start"}, "local_passwords": False}
    refused = page.request.post(
        "/api/v1/portal/session",
        data=json.dumps({"username": ADMIN[0], "password": ADMIN[1]}),
        headers={"Content-Type": "application/json", "X-CSRFToken": _csrf(page), "Referer": page.url},
    )
    assert refused.status == 403 and refused.json()["error"]["code"] == "local_passwords_off"
    page.goto("/admin/login/")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Log in").click()
    assert "Password sign-in is switched off" in page.locator(".errornote, .errorlist").first.inner_text()

    with pytest.raises(RuntimeError, match="not an organization admin"):
        stack.server.manage("breakglass", "ann")
    link = stack.server.manage("breakglass", ADMIN[0]).strip()
    page.goto(link)
    page.get_by_role("heading", name="Overview").wait_for()
    assert _session(page).json()["user"]["username"] == ADMIN[0]
    page.context.clear_cookies()
    page.goto(link)  # once only
    _refused_with(page, "breakglass_invalid")


@pytest.mark.parametrize(
    ("tamper", "code"),
    [
        ("wrong_iss", "wrong_issuer"),
        ("wrong_aud", "wrong_audience"),
        ("expired", "token_expired"),
        ("no_nonce", "nonce_mismatch"),
        ("other_nonce", "nonce_mismatch"),
    ],
)
def test_an_id_token_that_fails_a_check_is_refused_with_its_sentence(page: Any, stack: Stack, tamper: str, code: str) -> None:
    stack.tamper(tamper)
    _provider_sign_in(page, "ann", "ann-pass")
    _refused_with(page, code)
    assert _session(page).json()["authenticated"] is False
    assert f"OIDC sign-in refused ({code})" in stack.log.read_text()


def test_a_replayed_callback_is_refused(page: Any) -> None:
    callbacks: list[str] = []
    page.on("request", lambda r: callbacks.append(r.url) if "/api/v1/auth/oidc/callback" in r.url else None)
    _provider_sign_in(page, "ann", "ann-pass")
    page.get_by_role("heading", name="Overview").wait_for()
    assert len(callbacks) == 1
    page.goto(callbacks[0])  # the same code and state again, in the same browser
    _refused_with(page, "state_mismatch")
    assert _session(page).json()["authenticated"] is False  # a refused sign-in leaves nobody signed in


def test_a_callback_without_state_is_refused(page: Any) -> None:
    page.goto("/api/v1/auth/oidc/callback?code=forged")
    _refused_with(page, "state_missing")


def test_a_sign_in_cancelled_at_the_provider_is_explained(page: Any) -> None:
    page.goto("/login")
    page.get_by_role("link", name=LABEL).click()
    page.get_by_role("link", name="Cancel").click()
    _refused_with(page, "access_denied")

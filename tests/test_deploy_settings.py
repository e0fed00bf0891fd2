"""Deploy settings from PHANTOMHUB_* variables: HTTPS (redirect, HSTS, secure cookies), proxies,
the metrics token. `check --deploy` is clean with the production environment that
docs/deployment.md gives, bad values stop start-up, and gunicorn believes forwarded headers only
from the configured proxies."""

from __future__ import annotations

import http.client
import os
import re
import runpy
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from phantomhub.env import ConfigError
from tests.conftest import free_port as _free_port  # this xdist worker's own ports

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "deployment.md").read_text()
REDIS_URL = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
HOST = "phantomhub.example.com"
BASE = {"PHANTOMHUB_SECRET_KEY": "deploy-tests-" + "k" * 50, "PHANTOMHUB_DATABASE_URL": "postgres://u@127.0.0.1:5432/db"}


def _documented_production_env() -> dict[str, str]:
    """The /etc/phantomhub.env of docs/deployment.md, with its <placeholders> filled in."""
    block = re.search(r"cat > /etc/phantomhub\.env <<'ENV'\n(.*?)\nENV\n", DOCS, re.S)
    assert block is not None, "docs/deployment.md lost its production environment"
    env: dict[str, str] = {}
    for line in block.group(1).splitlines():
        name, _, value = line.partition("=")
        env[name] = secrets.token_urlsafe(48) if value.startswith("<") else value
    return env


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """phantomhub/settings.py as a process started with exactly these PHANTOMHUB_* variables sees it."""
    for name in list(os.environ):
        if name.startswith("PHANTOMHUB_"):
            monkeypatch.delenv(name)
    for name, value in {**BASE, **env}.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "phantomhub" / "settings.py"))


def _clean_env(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_") and k != "DJANGO_SETTINGS_MODULE"}
    return {**base, "DJANGO_SETTINGS_MODULE": "phantomhub.settings", **env}


def test_check_deploy_is_clean_with_the_documented_production_environment(tmp_path: Path) -> None:
    env = _clean_env(**_documented_production_env(), PHANTOMHUB_VAR_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_https_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    production = _settings(monkeypatch, **_documented_production_env())
    assert production["DEBUG"] is False
    assert production["SECURE_SSL_REDIRECT"] is True
    assert production["SECURE_HSTS_SECONDS"] == 31_536_000
    assert production["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True and production["SECURE_HSTS_PRELOAD"] is True
    assert production["SESSION_COOKIE_SECURE"] is True and production["CSRF_COOKIE_SECURE"] is True
    assert production["CSRF_TRUSTED_ORIGINS"] == [f"https://{HOST}"]
    assert production["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    plain = _settings(monkeypatch, PHANTOMHUB_SECURE_COOKIES="0")
    assert plain["SECURE_SSL_REDIRECT"] is False and plain["SECURE_HSTS_SECONDS"] == 0
    assert plain["SESSION_COOKIE_SECURE"] is False and plain["CSRF_COOKIE_SECURE"] is False
    assert _settings(monkeypatch)["SESSION_COOKIE_SECURE"] is True  # secure unless said otherwise
    assert _settings(monkeypatch, PHANTOMHUB_DEBUG="1")["SESSION_COOKIE_SECURE"] is False


def test_the_proxy_ssl_header_is_read_only_when_proxies_are_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settings(monkeypatch)["SECURE_PROXY_SSL_HEADER"] is None
    assert _settings(monkeypatch)["TRUSTED_PROXIES"] == []
    proxied = _settings(monkeypatch, PHANTOMHUB_TRUSTED_PROXIES="10.0.0.0/8, 192.0.2.7,::1")
    assert proxied["TRUSTED_PROXIES"] == ["10.0.0.0/8", "192.0.2.7", "::1"]
    assert proxied["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PHANTOMHUB_HSTS_SECONDS": "a year"}, "PHANTOMHUB_HSTS_SECONDS"),
        ({"PHANTOMHUB_HSTS_SECONDS": "-1"}, "PHANTOMHUB_HSTS_SECONDS"),
        ({"PHANTOMHUB_HSTS_INCLUDE_SUBDOMAINS": "1"}, "PHANTOMHUB_HSTS_SECONDS"),
        ({"PHANTOMHUB_HSTS_SECONDS": "31536000", "PHANTOMHUB_HSTS_PRELOAD": "1"}, "PHANTOMHUB_HSTS_INCLUDE_SUBDOMAINS"),
        ({"PHANTOMHUB_HSTS_SECONDS": "3600", "PHANTOMHUB_HSTS_INCLUDE_SUBDOMAINS": "1", "PHANTOMHUB_HSTS_PRELOAD": "1"},
         "PHANTOMHUB_HSTS_SECONDS >= 31536000"),
        ({"PHANTOMHUB_SSL_REDIRECT": "sometimes"}, "PHANTOMHUB_SSL_REDIRECT"),
        ({"PHANTOMHUB_SECURE_COOKIES": "2"}, "PHANTOMHUB_SECURE_COOKIES"),
        ({"PHANTOMHUB_TRUSTED_PROXIES": "proxy.internal"}, "PHANTOMHUB_TRUSTED_PROXIES"),
        ({"PHANTOMHUB_TRUSTED_PROXIES": "10.0.0.1/8"}, "PHANTOMHUB_TRUSTED_PROXIES"),  # host bits set: a typo
        ({"PHANTOMHUB_CSRF_TRUSTED_ORIGINS": HOST}, "PHANTOMHUB_CSRF_TRUSTED_ORIGINS"),
        ({"PHANTOMHUB_CSRF_TRUSTED_ORIGINS": f"https://{HOST}/app"}, "PHANTOMHUB_CSRF_TRUSTED_ORIGINS"),
        ({"PHANTOMHUB_INGEST_RATE": "fast"}, "PHANTOMHUB_INGEST_RATE"),
        ({"PHANTOMHUB_INGEST_RATE": "0/min"}, "PHANTOMHUB_INGEST_RATE"),
        ({"PHANTOMHUB_METRICS_PUBLIC": "1", "PHANTOMHUB_METRICS_TOKEN": "m" * 32}, "PHANTOMHUB_METRICS_PUBLIC"),
        ({"PHANTOMHUB_METRICS_TOKEN": "short"}, "PHANTOMHUB_METRICS_TOKEN"),
        ({"PHANTOMHUB_REDIS_URL": "http://redis:6379"}, "PHANTOMHUB_REDIS_URL"),
        ({"PHANTOMHUB_FINANCE_PDF_MAX_ROWS": "5"}, "PHANTOMHUB_FINANCE_PDF_MAX_ROWS"),  # below 10
        ({"PHANTOMHUB_FINANCE_PDF_MAX_ROWS": "all"}, "PHANTOMHUB_FINANCE_PDF_MAX_ROWS"),
    ],
)  # fmt: skip
def test_a_bad_value_stops_start_up_naming_the_variable(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        _settings(monkeypatch, **env)


# -- /metrics ------------------------------------------------------------------------------------


def _metrics_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    conf = _settings(monkeypatch, **env)
    return override_settings(DEBUG=conf["DEBUG"], METRICS_TOKEN=conf["METRICS_TOKEN"], METRICS_PUBLIC=conf.get("METRICS_PUBLIC"))


@pytest.mark.django_db
def test_metrics_are_closed_without_a_token_when_not_debugging(monkeypatch: pytest.MonkeyPatch) -> None:
    with _metrics_settings(monkeypatch):
        refused = Client().get("/metrics")
        assert refused.status_code == 403
        assert b"PHANTOMHUB_METRICS_TOKEN" in refused.content and b"phantomhub_cost_usd" not in refused.content
        assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 403


@pytest.mark.django_db
def test_metrics_with_a_token_need_it_as_a_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    token = secrets.token_urlsafe(24)
    with _metrics_settings(monkeypatch, PHANTOMHUB_METRICS_TOKEN=token):
        assert Client().get("/metrics").status_code == 401
        assert Client().get("/metrics").headers["WWW-Authenticate"].startswith("Bearer")
        assert Client().get("/metrics", HTTP_AUTHORIZATION=token).status_code == 401  # no scheme
        assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Basic {token}").status_code == 401
        allowed = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert allowed.status_code == 200 and b"phantomhub_cost_usd" in allowed.content


@pytest.mark.django_db
def test_metrics_can_be_opened_explicitly_and_are_open_when_debugging(monkeypatch: pytest.MonkeyPatch) -> None:
    with _metrics_settings(monkeypatch, PHANTOMHUB_METRICS_PUBLIC="1"):
        assert Client().get("/metrics").status_code == 200
    with _metrics_settings(monkeypatch, PHANTOMHUB_DEBUG="1"):
        assert Client().get("/metrics").status_code == 200
    with _metrics_settings(monkeypatch, PHANTOMHUB_DEBUG="1", PHANTOMHUB_METRICS_PUBLIC="0"):
        assert Client().get("/metrics").status_code == 403


# -- gunicorn and forwarded headers --------------------------------------------------------------


def test_gunicorn_trusts_no_forwarded_headers_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PHANTOMHUB_"):
            monkeypatch.delenv(name)
    for config in ("gunicorn.py", "gunicorn_embedded.py"):
        conf = runpy.run_path(str(ROOT / "deploy" / config))
        assert conf["forwarded_allow_ips"] == ""  # gunicorn's own default would trust 127.0.0.1
        assert conf["bind"] == "0.0.0.0:8000" and conf["workers"] == 4
        assert callable(conf["pre_request"]) and callable(conf["post_worker_init"])
    monkeypatch.setenv("PHANTOMHUB_TRUSTED_PROXIES", "10.0.0.0/8,192.0.2.7")
    conf = runpy.run_path(str(ROOT / "deploy" / "gunicorn.py"))
    assert conf["forwarded_allow_ips"] == "10.0.0.0/8,192.0.2.7"
    assert conf["peer_is_trusted"](("10.20.30.40", 5000)) and conf["peer_is_trusted"](("192.0.2.7", 1))
    assert not conf["peer_is_trusted"](("192.0.2.8", 1)) and not conf["peer_is_trusted"](("127.0.0.1", 1))
    monkeypatch.setenv("PHANTOMHUB_TRUSTED_PROXIES", "nginx")
    with pytest.raises(ConfigError, match="PHANTOMHUB_TRUSTED_PROXIES"):
        runpy.run_path(str(ROOT / "deploy" / "gunicorn.py"))


def _get(port: int, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


@pytest.fixture(scope="module", params=["192.0.2.1", "127.0.0.1"], ids=["proxy-elsewhere", "proxy-on-loopback"])
def production_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    """gunicorn with deploy/gunicorn.py and a production-like environment; yields (port, trusted proxies)."""
    tmp = tmp_path_factory.mktemp("production")
    port = _free_port()
    env = _clean_env(
        PHANTOMHUB_SECRET_KEY=secrets.token_urlsafe(48),
        PHANTOMHUB_DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        PHANTOMHUB_REDIS_URL=REDIS_URL,  # a broker: no in-process sweeper on this empty database
        PHANTOMHUB_VAR_DIR=str(tmp),
        PHANTOMHUB_ALLOWED_HOSTS=HOST,
        PHANTOMHUB_SSL_REDIRECT="1",
        PHANTOMHUB_HSTS_SECONDS="3600",
        PHANTOMHUB_TRUSTED_PROXIES=request.param,
        PHANTOMHUB_LOG_LEVEL="WARNING",
    )
    log = (tmp / "gunicorn.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--config", "deploy/gunicorn.py",
         "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError((tmp / "gunicorn.log").read_text())
            try:
                _get(port, "/api/v1/health", {"Host": HOST})
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield port, request.param
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        log.close()


@pytest.mark.live_server
def test_forwarded_proto_counts_only_from_a_trusted_proxy(production_server: tuple[int, str]) -> None:
    port, trusted = production_server
    spoofable = {"Host": HOST, "X-Forwarded-Proto": "https"}
    answer = _get(port, "/api/v1/portal/runs", spoofable)
    if trusted == "127.0.0.1":  # the test's requests come from the proxy
        assert answer.status == 401, answer.status  # served as https: no redirect, the API answers
        assert answer.headers["Strict-Transport-Security"] == "max-age=3600"
    else:  # a client talking to gunicorn directly cannot claim https
        assert answer.status == 301 and answer.headers["Location"] == f"https://{HOST}/api/v1/portal/runs"
        assert answer.headers["Strict-Transport-Security"] is None
    plain = _get(port, "/api/v1/portal/runs", {"Host": HOST})
    assert plain.status == 301  # plain http is redirected either way


@pytest.mark.live_server
def test_the_container_healthcheck_passes_with_a_real_allowed_hosts(production_server: tuple[int, str]) -> None:
    port, _ = production_server
    assert _get(port, "/api/v1/health", {"Host": f"127.0.0.1:{port}"}).status == 400  # what compose used to send
    env = {**_clean_env(), "PHANTOMHUB_PORT": str(port), "PHANTOMHUB_ALLOWED_HOSTS": f"{HOST},.example.org"}
    done = subprocess.run([sys.executable, "deploy/healthcheck.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    env["PHANTOMHUB_ALLOWED_HOSTS"] = "other.example.net"
    done = subprocess.run([sys.executable, "deploy/healthcheck.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 1 and "400" in done.stderr  # a check that cannot fail proves nothing

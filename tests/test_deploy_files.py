"""docker compose cannot run on CI machines; these tests keep the Docker files honest instead."""

from __future__ import annotations

import importlib.util
import os
import re
import runpy
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
ENTRYPOINT = (ROOT / "deploy" / "entrypoint.sh").read_text()


def _settings_env_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "phantomhub").rglob("*.py"):
        if "demo" in path.parts:  # the demo sets the agent's variables for its training runs
            continue
        names |= set(re.findall(r'"(PHANTOMHUB_[A-Z_]+)"', path.read_text()))
    for path in (ROOT / "deploy").iterdir():  # gunicorn's config, the healthcheck, the entrypoint
        names |= set(re.findall(r"\b(PHANTOMHUB_[A-Z_]+)\b", path.read_text()))
    return names


def _healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compose_runs_web_worker_and_beat_from_one_image_beside_postgres_and_redis() -> None:
    services = COMPOSE["services"]
    assert set(services) == {"web", "worker", "beat", "postgres", "redis"}
    app = [services[name] for name in ("web", "worker", "beat")]
    assert len({s["image"] for s in app}) == 1
    assert all(s["environment"] == app[0]["environment"] for s in app)
    assert [s["command"] for s in app] == [["web"], ["worker"], ["beat"]]
    for role in ("web", "worker", "beat"):
        assert re.search(rf"^\s+{role}\)$", ENTRYPOINT, re.M), role
    for dep in ("postgres", "redis"):
        assert app[0]["depends_on"][dep]["condition"] == "service_healthy"


def test_compose_environment_uses_only_settings_that_exist() -> None:
    env = COMPOSE["services"]["web"]["environment"]
    assert set(env) <= _settings_env_names()
    db = env["PHANTOMHUB_DATABASE_URL"]
    pg = COMPOSE["services"]["postgres"]["environment"]
    assert db == f"postgres://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/{pg['POSTGRES_DB']}"
    assert env["PHANTOMHUB_REDIS_URL"].startswith("redis://redis:6379/")


def test_compose_healthcheck_and_port_match_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    web = COMPOSE["services"]["web"]
    assert web["healthcheck"]["test"] == ["CMD", "python", "/app/deploy/healthcheck.py"]
    assert re.search(r"^WORKDIR /app$", DOCKERFILE, re.M) and re.search(r"^COPY deploy \./deploy$", DOCKERFILE, re.M)
    assert _healthcheck().PATH == "/api/v1/health"
    assert web["ports"] == ["8000:8000"]
    assert "EXPOSE 8000" in DOCKERFILE
    assert "gunicorn phantomhub.wsgi --config /app/deploy/gunicorn.py" in ENTRYPOINT
    assert "forwarded-allow-ips" not in ENTRYPOINT  # it comes from PHANTOMHUB_TRUSTED_PROXIES
    for name in list(os.environ):
        if name.startswith("PHANTOMHUB_"):
            monkeypatch.delenv(name)
    assert runpy.run_path(str(ROOT / "deploy" / "gunicorn.py"))["bind"] == "0.0.0.0:8000"


@pytest.mark.parametrize(
    ("allowed_hosts", "host"),
    [
        ("phantomhub.example.com", "phantomhub.example.com"),
        ("phantomhub.example.com,10.0.0.5", "phantomhub.example.com"),
        (".example.com", "example.com"),
        ("*", "localhost"),
        (None, "localhost"),
    ],
)
@pytest.mark.django_db
def test_the_healthcheck_host_is_one_a_production_allowed_hosts_accepts(allowed_hosts: str | None, host: str) -> None:
    assert _healthcheck().health_host(allowed_hosts) == host
    allowed = (allowed_hosts or "localhost").split(",")
    with override_settings(ALLOWED_HOSTS=allowed, SECURE_SSL_REDIRECT=True, DEBUG=False):
        answer = Client().get("/api/v1/health", HTTP_HOST=host)
        assert answer.status_code == 200, answer.content  # neither refused nor redirected to https
        if allowed_hosts and "*" not in allowed_hosts:
            assert Client().get("/api/v1/health", HTTP_HOST="127.0.0.1:8000").status_code == 400  # the old probe


def test_dockerfile_copies_files_that_exist_and_installs_the_server_without_torch() -> None:
    for source in re.findall(r"^COPY (\S+(?: \S+)*) \S+$", DOCKERFILE, re.M):
        for item in source.split():
            assert (ROOT / item).exists(), item
    python = re.search(r"^FROM python:(\d+\.\d+)", DOCKERFILE, re.M)
    assert python is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={python.group(1)}"
    assert not any(dep.startswith("torch") for dep in project["dependencies"])
    assert os.access(ROOT / "deploy" / "entrypoint.sh", os.X_OK)
    assert "USER phantomhub" in DOCKERFILE


def test_deployment_docs_list_every_setting() -> None:
    documented = set(re.findall(r"`(PHANTOMHUB_[A-Z_]+)`", (ROOT / "docs" / "deployment.md").read_text()))
    in_code = _settings_env_names() - {"PHANTOMHUB_TEST_BACKEND", "PHANTOMHUB_TEST_DATABASE_URL", "PHANTOMHUB_TEST_REDIS_URL"}
    assert in_code - documented == set(), "undocumented settings"
    assert documented - in_code - {"PHANTOMHUB_TEST_DATABASE_URL", "PHANTOMHUB_TEST_REDIS_URL"} == set(), "documented but unused"

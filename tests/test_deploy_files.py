"""docker compose cannot run on CI machines; these tests keep the Docker files honest instead."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import runpy
import time
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
        if path.is_file():  # not __pycache__
            names |= set(re.findall(r"\b(PHANTOMHUB_[A-Z_]+)\b", path.read_text()))
    return names


def _healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entrypoint_role(role: str) -> str:
    """The shell commands of one role's branch of deploy/entrypoint.sh."""
    branch = re.search(rf"^\s+{role}\)$(.*?)^\s+;;$", ENTRYPOINT, re.M | re.S)
    assert branch is not None, f"deploy/entrypoint.sh has no {role} role"
    return branch.group(1)


def _stages() -> dict[str, str]:
    """The Dockerfile's stages by name: the text from each `FROM ... AS name` to the next."""
    parts = re.split(r"^FROM (\S+) AS (\S+)$", DOCKERFILE, flags=re.M)
    return {name: f"FROM {image}\n{body}" for image, name, body in zip(parts[1::3], parts[2::3], parts[3::3])}


def test_compose_runs_migrate_web_worker_and_beat_from_one_image_beside_postgres_and_redis() -> None:
    services = COMPOSE["services"]
    assert set(services) == {"migrate", "web", "worker", "beat", "postgres", "redis"}
    app = [services[name] for name in ("migrate", "web", "worker", "beat")]
    assert len({s["image"] for s in app}) == 1
    assert all(s["environment"] == app[0]["environment"] for s in app)
    assert [s["command"] for s in app] == [["migrate"], ["web"], ["worker"], ["beat"]]
    for role in ("migrate", "web", "worker", "beat"):
        _entrypoint_role(role)
    for service in app:
        for dep in ("postgres", "redis"):
            assert service["depends_on"][dep]["condition"] == "service_healthy"


def test_web_worker_and_beat_share_one_archive_the_image_lets_them_write() -> None:
    services = COMPOSE["services"]
    archive = services["web"]["environment"]["PHANTOMHUB_ARCHIVE_URL"]
    path = re.fullmatch(r"\$\{PHANTOMHUB_ARCHIVE_URL:-(/[^}]+)\}", archive)
    assert path, archive
    for name in ("web", "worker", "beat"):
        assert f"archive:{path[1]}" in services[name]["volumes"], name
    assert "archive" in COMPOSE["volumes"]
    # A named volume starts as a copy of the image's directory, ownership included: it must exist.
    runtime = _stages()["runtime"]
    assert f"mkdir -p {path[1]}" in runtime and "chown -R phantomhub /app/var" in runtime
    assert runtime.index("chown -R phantomhub") < runtime.index("USER phantomhub")


def test_migrations_run_once_per_deploy_before_the_roles_that_need_them() -> None:
    services = COMPOSE["services"]
    migrate = services["migrate"]
    assert migrate["restart"] == "no"  # a one-shot: restart policies would run it in a loop
    assert "migrate" not in migrate["depends_on"]
    assert "ports" not in migrate and "healthcheck" not in migrate
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
    assert "migrate --no-input" in _entrypoint_role("migrate")
    for role in ("web", "worker", "beat"):  # no container but migrate's touches the schema
        assert "migrate" not in _entrypoint_role(role), role


def test_worker_and_beat_have_healthchecks_of_their_own_role() -> None:
    for role in ("web", "worker", "beat"):
        check = COMPOSE["services"][role]["healthcheck"]
        assert check["test"] == ["CMD", "python", "/app/deploy/healthcheck.py", role], role
        assert check["retries"] >= 3
    # beat's check reads the schedule file where the beat role writes it
    assert '--schedule "${PHANTOMHUB_VAR_DIR:-/app/var}/celerybeat-schedule"' in _entrypoint_role("beat")
    assert _healthcheck().BEAT_SCHEDULE == "celerybeat-schedule"
    # the worker's node name is the one its check pings
    assert '--hostname "celery@${HOSTNAME:-%h}"' in _entrypoint_role("worker")
    # What bench/fleet.py measures is the worker production runs: the same flags.
    for flag in ("--without-gossip", "--without-mingle", "--without-heartbeat"):
        assert flag in _entrypoint_role("worker")
    assert "PHANTOMHUB_VAR_DIR=/app/var" in _stages()["runtime"]  # the image's ENV


def test_beat_healthcheck_wants_a_recently_written_schedule(tmp_path: Path) -> None:
    beat_check = _healthcheck().beat_check
    assert beat_check(tmp_path)[0] is False  # beat never started
    schedule = tmp_path / "celerybeat-schedule.db"  # the name some dbm modules give it
    schedule.write_bytes(b"x")
    now = schedule.stat().st_mtime
    assert beat_check(tmp_path, now=now + 60)[0] is True
    healthy, detail = beat_check(tmp_path, now=now + 601)
    assert healthy is False and "601 s ago" in detail
    (tmp_path / "celerybeat-schedule").write_bytes(b"x")  # the newest file counts
    assert beat_check(tmp_path, now=time.time() + 1)[0] is True


def test_healthcheck_refuses_an_unknown_role() -> None:
    assert _healthcheck().main(["healthcheck.py", "flower"]) == 2


def test_the_image_builds_the_ui_and_runs_from_the_wheel_not_the_source_tree() -> None:
    stages = _stages()
    assert list(stages) == ["ui", "wheel", "runtime"]
    ui, wheel, runtime = stages["ui"], stages["wheel"], stages["runtime"]
    node = re.match(r"FROM node:(\d+)", ui)
    engines = json.loads((ROOT / "frontend" / "package.json").read_text())["engines"]["node"]
    assert node is not None and engines.startswith(f">={node.group(1)}"), (node, engines)
    assert "RUN npm ci" in ui and "RUN npm run build" in ui
    assert "COPY --from=ui /src/frontend/dist ./frontend/dist" in wheel
    assert re.search(r"^RUN pip wheel --no-deps --wheel-dir wheels \.$", wheel, re.M)
    assert "COPY --from=wheel /src/wheels /tmp/wheels" in runtime
    assert "RUN pip install /tmp/wheels/*.whl" in runtime
    assert "COPY phantomhub" not in runtime  # the package comes from site-packages only
    assert "collectstatic" in runtime and "USER phantomhub" in runtime
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"**/node_modules", "frontend/dist", ".venv"} <= set(ignored)  # host builds stay out


def test_the_wheel_carries_the_ui_and_the_package_data() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "frontend" in setuptools["packages"]["find"]["include"]
    assert setuptools["package-data"]["frontend"] == ["dist/**/*"]
    # Settings look for the UI beside the phantomhub package: frontend/dist in the source tree,
    # site-packages/frontend/dist in an installed wheel.
    assert re.search(r'^FRONTEND_DIST = BASE_DIR / "frontend" / "dist"$', (ROOT / "phantomhub" / "settings.py").read_text(), re.M)
    data = {
        path.relative_to(ROOT / "phantomhub")
        for path in (ROOT / "phantomhub").rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"} and "__pycache__" not in path.parts
    }
    assert data, "the package has data files (the GPU catalog at least)"
    for path in data:
        package = ".".join(("phantomhub", *path.parent.parts))
        globs = setuptools["package-data"].get(package, [])
        assert any(fnmatch.fnmatch(path.name, glob) for glob in globs), (
            f"phantomhub/{path} would be missing from the wheel: list it in [tool.setuptools.package-data]"
        )


def test_compose_environment_uses_only_settings_that_exist() -> None:
    env = COMPOSE["services"]["web"]["environment"]
    assert set(env) <= _settings_env_names()
    db = env["PHANTOMHUB_DATABASE_URL"]
    pg = COMPOSE["services"]["postgres"]["environment"]
    assert db == f"postgres://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/{pg['POSTGRES_DB']}"
    assert env["PHANTOMHUB_REDIS_URL"].startswith("redis://redis:6379/")


def test_compose_healthcheck_and_port_match_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    web = COMPOSE["services"]["web"]
    runtime = _stages()["runtime"]
    assert re.search(r"^WORKDIR /app$", runtime, re.M) and re.search(r"^COPY deploy \./deploy$", runtime, re.M)
    assert 'ENTRYPOINT ["/app/deploy/entrypoint.sh"]' in runtime
    assert _healthcheck().PATH == "/api/v1/health"
    assert web["ports"] == ["8000:8000"]
    assert "EXPOSE 8000" in runtime
    assert 'gunicorn phantomhub.wsgi --config "$here/gunicorn.py"' in _entrypoint_role("web")  # /app/deploy/gunicorn.py
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
    stages = list(_stages())
    for source in re.findall(r"^COPY (\S+(?: \S+)*) \S+$", DOCKERFILE, re.M):
        if source.startswith("--from="):
            stage = source.split()[0].removeprefix("--from=")
            assert stage in stages, f"COPY from an unknown stage {stage}"
            continue
        for item in source.split():
            assert (ROOT / item).exists(), item
    pythons = set(re.findall(r"^FROM python:(\d+\.\d+)", DOCKERFILE, re.M))
    assert len(pythons) == 1, pythons  # the wheel is built and installed by the same Python
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


NGINX = (ROOT / "deploy" / "nginx.conf").read_text()


def _nginx_pool(method: str, uri: str) -> str:
    """The upstream deploy/nginx.conf's map sends a request to, as nginx matches it: the regex
    entries in order (nginx's ``~`` is a case-sensitive PCRE search), else the default."""
    block = re.search(r'^map "\$request_method \$uri" \$phantomhub_pool \{$(.*?)^\}$', NGINX, re.M | re.S)
    assert block is not None, "deploy/nginx.conf has no map of $request_method $uri to $phantomhub_pool"
    default = None
    for key, pool in re.findall(r'^\s+("[^"]*"|\S+)\s+(\S+);$', block.group(1), re.M):
        key = key.strip('"')
        if key == "default":
            default = pool
        elif re.search(key.removeprefix("~"), f"{method} {uri}"):
            return pool
    assert default is not None
    return default


def _paths_in(root: Path, suffixes: tuple[str, ...]) -> set[str]:
    """Every /api/v1/... path written in the sources under root, placeholders filled in."""
    found: set[str] = set()
    for path in root.rglob("*"):
        if path.suffix in suffixes and "node_modules" not in path.parts:
            for raw in re.findall(r"/api/v1/[A-Za-z0-9_/{}.$-]*[A-Za-z0-9_}]", path.read_text()):
                found.add(re.sub(r"\$?\{[^}]*\}", "0b7e4a52-4c1e-4a3f-9d55-1f2a3b4c5d6e", raw))
    return found


def test_nginx_sends_every_agent_write_to_the_ingest_pool_and_every_read_to_the_readers() -> None:
    agent = {p for p in _paths_in(ROOT / "agent" / "phantomhub_agent", (".py",)) if not p.startswith("/api/v1/portal")}
    assert {"/api/v1/runs", "/api/v1/nodes/samples"} <= agent and any(p.endswith("/batches") for p in agent)
    for path in sorted(agent):
        assert _nginx_pool("POST", path) == "phantomhub_ingest", path
        assert _nginx_pool("GET", path) == "phantomhub_readers", path
    ui = _paths_in(ROOT / "frontend" / "src", (".ts", ".tsx"))
    assert any(p.startswith("/api/v1/portal/") for p in ui)
    for path in sorted(ui | {"/", "/runs/1", "/admin/", "/api/v1/runsx", "/api/v1/nodesamples"}):
        for method in ("GET", "POST", "PUT", "DELETE"):
            assert _nginx_pool(method, path) == "phantomhub_readers", (method, path)
    upstreams = dict(re.findall(r"^upstream (\S+) \{.*\n\s+server (\S+);", NGINX, re.M))
    assert set(upstreams) == {"phantomhub_ingest", "phantomhub_readers"}
    assert len(set(upstreams.values())) == 2, "the two pools must be two gunicorns"
    body_limit = re.search(r"client_max_body_size (\d+)m;", NGINX)
    assert body_limit is not None
    from django.conf import settings

    assert int(body_limit.group(1)) * 2**20 >= settings.MAX_BODY_BYTES

"""The image, built and run without Docker (CI machines have no engine).

The Dockerfile's `ui` and `wheel` stages run here as written — their COPY (honouring
.dockerignore), WORKDIR and RUN lines, each stage in a directory of its own standing for its
filesystem: `npm ci`, `npm run build`, `pip wheel`. The runtime stage's steps follow: the wheel
installed with its dependencies into a fresh virtual environment, the Dockerfile's collectstatic
line, and deploy/entrypoint.sh's roles from that environment with an empty working directory:
migrate (twice: a redeploy), web (gunicorn answering `/`, a client-side route, every hashed asset
of the built index.html, the collected static files and the health check), worker and beat with
their container healthchecks, failing before each starts and passing after. Nothing is imported
from the source tree: the UI comes out of site-packages.
"""

from __future__ import annotations

import fnmatch
import http.client
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from tests.conftest import free_port as _free_port  # this xdist worker's own ports

pytestmark = [pytest.mark.slow, pytest.mark.live_server, pytest.mark.celery, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text()
STEP_TIMEOUT_S = 600  # npm ci, npm run build and pip install each finish in a minute or two


# --- the Dockerfile's build stages, run outside Docker -------------------------------------------


def _instructions(stage_text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", stage_text)
    lines = [line.strip() for line in joined.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]  # type: ignore[misc]


def _stages() -> dict[str, tuple[str, str]]:
    """name -> (base image, the stage's instructions as text)."""
    parts = re.split(r"^FROM (\S+) AS (\S+)$", DOCKERFILE, flags=re.M)
    return {name: (image, body) for image, name, body in zip(parts[1::3], parts[2::3], parts[3::3])}


def _dockerignore() -> list[re.Pattern[str]]:
    patterns = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), "exceptions in .dockerignore: teach this test to read them"
        regex = re.escape(line.strip("/")).replace(r"\*\*", "\x00").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        patterns.append(re.compile(regex.replace("\x00/", "(?:.*/)?").replace("\x00", ".*") + "$"))
    return patterns


IGNORED = _dockerignore()


def _ignored(relative: str) -> bool:
    return any(p.match(relative) for p in IGNORED)


@dataclass
class Stage:
    name: str
    root: Path  # stands for the stage's filesystem
    log: Path
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)

    def path(self, container_path: str) -> Path:
        absolute = container_path if container_path.startswith("/") else f"{self.workdir.rstrip('/')}/{container_path}"
        return self.root / absolute.lstrip("/")


def _copy(sources: list[Path], dest: Path, into_dir: bool, context: Path | None) -> None:
    for source in sources:
        assert source.exists(), source
        if source.is_dir():  # Docker copies a directory's contents, not the directory
            for folder, dirs, files in os.walk(source):
                here = Path(folder)
                if context is not None:  # an ignored directory is not even walked (node_modules)
                    dirs[:] = [d for d in dirs if not _ignored((here / d).relative_to(context).as_posix())]
                    files = [f for f in files if not _ignored((here / f).relative_to(context).as_posix())]
                for name in files:
                    target = dest / (here / name).relative_to(source)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(here / name, target)
        else:
            target = dest / source.name if into_dir else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _build_stage(name: str, stages: dict[str, Stage], tmp: Path, env: dict[str, str]) -> Stage:
    _image, text = _stages()[name]
    stage = Stage(name, tmp / "stages" / name, tmp / f"{name}.log", env=dict(env))
    stage.root.mkdir(parents=True)
    for op, args in _instructions(text):
        if op == "WORKDIR":
            stage.workdir = args
            stage.path(".").mkdir(parents=True, exist_ok=True)
        elif op == "COPY":
            words = shlex.split(args)
            origin = stages[words.pop(0).removeprefix("--from=")] if words[0].startswith("--from=") else None
            *sources, dest = words
            paths = [origin.path(s) for s in sources] if origin else [ROOT / s for s in sources]
            into_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
            _copy(paths, stage.path(dest), into_dir or stage.path(dest).is_dir(), None if origin else ROOT)
        elif op == "RUN":
            with stage.log.open("ab") as log:
                done = subprocess.run(
                    ["sh", "-c", args], cwd=stage.path("."), env=stage.env, stdout=log, stderr=subprocess.STDOUT,
                    timeout=STEP_TIMEOUT_S,
                )  # fmt: skip
            assert done.returncode == 0, f"{name}: RUN {args} failed:\n{stage.log.read_text()[-4000:]}"
        elif op == "ENV":
            stage.env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
        else:
            raise AssertionError(f"the {name} stage uses {op}: teach this test to run it")
    return stage


# --- the runtime: the installed wheel and the entrypoint's roles -----------------------------------


def _database_url() -> str:
    base = os.environ.get("PHANTOMHUB_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub")
    return base.rsplit("/", 1)[0] + "/" + base.rsplit("/", 1)[1] + "_wheel"


def _database(url: str, *, create: bool) -> None:
    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            admin.execute(f'CREATE DATABASE "{name}"')


@dataclass
class Image:
    """The built image's stand-in: a virtual environment with the wheel, and /app."""

    wheel: Path
    ui: Path  # the ui stage's frontend/dist
    venv: Path
    app: Path
    var: Path
    env: dict[str, str]
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *args: str, timeout_s: float = STEP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=self.app, env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def role(self, role: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{role}.log").open("ab")
        proc = subprocess.Popen(
            [str(self.app / "deploy" / "entrypoint.sh"), role], cwd=self.app, env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def healthcheck(self, role: str) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv / "bin" / "python"), str(self.app / "deploy" / "healthcheck.py"), role, timeout_s=60)

    def wait_healthy(self, role: str, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, f"{role} exited:\n{(self.logs / f'{role}.log').read_text()[-4000:]}"
            check = self.healthcheck(role)
            if check.returncode == 0:
                return
            assert time.monotonic() < deadline, (
                f"{role} never healthy: {check.stderr}\n{(self.logs / f'{role}.log').read_text()[-4000:]}"
            )
            time.sleep(1)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PHANTOMHUB_", "DJANGO_", "VIRTUAL_ENV", "PYTHON"))}


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    tmp = tmp_path_factory.mktemp("image")
    build_env = _clean_env()
    build_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{build_env['PATH']}"  # this Python's pip
    stages: dict[str, Stage] = {}
    for name in ("ui", "wheel"):
        stages[name] = _build_stage(name, stages, tmp, build_env)
    wheels = list(stages["wheel"].path("/src/wheels").glob("phantomhub-*.whl"))
    assert len(wheels) == 1, wheels

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])],
        env=build_env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    app, var, logs = tmp / "app", tmp / "var", tmp / "logs"
    for directory in (app, var, logs):
        directory.mkdir()
    shutil.copytree(ROOT / "deploy", app / "deploy", ignore=shutil.ignore_patterns("__pycache__"))  # COPY deploy ./deploy
    url = _database_url()
    _database(url, create=True)
    env = _clean_env()
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        DJANGO_SETTINGS_MODULE="phantomhub.settings",  # the image's ENV
        PHANTOMHUB_VAR_DIR=str(var),
        PHANTOMHUB_DATABASE_URL=url,
        PHANTOMHUB_REDIS_URL=os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
        PHANTOMHUB_SECRET_KEY="image-test-" + "k" * 48,
        PHANTOMHUB_SECURE_COOKIES="0",
        PHANTOMHUB_PORT=str(_free_port()),
        PHANTOMHUB_WEB_WORKERS="1",
        PHANTOMHUB_WORKER_CONCURRENCY="1",
        PHANTOMHUB_SWEEP_INTERVAL_S="3600",  # beat sends nothing during the test into the suite's broker
        HOSTNAME=f"image-test-{os.getpid()}",  # the worker's node name: no other worker on the broker answers for it
        PHANTOMHUB_LOG_LEVEL="WARNING",
    )
    built = Image(wheels[0], stages["ui"].path("/src/frontend/dist"), venv, app, var, env, logs)
    try:
        yield built
    finally:
        built.stop()
        _database(url, create=False)


def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Host": "localhost"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_the_wheel_holds_the_built_ui_and_every_data_file_of_the_package(image: Image) -> None:
    names = set(zipfile.ZipFile(image.wheel).namelist())
    ui = {f"frontend/dist/{p.relative_to(image.ui).as_posix()}" for p in image.ui.rglob("*") if p.is_file()}
    assert "frontend/dist/index.html" in ui and any(fnmatch.fnmatch(n, "frontend/dist/assets/index-*.js") for n in ui)
    assert ui <= names
    assert not [n for n in names if "node_modules" in n or n.endswith(".pyc")]
    data = {
        f"phantomhub/{p.relative_to(ROOT / 'phantomhub').as_posix()}"
        for p in (ROOT / "phantomhub").rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    }
    assert data and data <= names, data - names


def test_the_installed_wheel_serves_the_ui_it_carries(image: Image) -> None:
    where = image.run(
        "python", "-c",
        "import phantomhub, django; django.setup(); from django.conf import settings; "
        "print(phantomhub.__file__); print(settings.FRONTEND_DIST); print(settings.STATIC_ROOT)",
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    package, dist, static = (Path(line) for line in where.stdout.split())
    site = image.venv / "lib"
    assert package.is_relative_to(site) and dist.is_relative_to(site) and static.is_relative_to(site), where.stdout
    collect = re.search(r"RUN (PHANTOMHUB_SECRET_KEY=\S+ python -m django collectstatic [^&\n]*?)\s*\\?$", DOCKERFILE, re.M)
    assert collect is not None, "the runtime stage's collectstatic line"
    done = image.run("sh", "-c", collect.group(1))
    assert done.returncode == 0, done.stderr

    for attempt in ("first deploy", "redeploy"):
        migrated = image.run(str(image.app / "deploy" / "entrypoint.sh"), "migrate")
        assert migrated.returncode == 0, f"{attempt}: {migrated.stdout[-2000:]}{migrated.stderr[-2000:]}"
    assert "No migrations to apply" in migrated.stdout

    web = image.role("web")
    image.wait_healthy("web", web)
    port = int(image.env["PHANTOMHUB_PORT"])
    status, headers, index = _get(port, "/")
    assert status == 200 and headers["content-type"].startswith("text/html"), (status, index[:300])
    assert index == (image.ui / "index.html").read_bytes()
    assets = re.findall(rb'(?:src|href)="(/assets/[^"]+)"', index)
    assert any(re.fullmatch(rb"/assets/index-[\w-]+\.js", a) for a in assets), assets
    for asset in assets:
        status, headers, body = _get(port, asset.decode())
        assert status == 200, asset
        assert body == (image.ui / asset.decode().lstrip("/")).read_bytes(), asset
        kind = "javascript" if asset.endswith(b".js") else "css"
        assert kind in headers["content-type"], (asset, headers["content-type"])
        assert "immutable" in headers["cache-control"], (asset, headers["cache-control"])  # hashed: cached for good
    status, _, route = _get(port, "/runs")  # a client-side route gets the app too
    assert status == 200 and route == index
    status, _, css = _get(port, "/static/admin/css/base.css")  # collectstatic's output, by WhiteNoise
    assert status == 200 and css


def test_worker_and_beat_healthchecks_fail_until_their_role_runs(image: Image) -> None:
    for _ in range(3):  # a broker that drops the connection is a failed check too, but not the one meant here
        before = image.healthcheck("worker")
        if "ConnectionError" not in before.stderr:
            break
    assert before.returncode == 1 and "did not answer" in before.stderr, (before.returncode, before.stdout, before.stderr)
    worker = image.role("worker")
    image.wait_healthy("worker", worker)

    before = image.healthcheck("beat")
    assert before.returncode == 1 and "beat has not started" in before.stderr, (before.returncode, before.stdout, before.stderr)
    beat = image.role("beat")
    image.wait_healthy("beat", beat, timeout_s=60)
    assert list(image.var.glob("celerybeat-schedule*"))
    image.stop()
    assert image.healthcheck("worker").returncode == 1  # a stopped worker is unhealthy again

"""Fixtures of the agent's tests.

- ``fake_server``: a stdlib HTTP server that records requests and answers from a script; used
  only where transport mechanics are under test (retries, keep-alive, gzip, Retry-After).
- ``phantomhub``: the real PhantomHub server (migrated into a temporary SQLite file, served by
  gunicorn in a subprocess), with a project token; it can be stopped and started again on the
  same port and database. Tests using it are marked ``live_server``.
- ``fault_proxy``: a proxy in front of the real server that answers 500/429 on demand.
- ``agent_kwargs``: settings every test run uses: debug=True (errors re-raise), a private spool,
  short flush interval.
"""

from __future__ import annotations

import gzip
import http.client
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port  # a port of this xdist worker's own block; the agent tests import it from here

# The Hugging Face tests build tiny models in code; never reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models gain nothing from intra-op threads, and on a small VM waking an idle OpenMP pool
# costs tens of milliseconds, which would drown the timings these tests assert. Given to the
# scripts the tests start; the test modules themselves call torch.set_num_threads(1).
SCRIPT_ENV = {"OMP_NUM_THREADS": "1"}

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PYTHON = sys.executable
AGENT_ENV_VARS = (
    "PHANTOMHUB_SERVER",
    "PHANTOMHUB_TOKEN",
    "PHANTOMHUB_TOKEN_FILE",
    "PHANTOMHUB_MODE",
    "PHANTOMHUB_RUN_ID",
    "PHANTOMHUB_SPOOL_DIR",
    "PHANTOMHUB_SPOOL_MAX_BYTES",
    "PHANTOMHUB_FLUSH_INTERVAL",
    "PHANTOMHUB_CHECKPOINT_INTERVAL",
    "PHANTOMHUB_FINISH_TIMEOUT",
    "PHANTOMHUB_PROJECT",
    "PHANTOMHUB_TEAM",
    "PHANTOMHUB_TIMING",
    "PHANTOMHUB_RUN_NAME",
    "PHANTOMHUB_ALLOCATION_START",
    "PHANTOMHUB_GPU_MODEL",
    "PHANTOMHUB_NODE_BATCHES",
)


def wait_for(predicate: Any, timeout_s: float = 20.0) -> Any:
    """The predicate's first truthy value, polled every 20 ms; fails the test after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture(autouse=True)
def _clean_agent_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (*AGENT_ENV_VARS, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PHANTOMHUB_SPOOL_DIR", str(tmp_path / "default-spool"))


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    path = tmp_path / "spool"
    path.mkdir()
    return path


@pytest.fixture
def agent_kwargs(spool_dir: Path) -> dict[str, Any]:
    """Settings for runs in tests: debug (errors re-raise), private spool, fast flushing and retries."""
    return {
        "debug": True,
        "spool_dir": spool_dir,
        "flush_interval_s": 0.2,
        "backoff_base_s": 0.05,
        "backoff_max_s": 0.5,
        "finish_timeout_s": 10.0,
        "system_interval_s": 0.5,
        "counters_interval_s": 0.5,
    }


# -- a scripted stdlib server ------------------------------------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw_body: bytes
    client_port: int

    @property
    def body(self) -> Any:
        data = self.raw_body
        if self.headers.get("content-encoding") == "gzip":
            data = gzip.decompress(data)
        return json.loads(data.decode("utf-8")) if data else None


Answer = tuple[int, dict[str, str], bytes]


def carries(req: Recorded, part: str) -> bool:
    """Whether ``req`` carries ``part`` ("steps", "samples", "events"): sent on its own, or in a
    combined batch (the agent's default wire)."""
    if req.path.endswith("/" + part):
        return True
    return req.path.endswith("/batch") and isinstance(req.body, dict) and part in req.body


@dataclass
class FakeServer:
    """Records every request; ``script`` (if set) picks the answer, default 200 {"accepted": n}."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    script: Callable[[Recorded, int], Answer | None] | None = None
    delay_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def paths(self) -> list[str]:
        with self.lock:
            return [r.path for r in self.requests]

    def of(self, suffix: str) -> list[Recorded]:
        """Requests to the path ending in ``suffix``; for "/steps", "/samples" and "/events" also
        the parts of that kind in combined batches (``/batch``), as if sent on their own."""
        with self.lock:
            requests = list(self.requests)
        part = suffix.rsplit("/", 1)[-1]
        out = []
        for r in requests:
            if r.path.endswith(suffix):
                out.append(r)
            elif part in ("steps", "samples", "events") and r.path.endswith("/batch") and part in (r.body or {}):
                body = {key: value for key, value in r.body.items() if key not in ("steps", "samples", "events")}
                body[part] = r.body[part]
                headers = {k: v for k, v in r.headers.items() if k != "content-encoding"}
                path = r.path[: -len("/batch")] + "/" + part
                out.append(Recorded(r.method, path, headers, json.dumps(body).encode(), r.client_port))
        return out


def _rows_of(key: str, part: Any) -> int:
    if key == "events":
        return len(part)
    return len(part.get("step" if key == "steps" else "t_ns", []))


def _default_answer(req: Recorded) -> Answer:
    if req.path.endswith("/runs"):
        return 201, {}, json.dumps(req.body).encode()
    body = req.body or {}
    if req.path.endswith("/batch"):
        answer = {
            key: {"accepted": _rows_of(key, body[key]), "duplicates": 0} for key in ("steps", "samples", "events") if key in body
        }
        return 200, {}, json.dumps(answer).encode()
    rows = 0
    for key in ("steps", "samples"):
        if isinstance(body.get(key), dict):
            rows = len(body[key].get("step" if key == "steps" else "t_ns", []))
    if isinstance(body.get("events"), list):
        rows = len(body["events"])
    return 200, {}, json.dumps({"accepted": rows, "duplicates": 0}).encode()


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    state = FakeServer(url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            req = Recorded(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                raw_body=raw,
                client_port=self.client_address[1],
            )
            with state.lock:
                state.requests.append(req)
                index = len(state.requests) - 1
            if state.delay_s:
                time.sleep(state.delay_s)
            answer = state.script(req, index) if state.script else None
            status, headers, body = answer if answer is not None else _default_answer(req)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


# -- the real server -----------------------------------------------------------------------------


class LiveServer:
    """gunicorn serving PhantomHub from a temporary SQLite database."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ)
        for key in list(self.env):
            if key.startswith("PHANTOMHUB_") or key == "DJANGO_SETTINGS_MODULE":
                del self.env[key]
        self.env.update(
            PHANTOMHUB_DATABASE_URL=f"sqlite:///{workdir / 'db.sqlite3'}",
            PHANTOMHUB_SECRET_KEY="agent-tests-" + "k" * 40,
            PHANTOMHUB_VAR_DIR=str(workdir),
            PHANTOMHUB_LOG_LEVEL="WARNING",
            PHANTOMHUB_PORT=str(self.port),
            DJANGO_SETTINGS_MODULE="phantomhub.settings",
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "server.log"
        self.token = ""

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def setup(self) -> None:
        self.manage("migrate", "--no-input", "-v", "0")
        self.token = self.manage("createtoken", "--team", "agent-tests", "--project", "agent").strip()

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "gunicorn",
                "phantomhub.wsgi",
                "-b",
                f"127.0.0.1:{self.port}",
                "-w",
                "1",
                "-k",
                "gthread",
                "--threads",
                "8",
                "--graceful-timeout",
                "2",
            ],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                status, _ = self.get("/api/v1/health", auth=False)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy within 60 s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def request(
        self, method: str, path: str, body: Any = None, *, auth: bool = True, token: str | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {token or self.token}"
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        try:
            parsed = json.loads(data.decode()) if data else None
        except ValueError:
            parsed = data.decode(errors="replace")
        return response.status, parsed

    def get(self, path: str, *, auth: bool = True) -> tuple[int, Any]:
        return self.request("GET", path, auth=auth)

    def run(self, run_id: str) -> dict[str, Any]:
        status, body = self.get(f"/api/v1/runs/{run_id}")
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    def steps(self, run_id: str, rank: int | None = None) -> dict[str, list[Any]]:
        """Every stored step row of a run (one rank, or all), merged over pages."""
        merged: dict[str, list[Any]] = {}
        after: int | None = None
        while True:
            query = "limit=1000"
            if rank is not None:
                query += f"&rank={rank}"
            if after is not None:
                query += f"&after_step={after}"
            status, body = self.get(f"/api/v1/runs/{run_id}/steps?{query}")
            assert status == 200, body
            for name, values in body["steps"].items():
                merged.setdefault(name, []).extend(values)
            after = body.get("next_after_step")
            if after is None:
                return merged


@pytest.fixture(scope="session")
def phantomhub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    if not (REPO / "manage.py").exists():
        pytest.skip("the PhantomHub server is not in this checkout")
    server = LiveServer(tmp_path_factory.mktemp("phantomhub-server"))
    server.setup()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def live(phantomhub: LiveServer) -> Iterator[LiveServer]:
    """The live server, guaranteed running at the start and the end of the test."""
    phantomhub.start()
    yield phantomhub
    phantomhub.start()


# -- a fault-injecting proxy --------------------------------------------------------------------


@dataclass
class FaultProxy:
    """Forwards to the real server; ``rule(index, path)`` may answer instead.

    A rule returns None (forward), ("answer", status, headers) to answer without forwarding, or
    ("after", status, headers) to forward (so the server stores the batch) and then answer anyway,
    the nastiest case for double counting.
    """

    url: str
    target_port: int
    rule: Callable[[int, str], tuple[str, int, dict[str, str]] | None] | None = None
    log: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def fault_proxy(live: LiveServer) -> Iterator[FaultProxy]:
    state = FaultProxy(url="", target_port=live.port)
    counter = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self, method: str, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection("127.0.0.1", state.target_port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            try:
                conn.request(method, self.path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.getheaders(), response.read()
            finally:
                conn.close()

        def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length) if length else None
            with state.lock:
                index = counter[0]
                counter[0] += 1
            decision = state.rule(index, self.path) if state.rule else None
            if decision is not None and decision[0] == "answer":
                _, status, headers = decision
                error = {"error": {"code": "injected", "message": "injected by the test", "fields": {}}}
                with state.lock:
                    state.log.append((self.path, status))
                self._reply(status, {"Content-Type": "application/json", **headers}, json.dumps(error).encode())
                return
            status, raw_headers, data = self._forward(method, body)
            if decision is not None and decision[0] == "after":
                _, status, headers = decision
                with state.lock:
                    state.log.append((self.path, status))
                self._reply(status, {"Content-Type": "application/json", **headers}, b'{"error":{"code":"injected"}}')
                return
            with state.lock:
                state.log.append((self.path, status))
            keep = {k: v for k, v in raw_headers if k.lower() in ("content-type", "retry-after")}
            self._reply(status, keep, data)

        def do_POST(self) -> None:
            self._handle("POST")

        def do_GET(self) -> None:
            self._handle("GET")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


# -- helpers for scripts run in a subprocess -----------------------------------------------------


def run_script(
    code: str, tmp_path: Path, env: dict[str, str], *, timeout: float = 120, args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"script_{uuid.uuid4().hex[:8]}.py"
    script.write_text(code)
    full_env = {k: v for k, v in os.environ.items() if k not in AGENT_ENV_VARS}
    full_env.update(SCRIPT_ENV)
    full_env.update(env)
    return subprocess.run(
        [PYTHON, str(script), *(args or [])],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def agent_cli() -> str:
    exe = VENV_BIN / "phantomhub-agent"
    if exe.exists():
        return str(exe)
    found = shutil.which("phantomhub-agent")
    if found is None:
        pytest.skip("phantomhub-agent is not installed (pip install -e ./agent)")
    return found

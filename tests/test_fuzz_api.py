"""Fuzzing the API against its OpenAPI schema (schemathesis) on the real stack.

gunicorn serves PhantomHub from the PostgreSQL test database with Redis as broker and cache, and
a Celery worker analyses what the fuzzer ingests. Every operation of `/api/schema/` is tried as
two principals: a project token, and an organization admin signed in with a session (CSRF token
and all). Each response must be below 500 and agree with the schema: documented status code,
content type, headers and body.

Bounded: PHANTOMHUB_FUZZ_EXAMPLES examples per operation and phase (default 30), a request
timeout, and a deadline for the whole run (PHANTOMHUB_FUZZ_DEADLINE_S, default 180 s) after which
the remaining cases are not sent. The seed is fixed (PHANTOMHUB_FUZZ_SEED to explore others), so
CI fails only on a real change. The number of requests made is printed at the end.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import requests
import schemathesis
from django.conf import settings
from django.db import connection
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import free_port  # this xdist worker's own ports

# The fuzz tests use the test database without a transaction of their own (django_db only has it
# created): the server and the worker are other processes, so what this process writes (an admin,
# a token) is committed at once, and the module flushes the database when it is done.
pytestmark = [pytest.mark.slow, pytest.mark.live_server, pytest.mark.celery]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("PHANTOMHUB_FUZZ_EXAMPLES", "30"))
DEADLINE_S = float(os.environ.get("PHANTOMHUB_FUZZ_DEADLINE_S", "180"))
SEED = int(os.environ.get("PHANTOMHUB_FUZZ_SEED", "20261201"))
REQUEST_TIMEOUT_S = 30
ADMIN = ("fuzz-admin", "fuzz-admin-password-1")
S = 10**9
T0_NS = 1_790_000_000 * S  # 2026-09-21


def not_a_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 5xx is a failure (schemathesis' own check lets documented 5xx through; we have none)."""
    assert response.status_code < 500, f"{response.status_code} from {case.method} {case.formatted_path}"
    return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _pg_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _env(log_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_") and k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        DJANGO_SETTINGS_MODULE="phantomhub.settings",
        PHANTOMHUB_DATABASE_URL=_pg_url(),
        PHANTOMHUB_REDIS_URL=settings.CELERY_BROKER_URL,
        PHANTOMHUB_SECRET_KEY="fuzz-" + "s" * 48,
        PHANTOMHUB_DEBUG="0",  # as deployed: no debug pages, /metrics closed
        PHANTOMHUB_SECURE_COOKIES="0",  # plain http on 127.0.0.1
        PHANTOMHUB_VAR_DIR=str(log_dir),
        PHANTOMHUB_LOG_LEVEL="WARNING",
    )
    return env


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"{what} exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} did not start:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/api/v1/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def sign_in(session: requests.Session, url: str) -> None:
    csrf = session.get(f"{url}/api/v1/portal/session", timeout=REQUEST_TIMEOUT_S).json()["csrf_token"]
    response = session.post(
        f"{url}/api/v1/portal/session",
        json={"username": ADMIN[0], "password": ADMIN[1]},
        headers={"X-CSRFToken": csrf},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    session.headers["X-CSRFToken"] = response.json()["csrf_token"]  # rotated on sign-in


def _seed(url: str, token: str, admin: requests.Session) -> dict[str, list[Any]]:
    """A run with steps, samples, phases and a finish; a price; a spare token: ids for the fuzzer."""
    bearer = {"Authorization": f"Bearer {token}"}
    run_id = str(uuid.uuid4())
    response = requests.post(
        f"{url}/api/v1/runs",
        json={"id": run_id, "name": "fuzz", "gpu_model": "H100-SXM", "gpu_count": 1, "world_size": 1, "dtype": "bf16",
              "allocation_start": "2026-09-21T00:00:00Z", "started_at": "2026-09-21T00:00:10Z", "tags": ["fuzz"]},
        headers=bearer, timeout=REQUEST_TIMEOUT_S,
    )  # fmt: skip
    assert response.status_code == 201, response.text
    n = 200
    steps = {
        "step": list(range(n)),
        "t_start_ns": [T0_NS + i * S for i in range(n)],
        "dur_ns": [S] * n,
        "data_ns": [200_000_000] * n,
        "forward_ns": [200_000_000] * n,
        "backward_ns": [400_000_000] * n,
        "optimizer_ns": [100_000_000] * n,
        "flops": [1.7e14] * n,
        "mem_allocated": [30 * 2**30] * n,
        "mem_reserved": [36 * 2**30] * n,
    }
    body = gzip.compress(json.dumps({"rank": 0, "host": "node-0", "steps": steps}).encode())
    response = requests.post(
        f"{url}/api/v1/runs/{run_id}/steps", data=body, timeout=REQUEST_TIMEOUT_S,
        headers={**bearer, "Content-Type": "application/json", "Content-Encoding": "gzip"},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    k = n // 10
    samples = {"t_ns": [T0_NS + i * 10 * S for i in range(k)], "device": [0] * k, "gpu_util_pct": [90.0] * k,
               "cpu_process_pct": [150.0] * k, "cpu_other_pct": [5.0] * k}  # fmt: skip
    response = requests.post(
        f"{url}/api/v1/runs/{run_id}/samples", json={"rank": 0, "samples": samples}, headers=bearer, timeout=30
    )
    assert response.status_code == 200, response.text
    events = [
        {"id": "phase-0", "kind": "phase", "t_ns": T0_NS, "name": "eval", "t_start_ns": T0_NS + 50 * S, "dur_ns": 5 * S},
        {"id": "finish", "kind": "finish", "t_ns": T0_NS + n * S, "status": "finished"},
    ]
    response = requests.post(f"{url}/api/v1/runs/{run_id}/events", json={"events": events}, headers=bearer, timeout=30)
    assert response.status_code == 200, response.text
    price = admin.post(
        f"{url}/api/v1/pricing/prices",
        json={"gpu": "H100-SXM", "usd_per_gpu_hour": "3.5", "effective_from": "2026-01-01T00:00:00Z"},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert price.status_code == 201, price.text
    spare = admin.post(f"{url}/api/v1/portal/tokens", json={"project": "llm-pretrain", "name": "spare"}, timeout=30)
    assert spare.status_code == 201, spare.text
    return {
        "run_id": [run_id],
        "price_id": [price.json()["id"]],
        "token_id": [spare.json()["id"]],
        "slug": ["nlp", "llm-pretrain"],
        "kind": ["teams", "projects", "runs"],
        "month": ["2026-09"],
    }


def _schema_in_process() -> dict[str, Any]:
    """The schema /api/schema/ serves, generated here so the operations are known at collection
    (test_the_fuzzed_schema_is_the_served_one checks that the server agrees)."""
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


SCHEMA = _schema_in_process()
KNOWN: dict[str, list[Any]] = {}  # path parameters of seeded objects, filled by the `stack` fixture
KNOWN_NAMES = ("run_id", "price_id", "token_id", "slug", "kind", "month")


def before_generate_path_parameters(context: Any, strategy: Any) -> Any:
    """Half of the generated path parameters name objects that exist (the seeded run, price,
    token, team, project, month), so the fuzzer gets past the 404s into the handlers."""

    def swap(params: Any) -> Any:
        # Negative cases come wrapped (GeneratedValue) and stay as generated: invalid on purpose.
        names = [name for name in params if name in KNOWN_NAMES] if isinstance(params, dict) else []
        if not names:
            return st.just(params)
        known = st.fixed_dictionaries({name: st.deferred(lambda name=name: st.sampled_from(KNOWN[name])) for name in names})
        return st.one_of(st.just(params), known.map(lambda values: {**params, **values}))

    return strategy.flatmap(swap)


schema = schemathesis.openapi.from_dict(
    SCHEMA,
    config=SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "suppress-health-check": ["all"],
            "generation": {"max-examples": EXAMPLES, "with-security-parameters": False, "database": "none"},
            "phases": {"stateful": {"enabled": False}},
        }
    ),
)
schema.hook(before_generate_path_parameters)


@dataclass
class Principal:
    name: str
    session: requests.Session


@dataclass
class Stack:
    url: str
    project_token_id: int
    principals: list[Principal]
    database_url: str
    started: float = field(default_factory=time.monotonic)
    requests: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    unsent: int = 0

    def count(self, principal: str, status: int) -> None:
        self.requests[principal] = self.requests.get(principal, 0) + 1
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def summary(self) -> str:
        by_principal = ", ".join(f"{k} {v}" for k, v in self.requests.items())
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"schemathesis: {sum(self.requests.values())} requests ({by_principal}) in "
            f"{time.monotonic() - self.started:.0f} s; statuses {statuses}; {self.unsent} cases unsent at the deadline"
        )


def _admin_create(username: str, password: str) -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import User

    from phantomhub.accounts.models import Profile

    # A hash the server knows: the suite's settings hash with MD5, the server's settings do not.
    hasher = PBKDF2PasswordHasher()
    user = User.objects.create(username=username, password=hasher.encode(password, hasher.salt(), iterations=1000))
    Profile.objects.update_or_create(user=user, defaults={"is_org_admin": True, "is_finance": True})


@pytest.fixture(scope="module")
def stack(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    if connection.vendor != "postgresql":
        pytest.skip("the live server and the worker need the PostgreSQL test database")
    from phantomhub.accounts.services import project_token_for_slugs

    log_dir = tmp_path_factory.mktemp("fuzz")
    with django_db_blocker.unblock():
        issued = project_token_for_slugs(team_slug="nlp", project_slug="llm-pretrain")
        _admin_create(*ADMIN)
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    env = _env(log_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    worker_log, server_log = log_dir / "worker.log", log_dir / "server.log"
    worker = _start([sys.executable, "-m", "celery", "-A", "phantomhub", "worker", "--concurrency", "1", "--loglevel",
                     "INFO", "-Q", "phantomhub", "--without-gossip", "--without-mingle", "--without-heartbeat"],
                    env, worker_log)  # fmt: skip
    server = _start([sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "-b", f"127.0.0.1:{port}", "-w", "2",
                     "-k", "gthread", "--threads", "4", "--timeout", "60"], env, server_log)  # fmt: skip
    result: Stack | None = None
    try:
        _wait("the worker", lambda: b"ready." in worker_log.read_bytes(), worker, worker_log)
        _wait("the server", lambda: _healthy(url), server, server_log)
        token_session = requests.Session()
        token_session.headers["Authorization"] = f"Bearer {issued.raw}"
        admin_session = requests.Session()
        sign_in(admin_session, url)
        KNOWN.update(_seed(url, issued.raw, admin_session))
        assert issued.token.pk is not None
        result = Stack(
            url=url,
            project_token_id=issued.token.pk,
            principals=[Principal("project-token", token_session), Principal("signed-in-admin", admin_session)],
            database_url=env["PHANTOMHUB_DATABASE_URL"],
        )
        yield result
    finally:
        _stop(server)
        _stop(worker)
        with django_db_blocker.unblock():
            from django.core.management import call_command

            call_command("flush", interactive=False, verbosity=0)  # the rest of the suite expects an empty database
        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
        if result is not None:
            capture = request.config.pluginmanager.get_plugin("capturemanager")
            with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                print(f"\n{result.summary()} (server and worker logs: {log_dir})")


@pytest.fixture(scope="module")
def unrevoke(stack: Stack) -> Iterator[Any]:
    """The signed-in admin may revoke or rotate any token it finds (DELETE /portal/tokens/{id},
    POST .../rotate); the project token must keep working, so it is restored before each request
    (its own connection: committed)."""
    with psycopg.connect(stack.database_url, autocommit=True) as conn:

        def restore() -> None:
            conn.execute(
                "UPDATE accounts_apitoken SET revoked_at = NULL, replaced_by_id = NULL, overlap_ends_at = NULL,"
                " expires_at = NULL WHERE id = %s",
                (stack.project_token_id,),
            )

        yield restore


@pytest.mark.django_db  # only to have the test database created; see pytestmark
def test_the_fuzzed_schema_is_the_served_one(stack: Stack) -> None:
    served = requests.get(f"{stack.url}/api/schema/?format=json", timeout=REQUEST_TIMEOUT_S)
    assert served.status_code == 200
    assert served.json() == SCHEMA


@pytest.mark.django_db
@schema.parametrize()
def test_every_answer_is_below_500_and_as_the_schema_says(case: Any, stack: Stack, unrevoke: Any) -> None:
    """Each generated request goes out once per principal."""
    if time.monotonic() - stack.started > DEADLINE_S:
        stack.unsent += 1
        return
    for principal in stack.principals:
        unrevoke()
        response = case.call(base_url=stack.url, session=principal.session, timeout=REQUEST_TIMEOUT_S)
        stack.count(principal.name, response.status_code)
        signed_out = case.method == "DELETE" and case.path == "/api/v1/portal/session" and response.status_code == 204
        if signed_out and principal.name == "signed-in-admin":
            sign_in(principal.session, stack.url)
        case.validate_response(response, checks=CHECKS)

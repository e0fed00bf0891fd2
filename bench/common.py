"""Pieces the benchmarks share: a fresh database, a gunicorn server on a free port."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def brokerless_django(database_url: str) -> dict[str, str]:
    """This process set up as an embedded PhantomHub on a fresh database: the database dropped
    and created, migrated, Django set up, no broker (analysis runs in the caller, as `make run`
    does). Returns the environment, for the servers the bench starts."""
    import os

    env = {
        **{k: v for k, v in os.environ.items() if k != "PHANTOMHUB_REDIS_URL"},  # no broker: analysis runs here
        "PHANTOMHUB_DATABASE_URL": database_url,
        "PHANTOMHUB_SECRET_KEY": "s" * 48,
        "PHANTOMHUB_DEBUG": "0",
        "PHANTOMHUB_LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
    }
    os.environ.pop("PHANTOMHUB_REDIS_URL", None)
    os.environ.update(env)
    database_recreate(database_url)
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=root, env=env, check=True)
    import django

    django.setup()
    return env


def database_recreate(url: str) -> None:
    """Drop and create the database named in `url` (a benchmark starts from nothing)."""
    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def wait_healthy(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/api/v1/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


@contextmanager
def gunicorn_server(env: dict[str, str], workers: int) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """PhantomHub under gunicorn on a free port, healthy, for the duration of the block:
    (port, the gunicorn master process; its children are the workers)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
         "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    try:
        wait_healthy(port)
        yield port, server
    finally:
        server.terminate()
        server.wait(30)


@contextmanager
def gunicorn(env: dict[str, str], workers: int) -> Iterator[int]:
    """PhantomHub under gunicorn on a free port, healthy, for the duration of the block."""
    with gunicorn_server(env, workers) as (port, _server):
        yield port


def server_setup(database_url: str, redis_url: str) -> dict[str, str]:
    """A fresh, migrated database and an empty Redis db for a whole-server benchmark; the
    environment its server processes run with (production settings, ingest rate limit off)."""
    import os

    import redis

    database_recreate(database_url)
    redis.Redis.from_url(redis_url).flushdb()
    env = {
        **os.environ,
        "PHANTOMHUB_DATABASE_URL": database_url,
        "PHANTOMHUB_REDIS_URL": redis_url,
        "PHANTOMHUB_SECRET_KEY": "f" * 48,
        "PHANTOMHUB_DEBUG": "0",
        "PHANTOMHUB_LOG_LEVEL": "WARNING",
        "PHANTOMHUB_SECURE_COOKIES": "0",
        "PHANTOMHUB_INGEST_RATE": "off",
        "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
    }
    print("[setup] migrating …", flush=True)
    manage(env, "migrate", "--no-input")
    return env


def in_process_env(database_url: str) -> None:
    """This process's environment for Django against a benchmark's database (production settings)."""
    import os

    os.environ.update(
        {
            "PHANTOMHUB_DATABASE_URL": database_url,
            "PHANTOMHUB_SECRET_KEY": "a" * 48,
            "PHANTOMHUB_DEBUG": "0",
            "PHANTOMHUB_LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
        }
    )


def manage(env: dict[str, str], *args: str) -> str:
    """Run a manage.py command against the benchmark's database; its stdout, stripped."""
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def postgres_cpu_s() -> float:
    """CPU seconds of every PostgreSQL process on this machine (backends, WAL writer,
    checkpointer, autovacuum), as /proc counts them, plus what the postmaster reaped of exited
    backends (a backend that exits inside a window counts its whole life there). Meaningful only
    when nothing else uses PostgreSQL here (the benchmarks say so), and only where PostgreSQL
    runs on this machine."""
    import psutil

    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] not in ("postgres", "postmaster"):
            continue
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


# The server settings that decide what a write-heavy load costs PostgreSQL (docs/deployment.md,
# "PostgreSQL settings"): a benchmark that reads PostgreSQL's CPU records them with its figures.
PG_WRITE_SETTINGS = ("shared_buffers", "max_wal_size", "checkpoint_timeout", "wal_compression", "wal_buffers",
                     "synchronous_commit", "autovacuum", "default_toast_compression")  # fmt: skip


def postgres_settings(database_url: str) -> dict[str, str]:
    """PG_WRITE_SETTINGS as the server in use reports them (``SHOW``, with units)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in PG_WRITE_SETTINGS}  # type: ignore[index]


def statements_reset(database_url: str) -> None:
    """Zero pg_stat_statements (it must be in shared_preload_libraries; created here if need be)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
        except psycopg.Error as exc:
            raise SystemExit(
                f"--statements needs pg_stat_statements: add it to shared_preload_libraries and restart PostgreSQL ({exc})"
            ) from None


def statements_top(database_url: str, top: int = 12) -> list[dict[str, Any]]:
    """This database's statements since statements_reset, by total execution time (wall time in
    the server, waits included), each with its share of all of them."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.total_exec_time, s.calls, s.rows, regexp_replace(s.query, '\\s+', ' ', 'g') "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
            "ORDER BY s.total_exec_time DESC"
        ).fetchall()
    total = sum(r[0] for r in rows) or 1.0
    return [{"share": round(ms / total, 3), "total_ms": round(ms), "calls": calls, "rows": n, "query": q[:160]}
            for ms, calls, n, q in rows[:top]]  # fmt: skip


def backend_cpu_s(pid: int) -> float:
    """CPU seconds of one PostgreSQL backend (by pid, on this machine), from /proc: clock ticks
    of 10 ms, so a figure is meaningful over many statements."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

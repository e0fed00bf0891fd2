"""A Celery worker keeps its PostgreSQL connection from task to task, as a web process keeps
its own from request to request, and still drops one that broke (a real worker, real Redis)."""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest
from django.db import connection

from phantomhub.fleet.tasks import fleet_derive
from tests.waste.test_celery_worker import Worker, worker  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery]


def _ended(proc: Worker, n: int, timeout_s: float = 60) -> int:
    """Wait until n tasks have ended (succeeded or failed); how many failed."""
    deadline = time.monotonic() + timeout_s
    while True:
        log = proc.log.read_text(errors="replace")
        failed = log.count("raised unexpected")
        if log.count("succeeded in") + failed >= n:
            return failed
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.1)


def _backends(child: psutil.Process) -> set[int]:
    """The PostgreSQL backend pids serving the worker's child: its TCP connections' local ports,
    looked up in pg_stat_activity."""
    ports = [c.laddr.port for c in child.net_connections(kind="tcp") if c.raddr and c.raddr.port == 5432]
    if not ports:
        return set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", [ports])
        return {row[0] for row in cursor.fetchall()}


def test_tasks_reuse_one_connection_and_a_killed_one_is_replaced(worker: Worker) -> None:  # noqa: F811
    child = worker.child()
    fleet_derive.delay()
    assert _ended(worker, 1) == 0
    first = _backends(child)
    assert len(first) == 1, "the connection was closed after the task"
    fleet_derive.delay()
    fleet_derive.delay()
    assert _ended(worker, 3) == 0
    assert _backends(child) == first  # the same backend served all three tasks
    # A connection that breaks under the worker (PostgreSQL restarted, a backend killed): the
    # next task may fail on it (and is marked as errored), the one after gets a new connection.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [next(iter(first))])
    fleet_derive.delay()
    failed = _ended(worker, 4)
    fleet_derive.delay()
    assert _ended(worker, 5) == failed <= 1
    after: Any = _backends(child)
    assert len(after) == 1 and after != first

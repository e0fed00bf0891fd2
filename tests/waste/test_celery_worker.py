"""Analysis through the real broker and a real Celery worker process.

Needs PostgreSQL (the worker is another process, so SQLite's test database is out) and Redis.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from django.conf import settings
from django.db import connection

from phantomhub.celery import app as celery_app
from phantomhub.telemetry.columns import STEP_COLUMNS, columns_validate
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.services import steps_ingest
from phantomhub.waste import services
from phantomhub.waste.models import OrgSettings, RunAnalysis
from tests.conftest import Tenant
from tests.waste.test_analysis_service import T0_NS, S, finish, known_steps, make_run, price_36  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery]
ROOT = Path(__file__).resolve().parents[2]


def _pg_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Worker:
    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PHANTOMHUB_DATABASE_URL": _pg_url(), "PHANTOMHUB_REDIS_URL": settings.CELERY_BROKER_URL,
               "PHANTOMHUB_DEBUG": "1", "DJANGO_SETTINGS_MODULE": "phantomhub.settings"}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "phantomhub", "worker", "--concurrency", "1", "--loglevel", "INFO",
             "-Q", "phantomhub", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while b"ready." not in self.log.read_bytes():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "worker did not start"
            time.sleep(0.2)

    def child(self) -> psutil.Process:
        assert self.proc is not None
        children = psutil.Process(self.proc.pid).children()
        assert children, "prefork worker has no child"
        return children[0]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def worker(tmp_path: Path, settings: Any) -> Iterator[Worker]:
    if connection.vendor != "postgresql":
        pytest.skip("the worker process needs the PostgreSQL test database")
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    celery_app.conf.task_always_eager = False
    worker = Worker(tmp_path / "worker.log")
    worker.start()
    yield worker
    worker.stop()
    celery_app.conf.task_always_eager = True


def _wait_analysed(run_id: str, timeout_s: float = 60) -> RunAnalysis:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = RunAnalysis.objects.filter(run_id=run_id).first()
        if row is not None and row.analysed_seq >= Run.objects.get(pk=run_id).ingest_seq:
            return row
        time.sleep(0.2)
    raise AssertionError("run was not analysed in time")


@pytest.mark.usefixtures("price_36")
def test_ingest_enqueues_a_debounced_analysis_that_the_worker_runs(owner: Tenant, worker: Worker) -> None:
    OrgSettings.objects.update_or_create(pk=1, defaults={"analysis_debounce_s": 1})
    run_id = make_run(owner)
    for first in range(0, 100, 10):  # ten batches in quick succession: debounced to few analyses
        assert owner.post_steps(run_id, known_steps(10, first=first)).status_code == 200
    finish(owner, run_id, T0_NS + 105 * S)
    row = _wait_analysed(run_id)
    assert row.cost_usd == Decimal("1.15") and row.complete
    received = worker.log.read_text().count("Task phantomhub.waste.tasks.analyze_run")
    assert 1 <= received // 2 < 11  # "received" and "succeeded" lines; fewer analyses than batches


def _big_run(tenant: Tenant, ranks: int, rows: int) -> str:
    run_id = make_run(tenant, gpu_count=ranks, world_size=ranks)
    run = Run.objects.get(pk=run_id)
    for rank in range(ranks):
        for first in range(0, rows, 10_000):
            body = known_steps(10_000, first=first)["steps"]
            columns_validate(body, STEP_COLUMNS, where="steps", keys=("step",), max_rows=10_000)
            steps_ingest(run=run, rank=rank, host=f"node-{rank}", steps=body)
    return run_id


@pytest.mark.usefixtures("price_36")
def test_a_worker_killed_midway_leaves_nothing_half_written_and_the_retry_matches(owner: Tenant, worker: Worker) -> None:
    run_id = _big_run(owner, ranks=4, rows=100_000)
    RunAnalysis.objects.filter(run_id=run_id).delete()
    from phantomhub.waste.tasks import analyze_run

    child = worker.child()
    analyze_run.delay(run_id)
    deadline = time.monotonic() + 30
    while "analyze_run" not in worker.log.read_text():  # received
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.1)  # inside the analysis: 400,000 rows take about 0.4 s on this machine now, more under load
    child.kill()
    row = _wait_analysed(run_id, timeout_s=120)  # acks_late + reject_on_worker_lost: redelivered
    assert "WorkerLostError" in worker.log.read_text()  # the kill landed mid-analysis
    stored = (row.cost_usd, row.recoverable_usd, row.result["categories"], row.result["steps"])
    RunAnalysis.objects.filter(run_id=run_id).delete()
    reference = services.run_analyze(run_id=uuid.UUID(run_id))
    assert reference is not None
    assert stored == (
        reference.cost_usd,
        reference.recoverable_usd,
        reference.result["categories"],
        reference.result["steps"],
    )
    assert reference.result["steps"] == 400_000

"""The demo seeding holds a bounded number of database connections and leaves none behind (it held
40-81 idle PostgreSQL connections at once before, "too many clients" for its neighbours on a shared
server), and retries what the API says to retry (503, 429 with Retry-After) instead of aborting."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from phantomhub.demo import post
from phantomhub.demo.fleet import fleet_runs
from phantomhub.demo.management.commands.seeddemo import Command
from phantomhub.demo.post import SERVER_THREADS, Poster, local_server
from phantomhub.telemetry.models import Run


class _Sampler:
    """Counts the test database's connections other than this test's own, every few ms, from a
    connection of its own (excluded too)."""

    def __init__(self) -> None:
        conf = connection.settings_dict
        self.conn = psycopg.connect(
            dbname=conf["NAME"], user=conf["USER"], password=conf["PASSWORD"], host=conf["HOST"], port=conf["PORT"] or 5432,
            autocommit=True,
        )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            self.own = cursor.fetchone()[0]
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def count(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
            [self.own],
        ).fetchone()
        return int(row[0]) if row else 0

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.count())
            time.sleep(0.005)

    def __enter__(self) -> _Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.django_db(transaction=True)
def test_seeding_holds_a_bounded_number_of_connections_and_leaves_none(monkeypatch: pytest.MonkeyPatch) -> None:
    if settings.TEST_BACKEND != "postgresql":
        pytest.skip("counts PostgreSQL connections")
    assert connection.settings_dict["CONN_MAX_AGE"] > 0  # persistent connections, as served (what leaked)
    tokens = Command()._tokens()
    runs = list(fleet_runs(runs=18))  # one per project
    sampler = _Sampler()
    try:
        with sampler:
            with local_server() as address, ThreadPoolExecutor(max_workers=16) as clients:  # more clients than threads
                rows = sum(clients.map(lambda run: Poster(address, tokens[run.project]).run(run), runs))
                during = sampler.peak
            deadline = time.monotonic() + 5  # a closed connection's backend takes a moment to exit
            while (after := sampler.count()) and time.monotonic() < deadline:
                time.sleep(0.02)
        assert rows == sum(run.rows for run in runs) and Run.objects.count() == len(runs)
        assert 1 <= during <= SERVER_THREADS, during
        assert after == 0
    finally:
        sampler.conn.close()


class _Flaky(BaseHTTPRequestHandler):
    """A server that answers the first requests with what the test queued, then 200."""

    answers: list[tuple[int, dict[str, str]]] = []
    seen = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen += 1
        status, headers = type(self).answers.pop(0) if type(self).answers else (200, {})
        body = json.dumps({"accepted": 3} if status == 200 else {"error": {"code": "unavailable"}}).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Flaky.seen = 0
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_503_or_429_is_retried_after_its_retry_after_and_another_4xx_is_not(flaky: str) -> None:
    waits: list[float] = []
    _Flaky.answers = [(503, {"Retry-After": "5"}), (429, {"Retry-After": "2"}), (503, {})]
    poster = Poster(flaky, "phk_x", sleep=waits.append)
    assert poster.post("/api/v1/runs/x/steps", {"rank": 0}) == {"accepted": 3}
    assert _Flaky.seen == 4 and poster.retries == 3
    assert waits[0] >= 5 and waits[1] >= 2 and 0 < waits[2] <= post.RETRY_MAX_S
    _Flaky.answers, _Flaky.seen = [(400, {})], 0
    with pytest.raises(RuntimeError, match="400"):
        poster.post("/api/v1/runs/x/steps", {"rank": 0})
    assert _Flaky.seen == 1  # a request the server refused is never retried


def test_a_server_unavailable_past_the_deadline_aborts_with_the_reason(flaky: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(post, "RETRY_DEADLINE_S", 10.0)
    clock = [0.0]
    _Flaky.answers = [(503, {"Retry-After": "4"})] * 10
    poster = Poster(flaky, "phk_x", sleep=lambda s: clock.__setitem__(0, clock[0] + s), clock=lambda: clock[0])
    with pytest.raises(RuntimeError, match="503 for 10 s"):
        poster.post("/api/v1/runs", {})
    assert 2 <= _Flaky.seen <= 4


@pytest.mark.django_db(transaction=True)
def test_the_demos_jobs_arrive_as_attempts_that_failed_and_resumed() -> None:
    """The demo's jobs through the real ingest (what `make run` seeds): attempts in order, each
    ending as generated (a silent one marked crashed when the next joined), restores after the last
    save before the failure, lost work priced, and no warning on the job page."""
    import uuid
    from datetime import UTC, datetime
    from decimal import Decimal

    from phantomhub.demo.fleet import JOBS, job_runs
    from phantomhub.demo.post import post_all
    from phantomhub.pricing.services import price_set
    from phantomhub.telemetry.models import Job
    from phantomhub.waste.jobs import job_figures
    from phantomhub.waste.services import run_analyze

    # Its own price: a late test's database has lost the migrations' example prices to the
    # transactional tests before it.
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("4"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    tokens = Command()._tokens()
    runs = list(job_runs())
    with local_server() as address:
        post_all(runs, lambda run: tokens[run.project], address, lambda _: None)
    for run in runs:
        run_analyze(run_id=uuid.UUID(run.body["id"]))
    for _, _, key, save_every, _, attempts in JOBS:
        figures = job_figures(Job.objects.get(key=f"slurm/{key}"))
        causes = [a["end_cause"] for a in figures["attempts"]]
        assert causes == [cause or "silent" for _, _, cause in attempts], key
        assert figures["warnings"] == [], key
        assert all(step % save_every == save_every - 1 for a in figures["attempts"] for step in a["restored_steps"])
        assert figures["totals"]["lost"]["rework"]["usd"] > 0 and figures["totals"]["lost"]["checkpoint"]["usd"] > 0
        assert figures["advice"]["interval"] is not None or figures["advice"]["async"] is not None, key

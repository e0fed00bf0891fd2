"""Post demo runs through the real HTTP ingest API, served for the purpose by a local WSGI server.

The server answers on a fixed pool of threads (SERVER_THREADS), whose database connections are
closed when the server closes: a thread per request with persistent connections (CONN_MAX_AGE)
left one idle PostgreSQL connection per request thread until the garbage collector found it, 40 to
81 at once during `make run`, enough to leave other databases on a shared server with "too many
clients". The poster retries what the API says to retry (docs/api.md: 429 and 5xx,
with Retry-After, and network errors) as the agent does, with capped backoff and a deadline,
instead of aborting the seeding on the first 503.
"""

from __future__ import annotations

import email.utils
import gzip
import http.client
import json
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.wsgi import get_wsgi_application
from django.db import connections

from phantomhub.demo.fleet import DemoRun

SERVER_THREADS = 4  # requests served at once: at most this many database connections, closed with the server
RETRY_BASE_S = 0.5
RETRY_MAX_S = 30.0
RETRY_DEADLINE_S = 300.0  # a request retried for this long without success aborts the seeding


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Pooled(WSGIServer):
    """A WSGI server whose requests are served by SERVER_THREADS threads: each keeps its database
    connection from request to request as a web process does (CONN_MAX_AGE), and closes it when
    the server closes. A thread per request left a connection behind in every thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self.workers = [threading.Thread(target=self._work, name=f"demo-server-{i}", daemon=True) for i in range(SERVER_THREADS)]
        for worker in self.workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.requests.put((request, client_address))

    def _work(self) -> None:
        try:
            while (item := self.requests.get()) is not None:
                request, client_address = item
                try:
                    self.finish_request(request, client_address)
                except Exception:
                    self.handle_error(request, client_address)
                finally:
                    self.shutdown_request(request)
        finally:
            connections.close_all()

    def server_close(self) -> None:
        super().server_close()
        for _ in self.workers:
            self.requests.put(None)
        for worker in self.workers:
            worker.join()


@contextmanager
def local_server() -> Iterator[str]:
    """PhantomHub's own WSGI app on 127.0.0.1 (a free port), for as long as the block runs."""
    server = make_server("127.0.0.1", 0, get_wsgi_application(), server_class=_Pooled, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def retry_after_s(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_s(attempt: int, retry_after: float | None) -> float:
    """Capped exponential backoff with equal jitter; a Retry-After is a floor (capped too)."""
    exp = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** min(attempt, 16))
    delay = exp / 2 + random.random() * exp / 2
    return max(delay, min(retry_after, RETRY_MAX_S)) if retry_after is not None else delay


class Poster:
    def __init__(
        self,
        address: str,
        token: str,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.token = token
        self.sleep, self.clock = sleep, clock
        self.retries = 0

    def _send(self, path: str, data: bytes) -> tuple[int, str | None, bytes]:
        conn = http.client.HTTPConnection(self.address, timeout=120)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Content-Encoding": "gzip"}
        try:
            conn.request("POST", path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheader("Retry-After"), response.read()
        finally:
            conn.close()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON body; 429, 5xx and network errors are retried (the batches are idempotent),
        any other error raises."""
        data = gzip.compress(json.dumps(body).encode(), 1)
        deadline = self.clock() + RETRY_DEADLINE_S
        attempt = 0
        while True:
            try:
                status, retry_after, payload = self._send(path, data)
            except (OSError, http.client.HTTPException) as exc:
                status, retry_after, payload = 0, None, str(exc).encode()
            if 200 <= status < 300:
                return dict(json.loads(payload))
            if status not in (0, 429) and status < 500:
                raise RuntimeError(f"POST {path}: {status} {payload[:300]!r}")
            delay = backoff_s(attempt, retry_after_s(retry_after))
            if self.clock() + delay > deadline:
                raise RuntimeError(f"POST {path}: {status or 'no answer'} for {RETRY_DEADLINE_S:.0f} s: {payload[:300]!r}")
            self.retries += 1
            attempt += 1
            self.sleep(delay)

    def run(self, run: DemoRun) -> int:
        self.post("/api/v1/runs", run.body)
        base = f"/api/v1/runs/{run.body['id']}"
        accepted = 0
        for batch in run.steps:
            accepted += self.post(f"{base}/steps", batch)["accepted"]
        for batch in run.samples:
            self.post(f"{base}/samples", batch)
        if run.events:
            self.post(f"{base}/events", {"events": run.events})
        return accepted


def post_all(runs: Iterable[DemoRun], tokens: Callable[[DemoRun], str], address: str, progress: Callable[[str], None]) -> int:
    rows = 0
    for index, run in enumerate(runs, start=1):
        rows += Poster(address, tokens(run)).run(run)
        if index % 25 == 0:
            progress(f"  posted {index} runs ({rows:,} step rows)…")
    return rows

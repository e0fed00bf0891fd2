"""Post demo runs through the real HTTP ingest API, served for the purpose by a local WSGI server."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.wsgi import get_wsgi_application

from phantomhub.demo.fleet import DemoRun


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


@contextmanager
def local_server() -> Iterator[str]:
    """PhantomHub's own WSGI app on 127.0.0.1 (a free port), for as long as the block runs."""
    server = make_server("127.0.0.1", 0, get_wsgi_application(), server_class=_Threaded, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


class Poster:
    def __init__(self, address: str, token: str) -> None:
        self.address = address
        self.token = token

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.address, timeout=120)
        data = gzip.compress(json.dumps(body).encode(), 1)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Content-Encoding": "gzip"}
        conn.request("POST", path, body=data, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        conn.close()
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: {response.status} {payload[:300]!r}")
        return dict(json.loads(payload))

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

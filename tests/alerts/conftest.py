"""Fixtures of the alert tests: live runs analysed by the real pipeline, and a local receiver."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from phantomhub.waste import services as waste_services
from phantomhub.waste.models import RunAnalysis
from tests.conftest import Tenant, free_port
from tests.waste.test_analysis_service import H100_BF16, T0_NS, S, make_run, price_36  # noqa: F401


def steps(n: int, first: int = 0, *, dur_s: float = 1.0, data_s: float = 0.2, t0_ns: int = T0_NS, rank: int = 0,
          flops_s: float = 0.35, tokens: int = 1000) -> dict[str, Any]:  # fmt: skip
    """n back-to-back steps of dur_s: data_s waiting for data, the rest compute (forward 2/7,
    backward 4/7, optimizer 1/7 of it); FLOPs worth flops_s at target MFU 0.5 on an H100."""
    compute = dur_s - data_s
    start = t0_ns + int(first * dur_s * S) if rank == 0 else t0_ns
    return {
        "rank": rank,
        "steps": {
            "step": list(range(first, first + n)),
            "t_start_ns": [start + int(i * dur_s * S) for i in range(n)],
            "dur_ns": [int(dur_s * S)] * n,
            "data_ns": [int(data_s * S)] * n,
            "forward_ns": [int(compute * 2 / 7 * S)] * n,
            "backward_ns": [int(compute * 4 / 7 * S)] * n,
            "optimizer_ns": [int(compute * 1 / 7 * S)] * n,
            "flops": [0.5 * H100_BF16 * flops_s] * n,
            "tokens": [tokens] * n,
        },
    }


def analyse(run_id: str) -> RunAnalysis:
    row = waste_services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None
    return row


def live_run(tenant: Tenant, *batches: dict[str, Any], **fields: Any) -> str:
    """A running run (no finish event) with these step batches, analysed."""
    run_id = make_run(tenant, allocation_start=_iso_ns(T0_NS), **fields)
    for body in batches:
        response = tenant.post_steps(run_id, body)
        assert response.status_code == 200, response.content
    analyse(run_id)
    return run_id


def _iso_ns(ns: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A local HTTP server that records every POST; `answers` (popped in order) pick the status."""

    url: str
    got: list[Received] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    answer: Callable[[Received], int] | None = None
    headers: dict[str, str] = field(default_factory=dict)  # sent with every answer
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int, timeout_s: float) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.got) >= count:
                    return list(self.got)
            time.sleep(0.1)
        with self.lock:
            return list(self.got)


LOOPBACK_ALLOWED = "127.0.0.1/32"  # the only address a test may send to: its own listener


def _allow_loopback(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.EGRESS_ALLOW_NETWORKS = [LOOPBACK_ALLOWED]
    monkeypatch.setenv("PHANTOMHUB_EGRESS_ALLOW_NETWORKS", LOOPBACK_ALLOWED)


@pytest.fixture
def loopback_allowed(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The egress allowlist lets this test's calls reach 127.0.0.1 (and only that): in this
    process, and in a worker or server it starts (they read the environment)."""
    _allow_loopback(settings, monkeypatch)


@pytest.fixture
def receiver(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A local receiver, and the allowlist that lets the test's calls reach it (loopback_allowed;
    other suites import this fixture alone)."""
    _allow_loopback(settings, monkeypatch)
    state = Receiver(url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            item = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, raw, time.monotonic())
            with state.lock:
                state.got.append(item)
                code = state.answers.pop(0) if state.answers else (state.answer(item) if state.answer else 200)
            body = b'{"ok": true}'
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            for key, value in state.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@dataclass
class Smtp:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that Django's SMTP backend sends to."""

    got: list[Any] = field(default_factory=list)  # aiosmtpd envelopes: mail_from, rcpt_tos, content


@pytest.fixture
def smtp(settings: Any) -> Iterator[Smtp]:
    aiosmtpd = pytest.importorskip("aiosmtpd.controller")
    state = Smtp()

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            state.got.append(envelope)
            return "250 OK"

    port = free_port()
    controller = aiosmtpd.Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    try:
        yield state
    finally:
        controller.stop()

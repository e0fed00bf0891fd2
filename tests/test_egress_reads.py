"""egress.get and egress.post_form (the calls whose answer is read: single sign-on's discovery,
keys and tokens) keep the policy: internal addresses only for the allowlist or a host the operator
configured outright (trusted_hosts), no redirects followed, the body bounded and its truncation
said. Against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings

from phantomhub import egress

SEEN: list[tuple[str, str, bytes]] = []


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        SEEN.append((self.command, self.headers.get("Content-Type", ""), self.rfile.read(length)))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.end_headers()
            return
        body = b"x" * 5000 if self.path == "/big" else b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@override_settings(EGRESS_ALLOW_HOSTS=[], EGRESS_ALLOW_NETWORKS=[])
def test_an_internal_host_is_reached_only_when_trusted(origin: str) -> None:
    refused = egress.get(f"{origin}/doc", timeout_s=5)
    assert refused.status_code is None and "loopback" in refused.reason and not refused.ok
    reply = egress.get(f"{origin}/doc", timeout_s=5, trusted_hosts=["127.0.0.1"])
    assert reply.ok and reply.body == b'{"ok": true}' and reply.headers["content-type"] == "application/json"


@override_settings(EGRESS_ALLOW_HOSTS=[], EGRESS_ALLOW_NETWORKS=[])
def test_a_trusted_host_does_not_open_other_hosts(origin: str) -> None:
    reply = egress.get(origin.replace("127.0.0.1", "localhost") + "/doc", timeout_s=5, trusted_hosts=["127.0.0.1"])
    assert reply.status_code is None and "refused" in reply.reason


@override_settings(EGRESS_ALLOW_NETWORKS=["127.0.0.1/32"])
def test_the_body_is_bounded_and_its_truncation_said(origin: str) -> None:
    reply = egress.get(f"{origin}/big", timeout_s=5, max_bytes=1000)
    assert reply.status_code == 200 and len(reply.body) == 1000 and reply.truncated and not reply.ok


@override_settings(EGRESS_ALLOW_NETWORKS=["127.0.0.1/32"])
def test_a_redirect_is_an_answer_not_followed(origin: str) -> None:
    reply = egress.get(f"{origin}/redirect", timeout_s=5)
    assert reply.status_code == 302 and reply.headers["location"].endswith("/elsewhere") and not reply.ok


@override_settings(EGRESS_ALLOW_NETWORKS=["127.0.0.1/32"])
def test_post_form_sends_an_encoded_form(origin: str) -> None:
    SEEN.clear()
    reply = egress.post_form(f"{origin}/token", {"grant_type": "authorization_code", "code": "a b&c"}, timeout_s=5)
    assert reply.ok
    assert SEEN == [("POST", "application/x-www-form-urlencoded", b"grant_type=authorization_code&code=a+b%26c")]


def test_a_closed_port_reads_as_could_not_connect() -> None:
    reply = egress.get("http://127.0.0.1:1/x", timeout_s=2, trusted_hosts=["127.0.0.1"])
    assert (reply.status_code, reply.reason) == (None, egress.REASON_CONNECT)

"""The egress policy (phantomhub/egress.py) from outside: rules saved through the API, test sends
through POST /rules/<id>/test, against real listeners on 127.0.0.1 only.

Every form of an internal address is refused at save time (400 naming webhook_url) and at send
time (a rule stored before the policy), and the listener behind the loopback forms never sees a
connection. Only the settings' allowlist reaches an internal address; a refused port, a reset,
a close and a non-HTTP answer read alike; the whole call has a deadline. DNS lies outside the
machine, so names are answered by a stand-in resolver (resolver below)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub import egress
from phantomhub.accounts.models import Membership, Profile, Project, Role
from phantomhub.alerts.models import AlertDelivery, AlertRule
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

RULE = {"name": "hook", "kind": "silent_run", "scope": "project", "project": "llm-pretrain", "for_s": 120}


@dataclass
class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and answers with `reply`
    (bytes sent after the request arrives; None: close at once without a word)."""

    port: int
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    reply: bytes | Callable[[socket.socket], None] | None = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    lock: threading.Lock = field(default_factory=threading.Lock)


def _serve(server: socket.socket, state: Listener) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with state.lock:
            state.connections += 1
        threading.Thread(target=_answer, args=(conn, state), daemon=True).start()


def _answer(conn: socket.socket, state: Listener) -> None:
    with conn:
        try:
            conn.settimeout(5)
            if state.reply is None:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            with state.lock:
                state.requests.append(data)
            if callable(state.reply):
                state.reply(conn)
            else:
                conn.sendall(state.reply)
        except OSError:
            pass


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    state = Listener(port=server.getsockname()[1])
    threading.Thread(target=_serve, args=(server, state), daemon=True).start()
    yield state
    server.close()


@dataclass
class Resolver:
    names: dict[str, list[str]] = field(default_factory=dict)  # made-up name -> its addresses
    calls: dict[str, int] = field(default_factory=dict)  # lookups of each made-up name


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    """Names a test makes up, answered here (every other name: the real resolver)."""
    state = Resolver()
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(host, str) and host in state.names):
            return real(host, port, *args, **kwargs)
        state.calls[host] = state.calls.get(host, 0) + 1
        out = []
        for address in state.names[host]:
            if ":" in address:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port), 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port))))
        return out

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return state


def _client(username: str, *, org_admin: bool = False, team_of: Tenant | None = None, role: str = Role.ADMIN) -> APIClient:
    user = User.objects.create_user(username, password="pw")
    if org_admin:
        Profile.objects.create(user=user, is_org_admin=True)
    if team_of is not None:
        Membership.objects.create(user=user, team=team_of.project.team, role=role)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def admin(owner: Tenant) -> APIClient:
    return _client("org-admin", org_admin=True)


@pytest.fixture
def lead(owner: Tenant) -> APIClient:
    return _client("nlp-lead", team_of=owner)


def _forms(port: int) -> list[tuple[str, str]]:
    """(URL, what the refusal names): every spelling of an internal address the issue lists."""
    return [
        (f"http://127.0.0.1:{port}/", "loopback"),
        (f"http://127.1:{port}/", "loopback"),
        (f"http://2130706433:{port}/", "loopback"),
        (f"http://0x7f000001:{port}/", "loopback"),
        (f"http://017700000001:{port}/", "loopback"),
        (f"http://0.0.0.0:{port}/", "unspecified"),
        (f"http://[::]:{port}/", "unspecified"),
        (f"http://[::1]:{port}/", "loopback"),
        (f"http://[::ffff:127.0.0.1]:{port}/", "IPv4-mapped address of 127.0.0.1, a loopback"),
        ("http://[::ffff:169.254.169.254]/", "IPv4-mapped address of 169.254.169.254, a link-local"),
        ("http://10.1.2.3/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://100.64.0.1/", "shared"),
        ("http://224.0.0.1/", "multicast"),
        (f"http://[2002:7f00:1::]:{port}/", "6to4 address of 127.0.0.1, a loopback"),
        ("http://[64:ff9b::a9fe:a9fe]/", "NAT64 address of 169.254.169.254"),
        (f"http://localhost:{port}/", "localhost resolves to a loopback"),
        (f"http://internal-alias.test:{port}/", "internal-alias.test resolves to a loopback"),
        (f"http://half-public.test:{port}/", "half-public.test resolves to a loopback"),
    ]


def test_every_internal_form_is_refused_at_save_and_nothing_connects(
    admin: APIClient, listener: Listener, resolver: Resolver
) -> None:
    resolver.names["internal-alias.test"] = ["127.0.0.1"]
    # A public first answer is not enough: every answer is checked (nothing connects at save).
    resolver.names["half-public.test"] = ["8.8.8.8", "127.0.0.1"]
    for url, why in _forms(listener.port):
        response = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": url}, format="json")
        assert response.status_code == 400, (url, response.content)
        message = response.json()["error"]["fields"]["webhook_url"]
        assert message.startswith("refused: ") and why in message, (url, message)
    assert not AlertRule.objects.exists()
    assert listener.connections == 0


def test_every_internal_form_stored_before_the_policy_is_refused_at_send(
    admin: APIClient, listener: Listener, resolver: Resolver
) -> None:
    resolver.names["internal-alias.test"] = ["127.0.0.1"]
    resolver.names["half-public.test"] = ["127.0.0.1", "8.8.8.8"]  # loopback first: a slip would reach the listener only
    for url, why in _forms(listener.port):
        rule = AlertRule.objects.create(name="old", kind="silent_run", for_s=120, webhook_url=url)
        response = admin.post(f"/api/v1/alerts/rules/{rule.pk}/test")
        assert response.status_code == 200, (url, response.content)
        [item] = response.json()["deliveries"]
        assert (item["status"], item["attempts"]) == ("failed", 1), (url, item)
        assert item["error"].startswith("refused: ") and why in item["error"], (url, item["error"])
    assert listener.connections == 0


def test_urls_that_are_not_http_or_carry_credentials_are_refused(admin: APIClient) -> None:
    for url, why in [
        ("file:///etc/passwd", "only http and https"),
        ("gopher://127.0.0.1/", "only http and https"),
        ("http://user:pw@example.com/hook", "credentials"),
        ("http://example.com/a b", "spaces"),
        ("http://[::1/", "not valid"),
        ("http://example.com:99999/", "not valid"),
        ("http://example.com:0/", "port"),
    ]:
        response = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": url}, format="json")
        assert response.status_code == 400 and why in response.json()["error"]["fields"]["webhook_url"], url


def test_the_allowlisted_network_is_reached_and_the_host_name_is_kept(
    admin: APIClient, listener: Listener, resolver: Resolver, settings: Any
) -> None:
    resolver.names["hooks.test"] = ["127.0.0.1"]
    refused = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": f"http://hooks.test:{listener.port}/in"}, format="json")
    assert refused.status_code == 400 and listener.connections == 0
    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]
    created = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": f"http://hooks.test:{listener.port}/in"}, format="json")
    assert created.status_code == 201, created.content
    lookups = resolver.calls["hooks.test"]
    [item] = admin.post(f"/api/v1/alerts/rules/{created.json()['id']}/test").json()["deliveries"]
    assert item["status"] == "sent" and item["status_code"] == 200
    # One lookup for the attempt, and the connection went to the address it checked.
    assert resolver.calls["hooks.test"] == lookups + 1
    [request] = listener.requests
    assert request.startswith(b"POST /in HTTP/1.1\r\n")
    assert f"\r\nHost: hooks.test:{listener.port}\r\n".encode() in request


def test_an_allowlisted_host_name_may_resolve_to_an_internal_address(
    admin: APIClient, listener: Listener, resolver: Resolver, settings: Any
) -> None:
    resolver.names["relay.internal.test"] = ["127.0.0.1"]
    settings.EGRESS_ALLOW_HOSTS = ["relay.internal.test"]
    url = f"http://relay.internal.test:{listener.port}/"
    created = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": url}, format="json")
    assert created.status_code == 201, created.content
    [item] = admin.post(f"/api/v1/alerts/rules/{created.json()['id']}/test").json()["deliveries"]
    assert item["status"] == "sent"
    # The host list names hosts, not the addresses they resolve to.
    direct = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": f"http://127.0.0.1:{listener.port}/"}, format="json")
    assert direct.status_code == 400


def test_a_team_admin_may_use_only_the_public_host_allowlist(
    lead: APIClient, admin: APIClient, resolver: Resolver, settings: Any
) -> None:
    resolver.names["hooks.public.test"] = ["192.0.2.20"]  # TEST-NET: never sent to (no test sends here)
    resolver.names["listed-but-internal.test"] = ["10.0.0.5"]
    settings.ALERT_WEBHOOK_HOSTS = ["listed-but-internal.test"]
    outside = lead.post("/api/v1/alerts/rules", RULE | {"webhook_url": "http://127.0.0.1:6379/"}, format="json")
    assert outside.status_code == 403 and "webhook_url" in outside.json()["error"]["fields"]
    unreadable = lead.post("/api/v1/alerts/rules", RULE | {"webhook_url": "gopher://127.0.0.1:6379/"}, format="json")
    assert unreadable.status_code == 400 and "only http and https" in unreadable.json()["error"]["fields"]["webhook_url"]
    listed = lead.post("/api/v1/alerts/rules", RULE | {"webhook_url": "http://listed-but-internal.test/"}, format="json")
    assert listed.status_code == 400 and "private" in listed.json()["error"]["fields"]["webhook_url"]
    assert not AlertRule.objects.exists()
    # Organization admins are not held to the host list, only to the policy (192.0.2.0/24 is
    # documentation space, so not public either).
    by_admin = admin.post("/api/v1/alerts/rules", RULE | {"webhook_url": "http://hooks.public.test/"}, format="json")
    assert by_admin.status_code == 400
    assert by_admin.json()["error"]["fields"]["webhook_url"] == "refused: hooks.public.test resolves to a private address"


def test_a_team_admin_edits_a_rule_whose_url_an_org_admin_chose(lead: APIClient, listener: Listener, settings: Any) -> None:
    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]
    rule = AlertRule.objects.create(
        name="set by an org admin", kind="silent_run", scope="project", for_s=120, webhook_url=f"http://127.0.0.1:{listener.port}/",
        project=Project.objects.get(slug="llm-pretrain"),
    )  # fmt: skip
    assert lead.patch(f"/api/v1/alerts/rules/{rule.pk}", {"for_s": 300}, format="json").status_code == 200
    moved = lead.patch(f"/api/v1/alerts/rules/{rule.pk}", {"webhook_url": f"http://127.0.0.1:{listener.port}/x"}, format="json")
    assert moved.status_code == 403 and "webhook_url" in moved.json()["error"]["fields"]


def _closing_with_nul(conn: socket.socket) -> None:
    conn.sendall(b"\x00\x00\x00\x0a5.5.5-10.11.6-MariaDB\x00")  # a MariaDB-like greeting


@pytest.mark.parametrize(
    "reply",
    [None, b"\x00", b"\x00\x01\x02 not http\r\n\r\n", _closing_with_nul, b"SSH-2.0-OpenSSH_9.6\r\n"],
    ids=["closes-at-once", "nul", "binary", "mariadb-greeting", "ssh-banner"],
)
def test_a_closed_port_a_close_and_a_non_http_answer_read_alike(
    admin: APIClient, listener: Listener, settings: Any, reply: Any
) -> None:
    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    listener.reply = reply
    reasons = []
    for port in (closed_port, listener.port):
        rule = AlertRule.objects.create(name="scan", kind="silent_run", for_s=120, webhook_url=f"http://127.0.0.1:{port}/")
        response = admin.post(f"/api/v1/alerts/rules/{rule.pk}/test")
        assert response.status_code == 200, response.content
        [item] = response.json()["deliveries"]
        assert (item["status"], item["attempts"], item["status_code"]) == ("pending", 1, None)
        reasons.append(item["error"])
    assert reasons == [egress.REASON_CONNECT, egress.REASON_CONNECT]


def test_a_receiver_that_never_answers_times_out_at_the_deadline(listener: Listener, settings: Any) -> None:
    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]

    def drip(conn: socket.socket) -> None:  # one byte of a status line every 0.2 s, forever
        for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 1000:
            conn.sendall(bytes([byte]))
            time.sleep(0.2)

    listener.reply = drip
    started = time.monotonic()
    out = egress.post(f"http://127.0.0.1:{listener.port}/", body=b"{}", headers={}, timeout_s=1.0)
    assert out.reason == egress.REASON_TIMEOUT and out.retry and out.status_code is None
    assert time.monotonic() - started < 3  # a per-read timeout alone would wait for 200 s


def test_a_redirect_is_not_followed_and_a_reason_phrase_is_not_kept(listener: Listener, settings: Any) -> None:
    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]
    listener.reply = b"HTTP/1.1 302 Found\x00\x07 evil\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n"
    out = egress.post(f"http://127.0.0.1:{listener.port}/", body=b"{}", headers={}, timeout_s=2.0)
    assert (out.status_code, out.reason, out.retry) == (302, "HTTP 302 (redirects are not followed)", False)
    assert len(listener.requests) == 1
    listener.reply = b"HTTP/1.1 503 Busy\x00\r\nContent-Length: 0\r\n\r\n"
    out = egress.post(f"http://127.0.0.1:{listener.port}/", body=b"{}", headers={}, timeout_s=2.0)
    assert (out.status_code, out.reason, out.retry) == (503, "HTTP 503", True)


def test_a_huge_answer_is_read_only_up_to_the_bound(listener: Listener, settings: Any) -> None:
    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]
    settings.EGRESS_MAX_RESPONSE_BYTES = 1024
    sent = {"bytes": 0}

    def flood(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
        chunk = b"x" * 65536
        try:
            while sent["bytes"] < 1 << 30:
                conn.sendall(chunk)
                sent["bytes"] += len(chunk)
        except OSError:
            pass

    listener.reply = flood
    started = time.monotonic()
    out = egress.post(f"http://127.0.0.1:{listener.port}/", body=b"{}", headers={}, timeout_s=5.0)
    assert out.ok and out.status_code == 200 and time.monotonic() - started < 3
    time.sleep(0.2)
    assert sent["bytes"] < 64 << 20  # the connection was closed long before a gigabyte


def test_no_other_module_of_phantomhub_opens_a_socket_to_a_url() -> None:
    """Outbound HTTP lives in phantomhub/egress.py only (docs/alerts.md, "Egress")."""
    from pathlib import Path

    root = Path(egress.__file__).parent
    # The demo loader posts to the PhantomHub server named on its command line (an operator's
    # address, not one typed into the product).
    exempt = {"egress.py", "demo/post.py"}
    needles = ("urllib.request", "http.client", "urlopen", "requests.", "urllib3", "socket.create_connection", "httpx")
    offenders = [
        f"{path.relative_to(root)}: {needle}"
        for path in root.rglob("*.py")
        if str(path.relative_to(root)) not in exempt
        for needle in needles
        if needle in path.read_text()
    ]
    assert offenders == []


def test_refusals_are_named_without_network_errors_in_the_delivery_log(admin: APIClient) -> None:
    rule = AlertRule.objects.create(name="metadata", kind="silent_run", for_s=120, webhook_url="http://[::ffff:169.254.169.254]/")
    admin.post(f"/api/v1/alerts/rules/{rule.pk}/test")
    item = AlertDelivery.objects.get()
    assert item.error == "refused: ::ffff:169.254.169.254 is an IPv4-mapped address of 169.254.169.254, a link-local address"


@dataclass
class TlsListener:
    port: int
    ca_file: str
    server_names: list[str | None] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)


@pytest.fixture
def tls_listener(tmp_path: Any) -> Iterator[TlsListener]:
    """An HTTPS listener on 127.0.0.1 whose certificate (from a throwaway CA) names hooks.test."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=egress test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    run("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=hooks.test")
    (tmp_path / "san.ext").write_text("subjectAltName=DNS:hooks.test\n")
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "leaf.pem",
        "-days", "1", "-extfile", "san.ext")  # fmt: skip
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(tmp_path / "leaf.pem"), str(tmp_path / "leaf.key"))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    state = TlsListener(port=server.getsockname()[1], ca_file=str(tmp_path / "ca.pem"))
    server_ctx.sni_callback = lambda sock, name, ctx: state.server_names.append(name)  # type: ignore[assignment,func-returns-value]

    def serve() -> None:
        while True:
            try:
                raw, _ = server.accept()
            except OSError:
                return
            try:
                raw.settimeout(5)
                with server_ctx.wrap_socket(raw, server_side=True) as conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    # Read the body too: closing with unread bytes sends a reset, which can reach the
                    # client before the answer does (a flake seen in CI).
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                    while len(body) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        body += chunk
                    state.requests.append(data)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except (OSError, ssl.SSLError):
                raw.close()

    threading.Thread(target=serve, daemon=True).start()
    yield state
    server.close()


def test_tls_verifies_the_urls_host_name_on_the_checked_address(
    tls_listener: TlsListener, resolver: Resolver, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    settings.EGRESS_ALLOW_NETWORKS = ["127.0.0.1/32"]
    resolver.names["hooks.test"] = ["127.0.0.1"]
    resolver.names["wrong-name.test"] = ["127.0.0.1"]
    monkeypatch.setattr(egress, "_tls_context", lambda: ssl.create_default_context(cafile=tls_listener.ca_file))
    port = tls_listener.port
    out = egress.post(f"https://hooks.test:{port}/in", body=b"{}", headers={}, timeout_s=5.0)
    assert out.ok, out
    assert tls_listener.server_names == ["hooks.test"]  # SNI: the URL's name, not the address
    assert f"\r\nHost: hooks.test:{port}\r\n".encode() in tls_listener.requests[0]
    for url in (f"https://wrong-name.test:{port}/", f"https://127.0.0.1:{port}/"):  # the certificate names neither
        out = egress.post(url, body=b"{}", headers={}, timeout_s=5.0)
        assert (out.status_code, out.reason) == (None, egress.REASON_TLS), url
    assert len(tls_listener.requests) == 1

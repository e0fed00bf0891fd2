"""Every outbound call to an address someone typed (alert webhooks, Slack, anything later).

The policy (docs/alerts.md, "Egress"): a URL is http or https without credentials; its host is
resolved once, and EVERY address it resolves to must be public: loopback, private, link-local,
unspecified, shared (100.64/10), multicast, reserved and other non-global addresses are refused,
and so are IPv6 addresses that embed such an IPv4 one (IPv4-mapped ::ffff:a.b.c.d, 6to4
2002::/16, NAT64 64:ff9b::/96, Teredo, IPv4-compatible ::a.b.c.d). Decimal, octal and hex IPv4
spellings (2130706433, 017700000001, 0x7f000001, 127.1) are whatever the resolver makes of them,
so they are checked as the address they connect to. The connection then goes to the checked
address itself, never resolved again (a second lookup could answer differently), while the Host
header and TLS (SNI and certificate verification) keep the URL's host name.

PHANTOMHUB_EGRESS_ALLOW_HOSTS (host names) and PHANTOMHUB_EGRESS_ALLOW_NETWORKS (addresses or
networks) are the only way to reach an internal address. Redirects are never followed, the whole
call (connect, TLS, request, response) ends at its deadline, at most EGRESS_MAX_RESPONSE_BYTES
of the answer are read, and the reasons a call failed are short fixed phrases: a refused port,
a reset, a closed connection and an answer that is not HTTP all read "could not connect", so the
log cannot tell ports apart.

`post` delivers and keeps nothing of the answer (webhooks). `get` and `post_form` are for the
calls whose answer is read (single sign-on: discovery, keys, tokens, user info): they return the
status, the headers and at most `max_bytes` of the body, and say when the body was longer. Their
`trusted_hosts` names hosts the operator configured outright (the OIDC issuer,
PHANTOMHUB_OIDC_ISSUER): such a host may resolve to an internal address, as an identity provider
inside the company network does; every other rule still holds (docs/identity.md).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import logging
import re
import socket
import ssl
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlencode, urlsplit

import idna
from django.conf import settings

log = logging.getLogger(__name__)

REASON_CONNECT = "could not connect (refused, reset or closed, or no HTTP answer)"
REASON_TIMEOUT = "timed out"
REASON_DNS = "could not resolve the host name"
REASON_TLS = "TLS certificate verification failed"
URL_MAX_CHARS = 2000
REASON_MAX_CHARS = 300

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598): neither private nor global
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known prefix (RFC 6052): the last 32 bits are IPv4
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use prefix (RFC 8215)
_V4_COMPAT = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible ::a.b.c.d
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class Refused(Exception):
    """The URL, or an address its host resolves to, is outside the policy (permanent)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unresolved(Exception):
    """The host name did not resolve (perhaps only for now)."""


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str  # as sent in Host and SNI (IDNA-encoded; an IPv6 literal without brackets)
    port: int
    target: str  # path and query
    addresses: tuple[str, ...]  # every address the host resolved to, each checked

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    reason: str  # "" when delivered; else a short fixed phrase (never a raw network error)
    retry: bool  # worth trying again later

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def text_clean(text: object, *, max_chars: int = REASON_MAX_CHARS) -> str:
    """One line of plain text: control characters (NUL, CR, LF, ...) become spaces, runs of
    spaces one, and at most max_chars characters."""
    return " ".join(_CONTROL.sub(" ", str(text)).split())[:max_chars]


def _embedded_v4(addr: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if addr.ipv4_mapped is not None:
        return "IPv4-mapped", addr.ipv4_mapped
    if addr.sixtofour is not None:
        return "6to4", addr.sixtofour
    if addr.teredo is not None:
        server, client = addr.teredo
        return "Teredo", client if _category(client) else server
    if addr in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr in _V4_COMPAT and int(addr) > 1:
        return "IPv4-compatible", ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def _category(addr: IPAddress) -> str | None:
    """What makes an address internal (None: public). Order matters: the most telling name first."""
    if addr.is_unspecified:
        return "the unspecified address"
    if addr.is_loopback:
        return "a loopback address"
    if addr.is_link_local:
        return "a link-local address"
    if addr.is_multicast:
        return "a multicast address"
    if isinstance(addr, ipaddress.IPv4Address) and addr in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if isinstance(addr, ipaddress.IPv6Address) and addr in _NAT64_LOCAL:
        return "a local-use NAT64 address"
    if addr.is_private:
        return "a private address"
    if addr.is_reserved:
        return "a reserved address"
    if not addr.is_global:
        return "not a public address"
    return None


def address_problem(address: str) -> str | None:
    """Why one address is internal ("a loopback address", "an IPv4-mapped address of
    169.254.169.254, a link-local address"), or None where it is public."""
    addr = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_v4(addr)
        if inner is not None:
            kind, v4 = inner
            why = _category(v4)
            if why is not None:
                article = "an" if kind.startswith("IPv4") else "a"
                return f"{article} {kind} address of {v4}, {why}"
    return _category(addr)


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(e, strict=False) for e in entries)


def _allowed(host: str, address: str, trusted_hosts: Collection[str] = ()) -> bool:
    """The settings' allowlist (and hosts the operator configured outright): the only way to an
    internal address."""
    if host in {h.lower().strip("[]") for h in (*settings.EGRESS_ALLOW_HOSTS, *trusted_hosts)}:
        return True
    addr = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[IPAddress] = [addr]
    if isinstance(addr, ipaddress.IPv6Address) and (inner := _embedded_v4(addr)) is not None:
        candidates.append(inner[1])
    nets = _networks(tuple(settings.EGRESS_ALLOW_NETWORKS))
    return any(a.version == n.version and a in n for a in candidates for n in nets)


def resolve(host: str, port: int) -> list[str]:
    """Every address the host resolves to, in the resolver's order (an IP literal: itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Unresolved(host) from exc
    out: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in out:
            out.append(address)
    if not out:
        raise Unresolved(host)
    return out


def _parse(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, target) of a URL the policy can consider, or Refused."""
    if len(url) > URL_MAX_CHARS:
        raise Refused(f"the URL is longer than {URL_MAX_CHARS} characters")
    if _CONTROL.search(url) or any(c.isspace() for c in url):
        raise Refused("the URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port or bracket raises here, or below)
    except ValueError:
        raise Refused("the URL is not valid (its host or port cannot be read)") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("only http and https URLs are allowed")
    if parts.username is not None or parts.password is not None:
        raise Refused("credentials in the URL are not allowed; sign with the secret instead")
    host = (parts.hostname or "").rstrip(".").replace("%25", "%", 1)  # an IPv6 zone, "%25" in URLs
    if not host:
        raise Refused("the URL has no host")
    port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    if port < 1:
        raise Refused("the URL's port is not a number from 1 to 65535")
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        try:  # a name: IDNA 2008 (UTS 46), so what is resolved is what TLS verifies
            host = idna.encode(host, uts46=True).decode("ascii").lower()
        except (idna.IDNAError, UnicodeError):
            raise Refused("the URL's host is not a valid host name") from None
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return parts.scheme, host, port, target


def destination(url: str, *, trusted_hosts: Collection[str] = ()) -> Destination:
    """The URL's destination with every address its host resolves to, each checked (Refused
    names the first one the policy refuses; Unresolved: the name did not resolve)."""
    scheme, host, port, target = _parse(url)
    addresses = resolve(host, port)
    literal = host.split("%", 1)[0]
    for address in addresses:
        why = address_problem(address)
        if why is None or _allowed(host, address, trusted_hosts):
            continue
        if address.split("%", 1)[0] == literal:
            raise Refused(f"refused: {literal} is {why}")
        raise Refused(f"refused: {host} resolves to {why}")
    return Destination(scheme=scheme, host=host, port=port, target=target, addresses=tuple(addresses))


def url_problem(url: str) -> str | None:
    """Why the policy refuses the URL now (None: it may be called), for checks at save time."""
    try:
        destination(url)
    except Refused as exc:
        return exc.reason
    except Unresolved:
        return "the host name does not resolve"
    return None


def url_host(url: str) -> str:
    """The URL's host as the policy sees it ("" when it has none)."""
    try:
        return _parse(url)[1]
    except Refused:
        return ""


class _Deadline:
    """Shuts the connection down when the whole call's time is up, so a receiver that answers one
    byte at a time cannot hold a sweep past its deadline (socket timeouts bound each read only).
    It holds a duplicate of the socket: shutting that down ends the connection under TLS too."""

    def __init__(self, timeout_s: float) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._done = False
        self.expired = False
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock.dup())
            if self.expired:
                self._shutdown()

    def _shutdown(self) -> None:
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            self._shutdown()

    def close(self) -> None:
        with self._lock:
            self._done = True
            self._timer.cancel()
            for sock in self._socks:
                sock.close()
            self._socks.clear()


@lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()  # certificate and host name verified


class _Connection(http.client.HTTPConnection):
    """HTTP(S) to one checked address, connected without any name lookup."""

    def __init__(self, dest: Destination, address: str, *, timeout_s: float, deadline: _Deadline) -> None:
        super().__init__(address.split("%", 1)[0], dest.port, timeout=timeout_s)
        self._address = address
        self._dest = dest
        self._deadline = deadline

    def connect(self) -> None:
        family = socket.AF_INET6 if ":" in self._address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._deadline.watch(sock)
            sock.settimeout(self.timeout)
            sock.connect((self._address, self._dest.port))
            if self._dest.scheme == "https":
                sock = _tls_context().wrap_socket(sock, server_hostname=self._dest.host.split("%", 1)[0])
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _outcome(code: int) -> Outcome:
    if 200 <= code < 300:
        return Outcome(code, "", False)
    if 300 <= code < 400:
        return Outcome(code, f"HTTP {code} (redirects are not followed)", False)
    return Outcome(code, f"HTTP {code}", code >= 500 or code == 429)


def _failure(exc: BaseException, deadline: _Deadline) -> Outcome:
    if deadline.expired or isinstance(exc, TimeoutError):
        return Outcome(None, REASON_TIMEOUT, True)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Outcome(None, REASON_TLS, True)
    return Outcome(None, REASON_CONNECT, True)


def post(url: str, *, body: bytes, headers: dict[str, str], timeout_s: float) -> Outcome:
    """POST body to url under the policy; never raises. The addresses are tried in order until
    one connects; once the request is out, no other address is tried (no duplicate sends)."""
    try:
        dest = destination(url)
    except Refused as exc:
        return Outcome(None, exc.reason, False)
    except Unresolved:
        return Outcome(None, REASON_DNS, True)
    deadline = _Deadline(timeout_s)
    outcome = Outcome(None, REASON_CONNECT, True)
    try:
        for address in dest.addresses:
            conn = _Connection(dest, address, timeout_s=timeout_s, deadline=deadline)
            try:
                try:
                    conn.connect()
                except Exception as exc:
                    outcome = _failure(exc, deadline)
                    if deadline.expired:
                        break
                    continue
                try:
                    sent = {**headers, "Host": dest.host_header, "Connection": "close"}
                    conn.request("POST", dest.target, body=body, headers=sent)
                    response = conn.getresponse()
                except Exception as exc:
                    log.info("egress to %s failed: %s", dest.host, type(exc).__name__)
                    return _failure(exc, deadline)
                # What a receiver says is not kept; reading a bounded part of it is manners.
                with contextlib.suppress(Exception):
                    response.read(settings.EGRESS_MAX_RESPONSE_BYTES)
                return _outcome(response.status)
            finally:
                conn.close()
    finally:
        deadline.close()
    return outcome


@dataclass(frozen=True)
class Reply:
    """What a `get` or `post_form` brought back. `reason` is "" when an answer came (whatever its
    status), else a short fixed phrase as Outcome's; `body` holds at most the call's max_bytes and
    `truncated` says the answer was longer (a caller parsing it must refuse it)."""

    status_code: int | None
    reason: str
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300 and not self.truncated


def _exchange(
    method: str,
    url: str,
    *,
    body: bytes | None,
    headers: dict[str, str],
    timeout_s: float,
    max_bytes: int,
    trusted_hosts: Collection[str],
) -> Reply:
    """One request under the policy, its answer read up to max_bytes; never raises."""
    try:
        dest = destination(url, trusted_hosts=trusted_hosts)
    except Refused as exc:
        return Reply(None, exc.reason)
    except Unresolved:
        return Reply(None, REASON_DNS)
    deadline = _Deadline(timeout_s)
    failed = Reply(None, REASON_CONNECT)
    try:
        for address in dest.addresses:
            conn = _Connection(dest, address, timeout_s=timeout_s, deadline=deadline)
            try:
                try:
                    conn.connect()
                except Exception as exc:
                    failed = Reply(None, _failure(exc, deadline).reason)
                    if deadline.expired:
                        break
                    continue
                try:
                    sent = {**headers, "Host": dest.host_header, "Connection": "close"}
                    conn.request(method, dest.target, body=body, headers=sent)
                    response = conn.getresponse()
                    data = response.read(max_bytes + 1)
                except Exception as exc:
                    log.info("egress to %s failed: %s", dest.host, type(exc).__name__)
                    return Reply(None, _failure(exc, deadline).reason)
                return Reply(
                    response.status,
                    "",
                    {name.lower(): value for name, value in response.getheaders()},
                    data[:max_bytes],
                    len(data) > max_bytes,
                )
            finally:
                conn.close()
    finally:
        deadline.close()
    return failed


def get(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float,
    max_bytes: int | None = None,
    trusted_hosts: Collection[str] = (),
) -> Reply:
    """GET url under the policy; the answer's status, headers and at most max_bytes of its body
    (EGRESS_MAX_RESPONSE_BYTES by default). Redirects are answers, not followed."""
    limit = settings.EGRESS_MAX_RESPONSE_BYTES if max_bytes is None else max_bytes
    return _exchange(
        "GET", url, body=None, headers=headers or {}, timeout_s=timeout_s, max_bytes=limit, trusted_hosts=trusted_hosts
    )


def post_form(
    url: str,
    fields: dict[str, str],
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float,
    max_bytes: int | None = None,
    trusted_hosts: Collection[str] = (),
) -> Reply:
    """POST fields as application/x-www-form-urlencoded (an OAuth token request) under the
    policy; the answer as `get` returns it."""
    sent = {**(headers or {}), "Content-Type": "application/x-www-form-urlencoded"}
    limit = settings.EGRESS_MAX_RESPONSE_BYTES if max_bytes is None else max_bytes
    return _exchange(
        "POST", url, body=urlencode(fields).encode(), headers=sent, timeout_s=timeout_s, max_bytes=limit,
        trusted_hosts=trusted_hosts,
    )  # fmt: skip

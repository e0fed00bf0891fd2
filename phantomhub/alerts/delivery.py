"""Sending one delivery attempt: a signed webhook POST or an email, and the retry schedule.

Webhooks carry ``X-PhantomHub-Timestamp`` (unix seconds) and ``X-PhantomHub-Signature:
v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>``; a receiver recomputes it and refuses
a timestamp older than a few minutes, so a captured request cannot be replayed later. 5xx,
429 and network errors are retried with backoff; other 4xx are not (the receiver said no).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail

SIGNATURE_HEADER = "X-PhantomHub-Signature"
TIMESTAMP_HEADER = "X-PhantomHub-Timestamp"
DELIVERY_HEADER = "X-PhantomHub-Delivery"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    return "v1=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def retry_delay_s(attempts: int) -> float:
    """Wait after the ``attempts``-th failed attempt: base × 3^(attempts−1) (10, 30, 90, 270,
    810 s with the default base of 10 s)."""
    return float(settings.ALERT_RETRY_BASE_S * 3 ** max(attempts - 1, 0))


def url_problem(url: str) -> str | None:
    """Why a webhook URL is refused (None: fine): only http/https, and where
    PHANTOMHUB_ALERT_WEBHOOK_HOSTS is set, only those hosts; link-local and metadata addresses
    (169.254.0.0/16, fe80::/10) never, whatever the list says."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "only http and https URLs are allowed"
    host = (parts.hostname or "").lower()
    if not host:
        return "the URL has no host"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed; sign with the secret instead"
    allowed = settings.ALERT_WEBHOOK_HOSTS
    if allowed and host not in allowed:
        return f"{host} is not in the allowed webhook hosts (PHANTOMHUB_ALERT_WEBHOOK_HOSTS)"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if addr.is_link_local:
        return "link-local addresses (cloud metadata) are not allowed"
    return None


def _resolves_link_local(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return any(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_link_local for info in infos)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would carry the signed body to a URL nobody checked.
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True)
class Attempt:
    ok: bool
    retry: bool  # worth trying again later
    status_code: int | None
    error: str


def webhook_post(*, url: str, body: bytes, secret: str, delivery_id: int) -> Attempt:
    problem = url_problem(url)
    parts = urlsplit(url)
    if problem is None and _resolves_link_local(parts.hostname or "", parts.port or 80):
        problem = "the host resolves to a link-local address (cloud metadata)"
    if problem is not None:
        return Attempt(False, False, None, problem)
    ts = str(int(time.time()))
    request = urllib.request.Request(  # noqa: S310 (url_problem allowed only http and https)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "PhantomHub-Alerts/1",
            TIMESTAMP_HEADER: ts,
            SIGNATURE_HEADER: signature(secret, ts, body),
            DELIVERY_HEADER: str(delivery_id),
        },
    )
    try:
        with _opener.open(request, timeout=settings.ALERT_WEBHOOK_TIMEOUT_S) as response:
            return Attempt(True, False, response.status, "")
    except urllib.error.HTTPError as exc:
        code = exc.code
        retry = code >= 500 or code == 429
        return Attempt(False, retry, code, f"HTTP {code} {exc.reason}"[:500])
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return Attempt(False, True, None, f"{type(exc).__name__}: {reason}"[:500])


def email_send(*, to: list[str], subject: str, text: str) -> Attempt:
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, to, fail_silently=False)
    except Exception as exc:  # SMTP and socket errors alike: the mail server may come back
        return Attempt(False, True, None, f"{type(exc).__name__}: {exc}"[:500])
    return Attempt(True, False, None, "")

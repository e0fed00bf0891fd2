"""HTTP to the PhantomHub server: one persistent connection, gzip, and the retry policy.

Only the background thread (or ``finish`` when that thread is gone) talks to the server, so a
``Transport`` is used by one thread at a time and needs no lock.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import random
import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from ._version import __version__

# What to do with an answer.
OK = "ok"
RETRY = "retry"  # 5xx, 429, network: back off and try again (later from the spool)
REJECT = "reject"  # other 4xx: never retried, counted, logged once
TOO_LARGE = "too_large"  # 413: split the batch and send the halves
HALT = "halt"  # 401/403/404: wrong token or run; keep data in the spool for `phantomhub-agent sync`


class NetworkError(Exception):
    """The request did not get an HTTP answer (refused, reset, timed out, DNS...)."""


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError:
            return None

    def error_text(self) -> str:
        data = self.json()
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            error = data["error"]
            text = f"{error.get('code', '')}: {error.get('message', '')}"
            if error.get("fields"):
                text += f" {json.dumps(error['fields'], sort_keys=True)}"
            return text
        return self.body[:300].decode("utf-8", "replace")


def classify(status: int) -> str:
    if 200 <= status < 300:
        return OK
    if status == 429 or status >= 500:
        return RETRY
    if status == 413:
        return TOO_LARGE
    if status in (401, 403, 404):
        return HALT
    return REJECT


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def backoff_delay(
    attempt: int,
    *,
    base_s: float,
    max_s: float,
    retry_after_s: float | None = None,
    retry_after_max_s: float = 60.0,
    rng: random.Random | None = None,
) -> float:
    """Capped exponential backoff with equal jitter; a Retry-After is a floor (itself capped)."""
    exp = min(max_s, base_s * float(2 ** min(attempt, 30)))
    r = rng.random() if rng is not None else random.random()
    delay = exp / 2 + r * exp / 2
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, retry_after_max_s))
    return delay


class Transport:
    """POSTs bodies to the server over one keep-alive connection."""

    def __init__(self, server: str, token: str | None, timeout_s: float) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {server!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.requests_sent = 0
        self.connections_opened = 0
        self._conn: http.client.HTTPConnection | None = None

    def drop_connection(self) -> None:
        """Forgets the connection without touching its socket (used in a forked child)."""
        self._conn = None

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken socket may fail; nothing to do
                conn.close()

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=timeout_s, context=ssl.create_default_context()
                )
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
            self.connections_opened += 1
        conn = self._conn
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        gzipped: bool = False,
        timeout_s: float | None = None,
    ) -> Response:
        """One HTTP exchange. Raises NetworkError when no answer came back.

        A keep-alive connection the server closed while idle fails on first use; that attempt is
        repeated once on a fresh connection (the endpoints are idempotent).
        """
        timeout = self.timeout_s if timeout_s is None else max(0.05, timeout_s)
        headers = {
            "User-Agent": f"phantomhub-agent/{__version__}",
            "Accept": "application/json",
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = "application/json"
            if gzipped:
                headers["Content-Encoding"] = "gzip"
        for attempt in (0, 1):
            reused = self._conn is not None and self._conn.sock is not None
            conn = self._connection(timeout)
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                raw = conn.getresponse()
                data = raw.read()
                self.requests_sent += 1
                response = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, data)
                if raw.will_close:
                    self.close()
                return response
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if attempt == 0 and reused:
                    continue
                raise NetworkError(f"{type(exc).__name__}: {exc}") from exc
            except (OSError, http.client.HTTPException, socket.timeout) as exc:
                self.close()
                raise NetworkError(f"{type(exc).__name__}: {exc}") from exc
        raise NetworkError("unreachable")  # pragma: no cover - the loop always returns or raises

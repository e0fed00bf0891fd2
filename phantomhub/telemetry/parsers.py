"""Request parsing with hard caps: body size (413), gzip inflation (413), both lowered by a view's
`max_body_bytes` (the inflated size alone by its `max_inflated_bytes`) and, for a request nobody
signed in to (the sign-in), by MAX_ANONYMOUS_BODY_BYTES; fast JSON, nesting depth and NUL
characters (400), for every endpoint; NUL characters in query strings (400).

A gzip body is inflated as it is read, chunk by chunk, and the inflater never produces a byte past
the cap: a small body that would inflate to tens of MiB costs the cap, not its inflated size."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import importlib
import json
import threading
import zlib
from collections.abc import Callable, Mapping
from typing import IO, Any

import numpy as np
import orjson
from django.conf import settings
from django.core.signals import request_finished
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.parsers import BaseParser

from phantomhub.errors import ApiError, error_body

_CHUNK = 256 * 1024

# ISA-L inflates gzip about 1.6x faster than zlib (2.8 -> 1.8 ms for 2.4 MB of ingest JSON);
# an optional dependency (`pip install isal`): the same decompressobj API, zlib when absent.
inflate_lib: Any
try:  # imported by name: mypy then needs neither the package nor its stubs where it is absent
    inflate_lib = importlib.import_module("isal.isal_zlib")
except ImportError:  # pragma: no cover - depends on the installation
    inflate_lib = zlib


# A parsed body outlives its request: DRF's request, view and response refer to one another, so
# they (and the body, held by the request) are freed only by a full collection of the cyclic GC,
# which a long-lived process runs rarely. A worker taking 16 MiB batches of plain arrays grew by
# ~60 MiB with each (45 MiB of Python lists and numbers a batch), to 605 MiB after 8
# (bench/ingest_limits.py). And libpq keeps its send buffer as large as the largest statement the
# connection sent (a node batch's chunks: tens of MiB) for as long as the connection lives. So
# once the answer to a request whose body was at least TRIM_AFTER_BYTES is sent: a full collection,
# the database connection closed (the next request opens one, ~5 ms), and malloc_trim(0) to hand
# the freed pages back to the system where the C library has it (glibc). Only after such requests
# (the agent's node batches are a few hundred KB), and after the answer: the collection walks only
# what requests made where boot's objects are frozen (deploy/gunicorn.py; ~25 ms where not).
TRIM_AFTER_BYTES = 4 * 1024 * 1024
_libc = ctypes.util.find_library("c")
_malloc_trim: Any = getattr(ctypes.CDLL(_libc), "malloc_trim", None) if _libc else None
_trim_due = threading.local()


def _large_body_release(**_kwargs: Any) -> None:
    if getattr(_trim_due, "due", False):
        _trim_due.due = False
        gc.collect()
        if not connection.in_atomic_block:  # (a test's transaction spans its requests)
            connection.close()
        if _malloc_trim is not None:
            _malloc_trim(0)


request_finished.connect(_large_body_release, dispatch_uid="phantomhub.telemetry.parsers.large_body_release")


def _too_large(what: str, limit: int) -> ApiError:
    message = f"{what} is over the limit of {limit} bytes"
    return ApiError("payload_too_large", message, fields={"body": message}, status_code=413)


def _read_capped(stream: IO[bytes], limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise _too_large("request body", limit)
        chunks.append(chunk)


class _Inflater:
    """A gzip stream inflated piece by piece into one buffer that never grows past `limit` (413)."""

    def __init__(self, limit: int, lib: Any = None) -> None:
        self.lib = lib or inflate_lib
        self.inflater = self.lib.decompressobj(16 + zlib.MAX_WBITS)  # gzip container
        self.limit = limit
        self.out = bytearray()  # orjson and numpy read a bytearray as is: no copy to bytes

    def feed(self, data: bytes) -> None:
        try:
            # At most one byte past what is left: enough to tell "over the cap" without making more.
            piece = self.inflater.decompress(data, self.limit - len(self.out) + 1)
        except self.lib.error as exc:
            raise ApiError("invalid_gzip", f"body: not valid gzip ({exc})", fields={"body": "not valid gzip"}) from None
        self.out += piece
        if len(self.out) > self.limit or self.inflater.unconsumed_tail:
            raise _too_large("inflated request body", self.limit)


def _inflate_capped(data: bytes, limit: int, lib: Any = None) -> bytes:
    inflater = _Inflater(limit, lib)
    inflater.feed(data)
    return bytes(inflater.out)


def _read_inflated(stream: IO[bytes], body_limit: int, inflated_limit: int) -> bytearray:
    """A gzip body inflated as it arrives: the compressed bytes are never held whole, and reading
    stops at whichever cap is passed first (compressed or inflated, 413)."""
    inflater = _Inflater(inflated_limit)
    total = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return inflater.out
        total += len(chunk)
        if total > body_limit:
            raise _too_large("request body", body_limit)
        inflater.feed(chunk)


# Deeper than any real payload (a run's config is a few levels), far below what recursion in the
# JSON decoders and serializers survives.
MAX_JSON_DEPTH = 64


def _invalid_json(message: str) -> ApiError:
    return ApiError("invalid_json", f"body: {message}", fields={"body": message})


def _too_deep(value: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` levels ([] and {} are one level)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = list(node.values()) if isinstance(node, dict) else node
        kinds = set(map(type, children))  # in C: skips the per-item loop for columns of numbers
        if list in kinds or dict in kinds:
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _shown(key: str) -> str:
    return key.replace("\x00", "\\u0000")


def nul_field(value: Any, path: str = "") -> str | None:
    """The path ("config.a", "steps.host[2]") of a string or key holding a NUL
    character, which PostgreSQL cannot store in text or jsonb; None when there is none."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return where or "body"
        elif isinstance(node, dict):
            for key, child in reversed(node.items()):
                name = f"{where}.{_shown(key)}" if where else _shown(key)
                if "\x00" in key:
                    return name
                stack.append((child, name))
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{i}]") for i, child in reversed(list(enumerate(node))))
    return None


def _decode(raw: bytes | bytearray) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise _invalid_json(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    # orjson refuses NaN/Infinity; the standard library accepts them, so the column check can
    # then name the field that holds one instead of a bare "invalid JSON".
    try:
        return json.loads(raw)
    except RecursionError:
        raise _invalid_json(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError("invalid_json", f"body: not valid JSON ({exc})", fields={"body": "not valid JSON"}) from None


def _containers_opened(raw: bytes | bytearray) -> int:
    """How many `[` and `{` bytes `raw` holds: no document in it nests deeper than that."""
    # Vectorised compares: ~0.1 ms for a 780 kB ingest batch, where two bytes.count took ~0.5.
    octets = np.frombuffer(raw, dtype=np.uint8)
    return int(np.count_nonzero(octets == 0x5B)) + int(np.count_nonzero(octets == 0x7B))


def json_body_parse(raw: bytes | bytearray) -> Any:
    """Decode a JSON body: at most MAX_JSON_DEPTH levels deep, no NUL in any string (400)."""
    body = _decode(raw)
    # Both checks walk the document only when the raw bytes could hold a violation, so a
    # columnar ingest batch (a dozen brackets, no escapes) costs a few scans in C.
    if _containers_opened(raw) > MAX_JSON_DEPTH and _too_deep(body, MAX_JSON_DEPTH):
        raise _invalid_json(f"nested deeper than {MAX_JSON_DEPTH} levels")
    # A NUL can only arrive escaped (a raw control character is invalid JSON); one memchr for a
    # backslash spares the substring search in bodies without escapes, i.e. every ingest batch.
    if b"\\" in raw and b"\\u0000" in raw:
        field = nul_field(body)
        if field is not None:
            message = "NUL characters are not allowed"
            raise ApiError("invalid", f"{field}: {message}", fields={field: message})
    return body


def _signed_in(request: Any) -> bool:
    """Whether a token or a signed-in user sent `request`, without authenticating it (a session's
    CSRF check parses the body while DRF is still authenticating)."""
    if request is None:
        return True  # parsed outside a request (a test): the endpoint's caps alone
    known = vars(request)  # DRF's user and token, once it has authenticated
    if known.get("_auth") is not None or getattr(known.get("_user"), "is_authenticated", False):
        return True
    session_user = getattr(getattr(request, "_request", None), "user", None)  # AuthenticationMiddleware's
    return bool(getattr(session_user, "is_authenticated", False))


def body_limits(request: Any, view: Any) -> tuple[int, int]:
    """(compressed, inflated) byte caps of a request's body: the global ones, lowered by the view's
    `max_body_bytes` (both) and `max_inflated_bytes` (inflated), and for a request that nobody
    signed in to (the sign-in: about 100 bytes) by MAX_ANONYMOUS_BODY_BYTES."""
    body_limit, inflated_limit = settings.MAX_BODY_BYTES, settings.MAX_INFLATED_BYTES
    caps = [getattr(view, "max_body_bytes", None)]
    if not _signed_in(request):
        caps.append(settings.MAX_ANONYMOUS_BODY_BYTES)
    for cap in caps:
        if isinstance(cap, int):
            body_limit, inflated_limit = min(body_limit, cap), min(inflated_limit, cap)
    inflated_cap = getattr(view, "max_inflated_bytes", None)
    if isinstance(inflated_cap, int):
        inflated_limit = min(inflated_limit, inflated_cap)
    return body_limit, inflated_limit


class CappedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(
        self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        context = parser_context or {}
        request = context.get("request")
        meta = request.META if request is not None else {}
        body_limit, inflated_limit = body_limits(request, context.get("view"))
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > body_limit:  # refused before a byte of it is read
            raise _too_large("request body", body_limit)
        encoding = meta.get("HTTP_CONTENT_ENCODING", "").strip().lower()
        raw: bytes | bytearray
        if encoding == "gzip":
            raw = _read_inflated(stream, body_limit, inflated_limit) if stream is not None else b""
        elif encoding in ("", "identity"):
            raw = _read_capped(stream, min(body_limit, inflated_limit)) if stream is not None else b""
        else:
            raise ApiError(
                "unsupported_encoding",
                f"Content-Encoding {encoding!r} is not supported (use gzip)",
                status_code=415,
            )
        if len(raw) >= TRIM_AFTER_BYTES:
            _trim_due.due = True
        return json_body_parse(raw)


class QueryStringNulMiddleware:
    """A NUL character in a query parameter (`?q=%00`) gets a 400 naming the parameter, for every
    view: PostgreSQL cannot compare text with NUL, so a filter holding one would end in a 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        if "%00" in query or "\x00" in query:
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    field = _shown(name)
                    message = "NUL characters are not allowed"
                    return JsonResponse(error_body("invalid", f"{field}: {message}", {field: message}), status=400)
        return self.get_response(request)

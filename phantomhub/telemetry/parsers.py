"""Request body parsing with hard caps: body size (413), gzip inflation (413), fast JSON."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import IO, Any

import orjson
from django.conf import settings
from rest_framework.parsers import BaseParser

from phantomhub.errors import ApiError

_CHUNK = 256 * 1024


def _too_large(what: str, limit: int) -> ApiError:
    return ApiError("payload_too_large", f"{what} is over the limit of {limit} bytes", status_code=413)


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


def _inflate_capped(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip container
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ApiError("invalid_gzip", f"body: not valid gzip ({exc})", fields={"body": "not valid gzip"}) from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise _too_large("inflated request body", limit)
    return out


def json_body_parse(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    # orjson refuses NaN/Infinity; the standard library accepts them, so the column check can
    # then name the field that holds one instead of a bare "invalid JSON".
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError("invalid_json", f"body: not valid JSON ({exc})", fields={"body": "not valid JSON"}) from None


class CappedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(
        self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        request = (parser_context or {}).get("request")
        meta = request.META if request is not None else {}
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > settings.MAX_BODY_BYTES:
            raise _too_large("request body", settings.MAX_BODY_BYTES)
        raw = _read_capped(stream, settings.MAX_BODY_BYTES) if stream is not None else b""
        encoding = meta.get("HTTP_CONTENT_ENCODING", "").strip().lower()
        if encoding == "gzip":
            raw = _inflate_capped(raw, settings.MAX_INFLATED_BYTES)
        elif encoding not in ("", "identity"):
            raise ApiError(
                "unsupported_encoding",
                f"Content-Encoding {encoding!r} is not supported (use gzip)",
                status_code=415,
            )
        return json_body_parse(raw)

"""Requests reshaped for a server that refused them as they were.

A combined batch for a server without ``POST /api/v1/runs/{id}/batch`` (a 404 that is not "run
not found") goes as one request per kind (``unbatch``); a request the server found too large
(413) is split in halves, a batch into its parts first (``split_request``). Used by the sender
(``_delivery``, ``_replay``, ``_checkpoint``) and by ``phantomhub-agent sync``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import uuid
from typing import Any

from . import _batcher as b
from ._spool import SpooledRequest
from ._transport import Response


def batch_endpoint_missing(response: Response | None) -> bool:
    """A 404 that is not "run not found": the server has no POST /api/v1/runs/{id}/batch."""
    if response is None or response.status != 404:
        return False
    data = response.json()
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return not (isinstance(message, str) and message.startswith("run not found"))


def unbatch(request: SpooledRequest) -> list[SpooledRequest]:
    """A combined batch as the separate requests an older server takes (/steps, /samples, /events)."""
    raw = gzip.decompress(request.body) if request.gzipped else request.body
    payload = b.unpack_payload(json.loads(raw.decode("utf-8")))  # an older server: arrays only
    extra = {key: value for key, value in payload.items() if key not in b.BATCH_PARTS}
    base_path = request.path[: -len("/batch")]
    out = []
    if "counters" in payload:  # an older server takes them as a counters event
        event = {"id": uuid.uuid4().hex, "kind": "counters", "rank": extra.get("rank", 0), "t_ns": request.created_ns,
                 "data": payload.pop("counters")}  # fmt: skip
        payload["events"] = [*payload.get("events", []), event]
    for name in b.BATCH_PARTS:
        if name not in payload:
            continue
        body = b.encode_json({"events": payload[name]} if name == "events" else {**extra, name: payload[name]})
        rows = len(payload[name]) if name == "events" else b.column_rows(payload[name])
        gzipped = request.gzipped and len(body) >= 1024
        out.append(
            dataclasses.replace(
                request,
                path=f"{base_path}/{name}",
                body=b.gzip_bytes(body) if gzipped else body,
                gzipped=gzipped,
                kind=name,
                rows=rows,
                rebase=request.rebase and name == "steps",
            )
        )
    return out


def split_batch(request: SpooledRequest, payload: dict[str, Any]) -> list[SpooledRequest] | None:
    """A combined batch the server found too large: its parts apart, or one part halved."""
    parts = [name for name in b.BATCH_PARTS if name in payload]
    extra = {key: value for key, value in payload.items() if key not in b.BATCH_PARTS}
    pieces: list[tuple[dict[str, Any], int, bool]] = []
    if len(parts) > 1:
        for name in parts:
            rows = b.column_rows(payload[name]) if name == "steps" else 0
            pieces.append(({**extra, name: payload[name]}, rows, request.rebase and name == "steps"))
    elif parts and parts[0] == "events" and len(payload["events"]) > 1:
        events = payload["events"]
        half = (len(events) + 1) // 2
        pieces = [({**extra, "events": events[:half]}, 0, False), ({**extra, "events": events[half:]}, 0, False)]
    elif parts and parts[0] not in ("events", "counters") and b.column_rows(payload[parts[0]]) > 1:
        name = parts[0]
        for cols in b.halve_columns(payload[name]):
            pieces.append(({**extra, name: cols}, b.column_rows(cols) if name == "steps" else 0, request.rebase))
    else:
        return None
    out = []
    for part, rows, rebase in pieces:
        raw = b.encode_json(part)
        body = b.gzip_bytes(raw) if request.gzipped else raw
        out.append(dataclasses.replace(request, body=body, rows=rows, rebase=rebase))
    return out


def split_request(request: SpooledRequest) -> list[SpooledRequest] | None:
    """Halves a columnar batch (steps or samples) for a server that answered 413."""
    if request.kind == "batch":
        raw = gzip.decompress(request.body) if request.gzipped else request.body
        return split_batch(request, b.unpack_payload(json.loads(raw.decode("utf-8"))))
    if request.kind not in ("steps", "samples", "events") or request.rows <= 1:
        return None
    body = gzip.decompress(request.body) if request.gzipped else request.body
    payload = b.unpack_payload(json.loads(body.decode("utf-8")))
    out = []
    if request.kind == "events":
        events = payload["events"]
        half = (len(events) + 1) // 2
        parts = [({"events": events[:half]}, half), ({"events": events[half:]}, len(events) - half)]
    else:
        first, second = b.halve_columns(payload[request.kind])
        parts = []
        for cols in (first, second):
            part = dict(payload)
            part[request.kind] = cols
            parts.append((part, b.column_rows(cols)))
    for part, rows in parts:
        raw = b.encode_json(part)
        out.append(
            dataclasses.replace(
                request,
                body=b.gzip_bytes(raw) if request.gzipped else raw,
                rows=rows,
            )
        )
    return out

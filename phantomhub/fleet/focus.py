"""Import a cloud invoice in the FinOps FOCUS format (CSV) and match its GPU lines to nodes.

All or nothing: every row is checked before anything is written, each error names its line
(the header is line 1). Idempotent: a file already imported (same SHA-256) changes nothing, and a
line already stored (same identity: the columns that name a charge) is not stored again; the same
identity with another cost is an error, not a silent overwrite. A line is a GPU line when it
matches a node: its ResourceId equals a node's resource id (or hostname), or its Tags hold the node
tag (PHANTOMHUB_FOCUS_NODE_TAG, default `phantomhub-node`) naming a node's hostname.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from phantomhub.fleet.models import InvoiceImport, InvoiceLine, Node
from phantomhub.telemetry.parsers import nul_field

REQUIRED = ("BilledCost", "ChargePeriodStart", "ChargePeriodEnd", "BillingCurrency")
# The columns that name a charge: the same values are the same line, whatever the file.
IDENTITY = ("BillingAccountId", "ResourceId", "SkuId", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd", "ServiceName")
MAX_ROWS = 100_000


def node_tag() -> str:
    return str(getattr(settings, "FLEET_FOCUS_NODE_TAG", "phantomhub-node"))


@dataclass
class FocusResult:
    created: bool = False
    duplicate_file: bool = False
    lines: int = 0
    lines_new: int = 0
    matched: int = 0
    billed_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created, "duplicate_file": self.duplicate_file, "lines": self.lines,
            "lines_new": self.lines_new, "matched_lines": self.matched, "billed_usd": float(self.billed_usd),
        }  # fmt: skip


def _moment(text: str, name: str) -> datetime:
    try:
        value = parse_datetime(text)
    except ValueError:
        value = None
    if value is None:
        raise ValueError(f"{name}: {text!r} is not an ISO 8601 datetime")
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_fixed_timezone(0))
    return value


def _row(raw: dict[str, str | None]) -> dict[str, Any]:
    def text(name: str) -> str:
        return (raw.get(name) or "").strip()

    for name, value in raw.items():
        if value and "\x00" in value:  # PostgreSQL stores no NUL in text or jsonb
            raise ValueError(f"{name}: NUL characters are not allowed")

    try:
        cost = Decimal(text("BilledCost"))
    except InvalidOperation:
        raise ValueError(f"BilledCost: {text('BilledCost')!r} is not a number") from None
    if not cost.is_finite() or abs(cost) >= Decimal(10) ** 10:
        raise ValueError("BilledCost: must be a finite amount below 10,000,000,000")
    cost = cost.quantize(Decimal("0.000001"))  # what the column stores, so a re-import compares equal
    currency = text("BillingCurrency")
    if not currency or len(currency) > 8:
        raise ValueError("BillingCurrency: required (at most 8 characters)")
    start, end = _moment(text("ChargePeriodStart"), "ChargePeriodStart"), _moment(text("ChargePeriodEnd"), "ChargePeriodEnd")
    if end <= start:
        raise ValueError("ChargePeriodEnd: must be after ChargePeriodStart")
    tags: Any = {}
    if text("Tags"):
        try:
            tags = orjson.loads(text("Tags"))
        except orjson.JSONDecodeError:
            raise ValueError("Tags: not a JSON object") from None
        if not isinstance(tags, dict):
            raise ValueError("Tags: not a JSON object")
        if nul_field(tags) is not None:
            raise ValueError("Tags: NUL characters are not allowed")
    identity = hashlib.sha256("\x1f".join(text(name) for name in IDENTITY).encode()).hexdigest()
    for name, limit in (("ResourceId", 512), ("ServiceName", 200), ("SkuId", 200)):
        if len(text(name)) > limit:
            raise ValueError(f"{name}: at most {limit} characters")
    return {
        "identity": identity, "billed_cost": cost, "currency": currency, "resource_id": text("ResourceId"),
        "service_name": text("ServiceName"), "sku_id": text("SkuId"), "period_start": start, "period_end": end,
        "tags": tags,
    }  # fmt: skip


def _rows(text: str) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        return [], [f"line 1: header: {exc}"]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        return [], [f"line 1: header: missing column(s) {', '.join(missing)}"]
    rows: list[tuple[int, dict[str, Any]]] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    line = 1
    try:
        for line, raw in enumerate(reader, start=2):
            if line - 1 > MAX_ROWS:
                return [], [f"line {line}: more than {MAX_ROWS} rows; split the file"]
            if None in raw:
                errors.append(f"line {line}: more fields than the header has columns")
                continue
            try:
                row = _row(raw)
            except ValueError as exc:
                errors.append(f"line {line}: {exc}")
                continue
            if row["identity"] in seen:
                errors.append(f"line {line}: the same charge as line {seen[row['identity']]}")
                continue
            seen[row["identity"]] = line
            rows.append((line, row))
    except csv.Error as exc:
        errors.append(f"line {line + 1}: {exc}")
    return rows, errors


def _match(row: dict[str, Any], by_resource: dict[str, Node], by_host: dict[str, Node]) -> tuple[Node | None, str]:
    node = by_resource.get(row["resource_id"]) or by_host.get(row["resource_id"])
    if node is not None:
        return node, "resource_id"
    tagged = row["tags"].get(node_tag())
    if isinstance(tagged, str) and tagged in by_host:
        return by_host[tagged], "tag"
    return None, ""


def focus_import(*, text: str, filename: str = "", actor: Any = None) -> FocusResult:
    digest = hashlib.sha256(text.encode()).hexdigest()
    if InvoiceImport.objects.filter(content_sha256=digest).exists():
        return FocusResult(duplicate_file=True)
    rows, errors = _rows(text)
    if errors:
        return FocusResult(errors=errors)
    stored = {
        line.identity: line.billed_cost
        for line in InvoiceLine.objects.filter(identity__in=[r["identity"] for _, r in rows]).only("identity", "billed_cost")
    }
    for line, row in rows:
        if row["identity"] in stored and stored[row["identity"]] != row["billed_cost"]:
            errors.append(f"line {line}: a charge already imported with BilledCost {stored[row['identity']]}")
    if errors:
        return FocusResult(errors=errors)
    result = FocusResult(created=True, lines=len(rows))
    try:
        fresh = _store(rows, stored, digest, filename, actor, result)
    except IntegrityError:  # the same file or lines imported concurrently: the other import wins
        return FocusResult(duplicate_file=True)
    result.lines_new = len(fresh)
    return result


def _store(
    rows: list[tuple[int, dict[str, Any]]], stored: dict[str, Any], digest: str, filename: str, actor: Any, result: FocusResult
) -> list[InvoiceLine]:
    nodes = list(Node.objects.all())
    by_resource = {n.resource_id: n for n in nodes if n.resource_id}
    by_host = {n.hostname: n for n in nodes}
    with transaction.atomic():
        invoice = InvoiceImport.objects.create(
            content_sha256=digest, filename=filename[:255], lines=len(rows), actor=actor if getattr(actor, "pk", None) else None
        )
        fresh = []
        for line, row in rows:
            if row["identity"] in stored:
                continue
            node, how = _match(row, by_resource, by_host)
            fresh.append(InvoiceLine(invoice=invoice, row=line, node=node, matched_by=how, **row))
            result.matched += node is not None
            result.billed_usd += row["billed_cost"]
        InvoiceLine.objects.bulk_create(fresh, batch_size=2000)
        invoice.lines_new = len(fresh)
        invoice.save(update_fields=["lines_new"])
    return fresh

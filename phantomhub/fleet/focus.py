"""Import a cloud invoice in the FinOps FOCUS format (CSV) and match its GPU lines to nodes.

All or nothing: every row is checked before anything is written, each error names its line
(the header is line 1); a refused file reports its first MAX_ERRORS errors and how many more.
Idempotent: a file already imported (same SHA-256) changes nothing, and a line already stored
(same identity: the columns that name a charge) is not stored again; the same identity with
another cost is an error, not a silent overwrite. A line is a GPU line when it matches a node: its
ResourceId equals a node's resource id (or hostname), or its Tags hold the node tag
(PHANTOMHUB_FOCUS_NODE_TAG, default `phantomhub-node`) naming a node's hostname.

Money is the organization's currency (PHANTOMHUB_CURRENCY): a line billed in another is refused,
never read as if it were that one. Charge periods lie within CHARGE_PERIOD_MIN..CHARGE_PERIOD_MAX.

A file of more than PHANTOMHUB_FOCUS_INLINE_LINES lines is a background job (`invoice_import_queue`):
its CSV waits in the InvoiceImport row, a Celery task enqueued on commit runs `invoice_import_run`
(without a broker, the embedded default, a thread of the web process does: the request answers at
once either way), and the row shows its status, progress and errors.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from phantomhub.fleet.models import ImportStatus, InvoiceImport, InvoiceLine, Node
from phantomhub.jobs import job_start
from phantomhub.telemetry.parsers import nul_field

log = logging.getLogger(__name__)
INVOICE_IMPORT = "phantomhub.fleet.tasks.invoice_import"  # the task (fleet/tasks.py), sent by name

REQUIRED = ("BilledCost", "ChargePeriodStart", "ChargePeriodEnd", "BillingCurrency")
# The columns that name a charge: the same values are the same line, whatever the file.
IDENTITY = ("BillingAccountId", "ResourceId", "SkuId", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd", "ServiceName")
MAX_ROWS = 100_000
MAX_ERRORS = 20  # a refused file names this many errors, then counts the rest
# The range of step timestamps (phantomhub.telemetry.columns) and of prices: a charge outside it
# is a typo (year 1, year 9999), and no fleet time could ever be reconciled with it.
CHARGE_PERIOD_MIN = datetime(2000, 1, 1, tzinfo=UTC)
CHARGE_PERIOD_MAX = datetime(2100, 1, 1, tzinfo=UTC)
PROGRESS_EVERY = 2000  # a job writes its progress every this many lines checked
# A queued or running job not heard from for this long died with its process (a worker killed, a
# web process restarted under the embedded thread): posting the same file again restarts it.
STALE_AFTER = timedelta(seconds=900)


def node_tag() -> str:
    return str(getattr(settings, "FLEET_FOCUS_NODE_TAG", "phantomhub-node"))


def currency() -> str:
    return str(getattr(settings, "CURRENCY", "USD"))


@dataclass
class FocusResult:
    created: bool = False
    duplicate_file: bool = False
    lines: int = 0
    lines_new: int = 0
    matched: int = 0
    billed_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)  # the first MAX_ERRORS
    error_count: int = 0  # all of them
    import_id: int | None = None
    status: str = ImportStatus.DONE.value  # a duplicate's: the import of that file as it stands

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.import_id, "status": self.status, "created": self.created,
            "duplicate_file": self.duplicate_file, "lines": self.lines, "lines_new": self.lines_new,
            "matched_lines": self.matched, "billed_usd": float(self.billed_usd),
        }  # fmt: skip


class _Errors:
    """Errors of one file: the first MAX_ERRORS kept, every one counted."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.count = 0

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_ERRORS:
            self.shown.append(message)

    def only(self, message: str) -> None:
        """This error says all there is to say: the others are dropped."""
        self.shown, self.count = [message], 1


def _moment(text: str, name: str) -> datetime:
    try:
        value = parse_datetime(text)
    except ValueError:
        value = None
    if value is None:
        raise ValueError(f"{name}: {text!r} is not an ISO 8601 datetime")
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_fixed_timezone(0))
    if not CHARGE_PERIOD_MIN <= value <= CHARGE_PERIOD_MAX:
        raise ValueError(f"{name}: {text!r} is outside {CHARGE_PERIOD_MIN:%Y-%m-%d}..{CHARGE_PERIOD_MAX:%Y-%m-%d}")
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
    billed_in = text("BillingCurrency")
    if not billed_in or len(billed_in) > 8:
        raise ValueError("BillingCurrency: required (at most 8 characters)")
    if billed_in.upper() != currency():
        raise ValueError(
            f"BillingCurrency: {billed_in!r} is not the organization's currency {currency()} (PHANTOMHUB_CURRENCY);"
            " convert the invoice first"
        )
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
        "identity": identity, "billed_cost": cost, "currency": billed_in.upper(), "resource_id": text("ResourceId"),
        "service_name": text("ServiceName"), "sku_id": text("SkuId"), "period_start": start, "period_end": end,
        "tags": tags,
    }  # fmt: skip


Rows = list[tuple[int, dict[str, Any]]]


def _rows(text: str, errors: _Errors, progress: Callable[[int], None] | None = None) -> Rows:
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        errors.add(f"line 1: header: {exc}")
        return []
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        errors.add(f"line 1: header: missing column(s) {', '.join(missing)}")
        return []
    rows: Rows = []
    seen: dict[str, int] = {}
    line = 1
    try:
        for line, raw in enumerate(reader, start=2):
            if line - 1 > MAX_ROWS:
                errors.only(f"line {line}: more than {MAX_ROWS} rows; split the file")
                return []
            if progress is not None and line % PROGRESS_EVERY == 0:
                progress(line - 1)
            if None in raw:
                errors.add(f"line {line}: more fields than the header has columns")
                continue
            try:
                row = _row(raw)
            except ValueError as exc:
                errors.add(f"line {line}: {exc}")
                continue
            if row["identity"] in seen:
                errors.add(f"line {line}: the same charge as line {seen[row['identity']]}")
                continue
            seen[row["identity"]] = line
            rows.append((line, row))
    except csv.Error as exc:
        errors.add(f"line {line + 1}: {exc}")
    if progress is not None:
        progress(line - 1)
    return rows


def _match(row: dict[str, Any], by_resource: dict[str, Node], by_host: dict[str, Node]) -> tuple[Node | None, str]:
    node = by_resource.get(row["resource_id"]) or by_host.get(row["resource_id"])
    if node is not None:
        return node, "resource_id"
    tagged = row["tags"].get(node_tag())
    if isinstance(tagged, str) and tagged in by_host:
        return by_host[tagged], "tag"
    return None, ""


def _checked(text: str, progress: Callable[[int], None] | None = None) -> tuple[Rows, dict[str, Any], _Errors]:
    """Every row of the file checked, and the lines already stored (identity -> cost)."""
    errors = _Errors()
    rows = _rows(text, errors, progress)
    if errors.count:
        return [], {}, errors
    stored: dict[str, Any] = {}
    identities = [r["identity"] for _, r in rows]
    for i in range(0, len(identities), 10_000):  # bounded IN lists
        lines = InvoiceLine.objects.filter(identity__in=identities[i : i + 10_000]).only("identity", "billed_cost")
        stored.update((line.identity, line.billed_cost) for line in lines)
    for line, row in rows:
        if row["identity"] in stored and stored[row["identity"]] != row["billed_cost"]:
            errors.add(f"line {line}: a charge already imported with BilledCost {stored[row['identity']]}")
    return rows, stored, errors


def nul_line(text: str) -> int | None:
    """The line of the first NUL character, if any: PostgreSQL stores none in text, so a file with
    one is refused before a job would keep it."""
    at = text.find("\x00")
    return None if at < 0 else text.count("\n", 0, at) + 1


def lines_estimate(text: str) -> int:
    """Lines after the header, counting newlines (a quoted newline counts too: only a threshold)."""
    return max(0, text.count("\n") - 1 + (0 if text.endswith("\n") else 1))


def focus_import(*, text: str, filename: str = "", actor: Any = None) -> FocusResult:
    """Import a file in this call (the CLI, and small files posted to the API)."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    existing = InvoiceImport.objects.filter(content_sha256=digest).first()
    if existing is not None and existing.status != ImportStatus.FAILED:
        return FocusResult(duplicate_file=True, import_id=existing.pk, status=existing.status)
    rows, stored, errors = _checked(text)
    if errors.count:
        return FocusResult(errors=errors.shown, error_count=errors.count)
    result = FocusResult(created=True, lines=len(rows))
    try:
        with transaction.atomic():
            if existing is not None:  # a failed job of this file: this import replaces it
                InvoiceImport.objects.filter(pk=existing.pk, status=ImportStatus.FAILED).delete()
            who = actor if getattr(actor, "pk", None) else None
            invoice = InvoiceImport.objects.create(content_sha256=digest, filename=filename[:255], lines=len(rows), actor=who)
            _store(invoice, rows, stored, result)
    except IntegrityError:  # the same file or lines imported concurrently: the other import wins
        return FocusResult(duplicate_file=True)
    result.import_id = invoice.pk
    return result


def _store(invoice: InvoiceImport, rows: Rows, stored: dict[str, Any], result: FocusResult) -> None:
    """The new lines of a checked file, in the caller's transaction; `invoice` done with its counts."""
    nodes = list(Node.objects.all())
    by_resource = {n.resource_id: n for n in nodes if n.resource_id}
    by_host = {n.hostname: n for n in nodes}
    fresh = []
    for line, row in rows:
        if row["identity"] in stored:
            continue
        node, how = _match(row, by_resource, by_host)
        fresh.append(InvoiceLine(invoice=invoice, row=line, node=node, matched_by=how, **row))
        result.matched += node is not None
        result.billed_usd += row["billed_cost"]
    InvoiceLine.objects.bulk_create(fresh, batch_size=2000)
    result.lines_new = len(fresh)
    invoice.lines, invoice.lines_new, invoice.matched_lines = len(rows), len(fresh), result.matched
    invoice.lines_checked, invoice.status, invoice.text = len(rows), ImportStatus.DONE, ""
    invoice.save()


def _stale() -> Q:
    return Q(status__in=[ImportStatus.QUEUED, ImportStatus.RUNNING], updated_at__lt=timezone.now() - STALE_AFTER)


def invoice_import_queue(*, text: str, filename: str = "", actor: Any = None) -> tuple[InvoiceImport, bool]:
    """Queue a large file as a background job; (its import, whether a job was queued). The same
    file again answers its import as it stands, unless that one failed or died: it is queued again.
    ValueError naming the line of a NUL character (the job could not keep such a file)."""
    nul = nul_line(text)
    if nul is not None:
        raise ValueError(f"line {nul}: NUL characters are not allowed")
    digest = hashlib.sha256(text.encode()).hexdigest()
    fields: dict[str, Any] = {
        "filename": filename[:255], "lines": lines_estimate(text), "actor": actor if getattr(actor, "pk", None) else None,
        "status": ImportStatus.QUEUED, "text": text, "lines_checked": 0, "lines_new": 0, "matched_lines": 0, "errors": [],
        "error_count": 0,
    }  # fmt: skip
    try:
        with transaction.atomic():
            job = InvoiceImport.objects.select_for_update().filter(content_sha256=digest).first()
            if job is None:
                job = InvoiceImport.objects.create(content_sha256=digest, **fields)
            elif job.status == ImportStatus.FAILED or InvoiceImport.objects.filter(_stale(), pk=job.pk).exists():
                for name, value in fields.items():
                    setattr(job, name, value)
                job.save()
            else:
                return job, False
            job_id = job.pk
            transaction.on_commit(lambda: _job_start(job_id))
    except IntegrityError:  # the same file posted at the same moment: that post queued it
        return InvoiceImport.objects.defer("text").get(content_sha256=digest), False
    return job, True


def _job_start(import_id: int) -> None:
    # If the process running it dies first, the job goes stale (see above).
    job_start(job_id=import_id, run=lambda i: invoice_import_run(import_id=i), task=INVOICE_IMPORT, what="invoice-import")


def invoice_import_run(*, import_id: int) -> str:
    """Run a queued import job (the task, or the embedded thread); its status at the end. A job
    already done, failed, or running elsewhere (and not stale) is left alone."""
    claimed = (
        InvoiceImport.objects.filter(pk=import_id)
        .filter(Q(status=ImportStatus.QUEUED) | _stale())
        .update(status=ImportStatus.RUNNING, lines_checked=0, updated_at=timezone.now())
    )
    if not claimed:
        return str(InvoiceImport.objects.filter(pk=import_id).values_list("status", flat=True).first() or "missing")
    job = InvoiceImport.objects.get(pk=import_id)

    def progress(lines: int) -> None:
        InvoiceImport.objects.filter(pk=import_id).update(lines_checked=lines, updated_at=timezone.now())

    try:
        rows, stored, errors = _checked(job.text, progress)
        if errors.count:
            return _job_failed(job, errors)
        with transaction.atomic():
            locked = InvoiceImport.objects.select_for_update().get(pk=import_id)
            if locked.status != ImportStatus.RUNNING:  # taken over after going stale: that run finishes it
                return str(locked.status)
            _store(locked, rows, stored, FocusResult())
    except IntegrityError:
        errors = _Errors()
        errors.add("lines of this file were imported by another file at the same time; post it again")
        return _job_failed(job, errors)
    except Exception:
        errors = _Errors()
        errors.add("the import failed on the server; post the file again")
        _job_failed(job, errors)
        raise
    return ImportStatus.DONE.value


def _job_failed(job: InvoiceImport, errors: _Errors) -> str:
    InvoiceImport.objects.filter(pk=job.pk).update(
        status=ImportStatus.FAILED, errors=errors.shown, error_count=errors.count, text="", updated_at=timezone.now()
    )
    return ImportStatus.FAILED.value


def invoice_import_view(job: InvoiceImport) -> dict[str, Any]:
    """An import as the API lists it: its status, progress and (when refused) first errors."""
    return {
        "id": job.pk, "filename": job.filename, "status": job.status, "lines": job.lines,
        "lines_checked": job.lines_checked, "lines_new": job.lines_new, "matched_lines": job.matched_lines,
        "errors": job.errors, "error_count": job.error_count, "imported_at": job.imported_at.isoformat(),
        "updated_at": job.updated_at.isoformat(), "sha256": job.content_sha256,
    }  # fmt: skip

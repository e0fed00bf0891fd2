"""Writes to the price book. Every change leaves a PriceAudit row in the same transaction."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import DataError, IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from phantomhub.csvfile import csv_text, csv_uncell
from phantomhub.pricing.catalog import gpu_resolve
from phantomhub.pricing.models import PriceAudit, PriceEntry
from phantomhub.pricing.signals import price_span_closed, prices_changed
from phantomhub.telemetry.models import PricingTier

CSV_FIELDS = [
    "gpu",
    "provider",
    "region",
    "tier",
    "usd_per_gpu_hour",
    "effective_from",
    "effective_to",
    "is_example",
    "note",
]


def _snapshot(entry: PriceEntry) -> dict[str, Any]:
    return {
        "gpu": entry.gpu,
        "provider": entry.provider,
        "region": entry.region,
        "tier": entry.tier,
        "usd_per_gpu_hour": str(entry.usd_per_gpu_hour),
        "effective_from": entry.effective_from.isoformat(),
        "effective_to": entry.effective_to.isoformat() if entry.effective_to else None,
        "is_example": entry.is_example,
        "note": entry.note,
    }


def _audit(entry: PriceEntry, action: str, before: dict[str, Any] | None, actor: Any, label: str) -> None:
    prices_changed.send(sender=PriceEntry, gpu=entry.gpu)  # in this transaction (pricing/signals.py)
    PriceAudit.objects.create(
        entry_id=entry.pk,
        action=action,
        actor=actor if getattr(actor, "pk", None) else None,
        actor_label=label,
        before=before,
        after=_snapshot(entry) if action != "delete" else None,
    )


def closed_periods_reached(*, start: datetime, end: datetime | None) -> list[str]:
    """The closed periods that [start, end) (end None: open) overlaps, sorted."""
    labels: set[str] = set()
    for _receiver, answer in price_span_closed.send(sender=PriceEntry, start=start, end=end):
        labels.update(answer or ())
    return sorted(labels)


def price_set_reach(
    *, gpu: str, provider: str = "", region: str = "", tier: str = PricingTier.ON_DEMAND, effective_from: datetime | None = None
) -> list[str]:
    """The closed periods a price_set would reprice: from its start to the next price of the key."""
    if effective_from is None:  # in force from now: nothing closed lies ahead
        return []
    spec = gpu_resolve(gpu)
    key = {"gpu": spec.key if spec else gpu.strip(), "provider": provider, "region": region, "tier": tier}
    following = PriceEntry.objects.filter(**key, effective_from__gt=effective_from).order_by("effective_from").first()
    return closed_periods_reached(start=effective_from, end=following.effective_from if following else None)


def price_update_reach(*, entry: PriceEntry, changes: dict[str, Any]) -> list[str]:
    """The closed periods an update would reprice: the entry's span for a new price; the time
    gained or lost for a new end. A note or the example flag prices nothing."""
    if "usd_per_gpu_hour" in changes and Decimal(changes["usd_per_gpu_hour"]) != entry.usd_per_gpu_hour:
        return closed_periods_reached(start=entry.effective_from, end=entry.effective_to)
    if "effective_to" in changes and changes["effective_to"] != entry.effective_to:
        ends = [changes["effective_to"], entry.effective_to]
        if None in ends:
            start = next(e for e in ends if e is not None)
            return closed_periods_reached(start=start, end=None)
        return closed_periods_reached(start=min(ends), end=max(ends))
    return []


def price_delete_reach(*, entry: PriceEntry) -> list[str]:
    return closed_periods_reached(start=entry.effective_from, end=entry.effective_to)


def prices_import_reach(*, text: str) -> list[str]:
    """The closed periods a CSV import would reprice (none for a file it would refuse anyway)."""
    try:
        rows, errors = _csv_rows(text)
    except _RowRefused:
        return []
    if errors:
        return []
    reached: set[str] = set()
    for _line, row in rows:
        key = {k: row[k] for k in ("gpu", "provider", "region", "tier", "effective_from")}
        reached.update(price_set_reach(**key))
    return sorted(reached)


class PriceError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# No GPU-hour costs anywhere near this; a price above it is a unit mistake, and one wrong price
# multiplies into every run's dollars. The column itself holds at most 999999.9999.
MAX_USD_PER_GPU_HOUR = Decimal("100000")
# The range of step timestamps (phantomhub.telemetry.columns): a price outside it prices nothing.
EFFECTIVE_FROM_MIN = datetime(2000, 1, 1, tzinfo=UTC)
EFFECTIVE_FROM_MAX = datetime(2100, 1, 1, tzinfo=UTC)
_LENGTHS = {"gpu": 128, "provider": 64, "region": 64, "note": 200}


def price_check(
    *,
    gpu: str,
    usd_per_gpu_hour: Decimal,
    provider: str = "",
    region: str = "",
    tier: str = PricingTier.ON_DEMAND,
    effective_from: datetime | None = None,
    note: str = "",
) -> None:
    """Raise PriceError naming the first field a price book entry cannot hold."""
    if not usd_per_gpu_hour.is_finite():
        raise PriceError("usd_per_gpu_hour", "must be a finite number")
    if usd_per_gpu_hour < 0:
        raise PriceError("usd_per_gpu_hour", "must not be negative")
    if usd_per_gpu_hour > MAX_USD_PER_GPU_HOUR:
        raise PriceError("usd_per_gpu_hour", f"must be at most {MAX_USD_PER_GPU_HOUR}")
    if usd_per_gpu_hour != usd_per_gpu_hour.quantize(Decimal("0.0001")):
        raise PriceError("usd_per_gpu_hour", "must have at most 4 decimal places")
    if tier not in PricingTier.values:
        raise PriceError("tier", f"must be one of {', '.join(PricingTier.values)}")
    if effective_from is not None and not EFFECTIVE_FROM_MIN <= effective_from < EFFECTIVE_FROM_MAX:
        raise PriceError("effective_from", f"must be from {EFFECTIVE_FROM_MIN:%Y-%m-%d} to before {EFFECTIVE_FROM_MAX:%Y-%m-%d}")
    for field, value in (("gpu", gpu), ("provider", provider), ("region", region), ("note", note)):
        if len(value) > _LENGTHS[field]:
            raise PriceError(field, f"must be at most {_LENGTHS[field]} characters")
        if "\x00" in value:
            raise PriceError(field, "NUL characters are not allowed")
    if not gpu.strip():
        raise PriceError("gpu", "is required")


@transaction.atomic
def price_set(
    *,
    gpu: str,
    usd_per_gpu_hour: Decimal,
    provider: str = "",
    region: str = "",
    tier: str = PricingTier.ON_DEMAND,
    effective_from: datetime | None = None,
    is_example: bool = False,
    note: str = "",
    actor: Any = None,
    actor_label: str = "",
) -> PriceEntry:
    """Put a price in force from `effective_from` (default now) for this (gpu, provider, region, tier).

    The entry in force at that moment is closed there, so a price change splits runs that span
    it; setting a price at the exact start of an existing entry replaces that entry's price.
    """
    price_check(
        gpu=gpu, usd_per_gpu_hour=usd_per_gpu_hour, provider=provider, region=region, tier=tier,
        effective_from=effective_from, note=note,
    )  # fmt: skip
    spec = gpu_resolve(gpu)
    gpu = spec.key if spec else gpu.strip()
    if not gpu:
        raise PriceError("gpu", "is required")
    start = effective_from or timezone.now()
    same_key = PriceEntry.objects.select_for_update().filter(gpu=gpu, provider=provider, region=region, tier=tier)
    exact = same_key.filter(effective_from=start).first()
    if exact is not None:
        before = _snapshot(exact)
        exact.usd_per_gpu_hour, exact.is_example, exact.note = usd_per_gpu_hour, is_example, note
        exact.save()
        _audit(exact, "update", before, actor, actor_label)
        return exact
    following = same_key.filter(effective_from__gt=start).order_by("effective_from").first()
    in_force = same_key.filter(effective_from__lt=start).order_by("-effective_from").first()
    if in_force is not None and (in_force.effective_to is None or in_force.effective_to > start):
        before = _snapshot(in_force)
        in_force.effective_to = start
        in_force.save()
        _audit(in_force, "close", before, actor, actor_label)
    entry = PriceEntry.objects.create(
        gpu=gpu,
        provider=provider,
        region=region,
        tier=tier,
        usd_per_gpu_hour=usd_per_gpu_hour,
        effective_from=start,
        effective_to=following.effective_from if following else None,
        is_example=is_example,
        note=note,
    )
    _audit(entry, "create", None, actor, actor_label)
    return entry


@transaction.atomic
def price_update(*, entry: PriceEntry, changes: dict[str, Any], actor: Any = None, actor_label: str = "") -> PriceEntry:
    if "usd_per_gpu_hour" in changes or "note" in changes:
        price_check(
            gpu=entry.gpu, usd_per_gpu_hour=changes.get("usd_per_gpu_hour", entry.usd_per_gpu_hour),
            note=changes.get("note", entry.note),
        )  # fmt: skip
    before = _snapshot(entry)
    for field, value in changes.items():
        setattr(entry, field, value)
    entry.full_clean()
    entry.save()
    _audit(entry, "update", before, actor, actor_label)
    return entry


@transaction.atomic
def price_delete(*, entry: PriceEntry, actor: Any = None, actor_label: str = "") -> None:
    before = _snapshot(entry)
    _audit(entry, "delete", before, actor, actor_label)
    entry.delete()


@dataclass(frozen=True)
class ImportResult:
    created: int
    errors: list[str]


# Each row is one price_set (a few queries and an invalidation): a bigger book is split in files.
MAX_IMPORT_ROWS = 10_000


class _RowRefused(Exception):
    pass


def prices_import_csv(*, text: str, actor: Any = None, actor_label: str = "import") -> ImportResult:
    """Import rows of CSV_FIELDS (header required). All rows or none: every row is checked before
    any is written, each error names its line, and a row refused while writing (by a constraint)
    rolls back the rows written before it."""
    try:
        checked = _csv_rows(text)
    except _RowRefused as exc:
        return ImportResult(0, [str(exc)])
    rows, errors = checked
    if errors:
        return ImportResult(0, errors)
    try:
        with transaction.atomic():
            for line, row in rows:
                try:
                    price_set(**row, actor=actor, actor_label=actor_label)
                except (PriceError, DataError, IntegrityError) as exc:
                    raise _RowRefused(f"line {line}: {exc}") from exc
    except _RowRefused as exc:
        return ImportResult(0, [str(exc)])
    return ImportResult(len(rows), [])


def _csv_rows(text: str) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise _RowRefused(f"line 1: header: {exc}") from None
    missing = {"gpu", "usd_per_gpu_hour"} - set(header)
    if missing:
        raise _RowRefused(f"header: missing column(s) {', '.join(sorted(missing))}")
    unknown = [name for name in header if name not in CSV_FIELDS]
    if unknown:
        raise _RowRefused(f"header: unknown column(s) {', '.join(unknown)} (known: {', '.join(CSV_FIELDS)})")
    rows: list[tuple[int, dict[str, Any]]] = []
    errors: list[str] = []
    line = 1
    try:
        for line, raw in enumerate(reader, start=2):
            if line - 1 > MAX_IMPORT_ROWS:
                raise _RowRefused(f"line {line}: more than {MAX_IMPORT_ROWS} rows; split the file")
            if None in raw:
                errors.append(f"line {line}: more fields than the header has columns")
                continue
            try:
                row = _csv_row(raw)
                price_check(**{k: v for k, v in row.items() if k != "is_example"})
            except PriceError as exc:
                errors.append(f"line {line}: {exc}")
                continue
            rows.append((line, row))
    except csv.Error as exc:
        errors.append(f"line {line + 1}: {exc}")
    return rows, errors


def _csv_row(raw: dict[str, str | None]) -> dict[str, Any]:
    def text(name: str) -> str:
        # A file exported here and imported again: the export's neutralising apostrophe comes off.
        return csv_uncell((raw.get(name) or "").strip())

    try:
        price = Decimal(text("usd_per_gpu_hour"))
    except (InvalidOperation, ValueError):
        raise PriceError("usd_per_gpu_hour", f"{text('usd_per_gpu_hour')!r} is not a number") from None
    start = None
    if text("effective_from"):
        try:
            start = parse_datetime(text("effective_from"))
        except ValueError:  # well formed, but no such date or time (2026-02-30)
            start = None
        if start is None:
            raise PriceError("effective_from", f"{text('effective_from')!r} is not an ISO 8601 datetime")
        if timezone.is_naive(start):
            start = timezone.make_aware(start, timezone.get_fixed_timezone(0))
    return {
        "gpu": text("gpu"),
        "usd_per_gpu_hour": price,
        "provider": text("provider"),
        "region": text("region"),
        "tier": text("tier") or PricingTier.ON_DEMAND,
        "effective_from": start,
        "is_example": text("is_example").lower() in ("1", "true", "yes"),
        "note": text("note"),
    }


def prices_export_csv() -> str:
    """The price book as CSV_FIELDS rows (what prices_import_csv reads back), through the one CSV
    writer: a provider or note a spreadsheet would run as a formula is neutralised there."""

    def row(entry: PriceEntry) -> list[Any]:
        snap = _snapshot(entry) | {"usd_per_gpu_hour": entry.usd_per_gpu_hour}  # a number, not text
        return [snap[name] for name in CSV_FIELDS]

    entries = PriceEntry.objects.order_by("gpu", "provider", "region", "tier", "effective_from")
    return csv_text(CSV_FIELDS, (row(entry) for entry in entries.iterator()))

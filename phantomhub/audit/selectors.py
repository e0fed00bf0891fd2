"""Reads of the audit log: the entries a reader may see, filtered, and each as people read it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db.models import Q, QuerySet

from phantomhub.accounts.permissions import is_org_admin
from phantomhub.audit.models import AuditEntry
from phantomhub.audit.registration import FINANCE_KINDS, KIND_LABELS

ACTIONS = {"create": AuditEntry.Action.CREATE, "update": AuditEntry.Action.UPDATE, "delete": AuditEntry.Action.DELETE}
ACTION_NAMES = {number: name for name, number in ACTIONS.items()}


@dataclass(frozen=True)
class Filters:
    actor: str | None = None  # a label as entries show it ("alice", "SCIM", "token phk_ab12cd34…")
    kind: str | None = None
    object_id: str | None = None
    action: str | None = None
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive
    text: str | None = None


def kinds_readable(user: Any) -> frozenset[str]:
    """Organization admins read every kind; finance people prices and months (the permission
    class lets no one else in)."""
    return frozenset(KIND_LABELS) if is_org_admin(user) else FINANCE_KINDS


def entries(filters: Filters, kinds: frozenset[str]) -> QuerySet[AuditEntry]:
    """Entries of the readable kinds matching every filter given, newest first (by entry number:
    entries are numbered as they are written)."""
    rows = AuditEntry.objects.all()
    if kinds != frozenset(KIND_LABELS):
        rows = rows.filter(kind__in=sorted(kinds))
    if filters.kind:
        rows = rows.filter(kind=filters.kind)
    if filters.actor:
        # "alice" also finds what alice did with her personal token ("alice (token phk_…)").
        rows = rows.filter(Q(actor_label__iexact=filters.actor) | Q(actor_label__istartswith=f"{filters.actor} (token "))
    if filters.object_id:
        rows = rows.filter(object_pk=filters.object_id)
    if filters.action:
        rows = rows.filter(action=ACTIONS[filters.action])
    if filters.since:
        rows = rows.filter(timestamp__gte=filters.since)
    if filters.until:
        rows = rows.filter(timestamp__lt=filters.until)
    if filters.text:
        rows = rows.filter(
            Q(object_repr__icontains=filters.text) | Q(actor_label__icontains=filters.text) | Q(changes__icontains=filters.text)
        )
    return rows.order_by("-id")


def _m2m(change: dict[str, Any]) -> tuple[Any, Any]:
    names = ", ".join(str(name) for name in change.get("objects", []))
    return (None, f"added {names}") if change.get("operation") == "add" else (f"removed {names}", None)


def changes_of(entry: AuditEntry) -> list[dict[str, Any]]:
    """[{field, before, after}] by field name. Values are as auditlog stored them (JSON: numbers,
    booleans, text, objects); a related object by its name; a masked one as "(hidden)" or its host."""
    out = []
    for field, change in sorted((entry.changes or {}).items()):
        if field == "id":  # a created object's own id: the entry's object_id already says it
            continue
        if isinstance(change, dict) and change.get("type") == "m2m":
            before, after = _m2m(change)
        else:
            before, after = change
        out.append({"field": field, "before": before, "after": after})
    return out


def entry_row(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "at": entry.timestamp.isoformat(),
        "actor": entry.actor_label,
        "address": entry.remote_addr,
        "kind": entry.kind,
        "object_type": ContentType.objects.get_for_id(entry.content_type_id).name,
        "object_id": entry.object_pk,
        "object": entry.object_repr,
        "action": ACTION_NAMES.get(entry.action, str(entry.action)),
        "changes": changes_of(entry),
    }


CSV_COLUMNS = ("id", "at", "actor", "address", "kind", "object_type", "object_id", "object", "action", "field", "before", "after")


def value_cell(value: Any) -> Any:
    """A recorded value in one CSV cell: numbers stay numbers, text stays text, others as JSON."""
    if value is None or isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    return json.dumps(value, sort_keys=True)


def csv_rows(rows: QuerySet[AuditEntry]) -> Iterator[list[Any]]:
    """One CSV row per changed field of each entry (an entry that changed none: one row)."""
    for entry in rows.iterator(chunk_size=1000):
        row = entry_row(entry)
        head = [row[name] for name in CSV_COLUMNS[:9]]
        for change in row["changes"] or [{"field": None, "before": None, "after": None}]:
            yield [*head, change["field"], value_cell(change["before"]), value_cell(change["after"])]

"""Receivers of django-auditlog's signals and of the entry's own save (connected in apps.py)."""

from __future__ import annotations

from typing import Any

from auditlog.models import AbstractLogEntry
from auditlog.signals import pre_log
from django.db.models.signals import pre_save

from phantomhub.audit import context, registration
from phantomhub.audit.models import AuditEntry


def entry_fill(sender: Any, instance: AuditEntry, **kwargs: Any) -> None:
    """A new entry gets the kind people filter by (registration.RECORDED) and who wrote it, from
    where (context.py); outside any context it keeps the default, "system"."""
    if not instance._state.adding:
        return
    if not instance.kind:
        instance.kind = registration.kind_of(instance.content_type.model_class())
    current = context.who()
    if current is not None:
        instance.actor_id, instance.actor_label, instance.remote_addr = current


def creates_only_when_recorded(sender: Any, instance: Any, action: int, **kwargs: Any) -> bool:
    """pre_log: False skips the entry. The organization settings row is created with its defaults on
    first read; that is no change, and it would name whoever happened to open Settings."""
    return not (action == AbstractLogEntry.Action.CREATE and not registration.records_creates(type(instance)))


def connect() -> None:
    pre_save.connect(entry_fill, sender=AuditEntry, dispatch_uid="audit-entry-fill")
    pre_log.connect(creates_only_when_recorded, dispatch_uid="audit-creates")

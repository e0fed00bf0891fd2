"""Receivers of django-auditlog's signals and of the entry's own save (connected in apps.py)."""

from __future__ import annotations

from typing import Any

from auditlog.models import AbstractLogEntry
from auditlog.signals import pre_log
from django.db import models
from django.db.models.signals import m2m_changed, pre_save

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


def _log_members(owner: models.Model, field: str, operation: str, related: list[Any]) -> None:
    if related:
        AuditEntry.objects.log_m2m_changes(related, owner, operation, field)


def m2m_recorder(owner_model: type[models.Model], field: str) -> Any:
    """m2m_changed for one recorded many-to-many field: who was added or removed, recorded on the
    owner (the directory group), whichever side changed it (`group.members.add(user)` or
    `user.directory_groups.set(groups)`). Not auditlog's own m2m logging: on a clear() it names
    every row of the related table, not the ones that were there, and a change from the other
    side it records on the other object."""

    def changed(sender: Any, instance: Any, action: str, reverse: bool, model: Any, pk_set: Any, **kwargs: Any) -> None:
        if action == "pre_clear":  # after the clear there is no one left to name: remember them now
            if reverse:
                instance._audit_cleared = list(owner_model._default_manager.filter(**{field: instance}).order_by("pk"))
            else:
                instance._audit_cleared = list(getattr(instance, field).order_by("pk"))
            return
        if action not in ("post_add", "post_remove", "post_clear"):
            return
        operation = "add" if action == "post_add" else "delete"
        if action == "post_clear":
            gone = getattr(instance, "_audit_cleared", [])
            owners, related = (gone, [instance]) if reverse else ([instance], gone)
        elif reverse:
            owners, related = list(owner_model._default_manager.filter(pk__in=pk_set).order_by("pk")), [instance]
        else:
            owners, related = [instance], list(model._default_manager.filter(pk__in=pk_set).order_by("pk"))
        for owner in owners:
            _log_members(owner, field, operation, related)

    return changed


def connect() -> None:
    pre_save.connect(entry_fill, sender=AuditEntry, dispatch_uid="audit-entry-fill")
    pre_log.connect(creates_only_when_recorded, dispatch_uid="audit-creates")
    for model, field in registration.m2m_fields():
        through = getattr(model, field).through
        uid = f"audit-m2m-{through._meta.label}"
        m2m_changed.connect(m2m_recorder(model, field), sender=through, weak=False, dispatch_uid=uid)

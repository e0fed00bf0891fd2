"""The audit log's one table: django-auditlog's entry with what PhantomHub reads it by.

`settings.AUDITLOG_LOGENTRY_MODEL` names this model, so auditlog writes its entries here. Entries
are append-only: the service inserts them and only the retention purge deletes them; on PostgreSQL
a trigger refuses every other UPDATE and DELETE (migration 0002, docs/audit.md).
"""

from __future__ import annotations

from typing import Any

from auditlog.models import AbstractLogEntry
from django.conf import settings
from django.db import models


class AuditEntry(AbstractLogEntry):
    # What kind of thing changed ("price", "month", "token", ...: registration.KINDS), so the
    # filters and finance's share of the log are one indexed column.
    kind: models.CharField[str, str] = models.CharField(max_length=32, db_index=True, blank=True)
    # Who, as people read it: a username, "token phk_…", "SCIM" or "system". Kept as text so an
    # entry stays readable (and unchanged) after its person is deleted.
    actor_label: models.CharField[str, str] = models.CharField(max_length=200, default="system", db_index=True)
    # auditlog's own foreign keys would rewrite or delete entries when a person or a content type
    # goes (SET_NULL, CASCADE): an UPDATE the append-only guard refuses. The actor's id stays as it
    # was (no constraint); a content type with entries cannot be deleted.
    actor: models.ForeignKey[Any, Any] = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    content_type: models.ForeignKey[Any, Any] = models.ForeignKey(
        "contenttypes.ContentType", on_delete=models.PROTECT, related_name="+"
    )

    class Meta(AbstractLogEntry.Meta):
        ordering = ["-timestamp", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"

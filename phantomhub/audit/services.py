"""The one write the service makes to entries besides inserting them: the retention purge."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from phantomhub.audit.models import AuditEntry

PURGE_CHUNK = 5000

# The append-only guard (migration 0002) lets a DELETE through only in a transaction that set this.
PURGE_FLAG_SQL = "SET LOCAL phantomhub.audit_purge = 'on'"
PURGE_FLAG_OFF_SQL = "SET LOCAL phantomhub.audit_purge = 'off'"


def audit_purge(*, now: datetime | None = None) -> int:
    """Delete entries older than PHANTOMHUB_AUDIT_RETENTION_DAYS, oldest first, in chunks of
    PURGE_CHUNK (each its own short transaction). Returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.AUDIT_RETENTION_DAYS)
    purged = 0
    while True:
        with transaction.atomic(), _purge_flag():
            ids = list(AuditEntry.objects.filter(timestamp__lt=cutoff).order_by("id").values_list("id", flat=True)[:PURGE_CHUNK])
            if not ids:
                return purged
            purged += AuditEntry.objects.filter(id__in=ids).delete()[0]


@contextlib.contextmanager
def _purge_flag() -> Iterator[None]:
    """The guard's flag for the purge's statements only. SET LOCAL lasts until the outermost
    transaction ends, which is later than this block when the purge runs inside another
    transaction (a test, a command): the flag is turned off again on the way out."""
    if connection.vendor != "postgresql":  # SQLite has no guard: only this code path deletes
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(PURGE_FLAG_SQL)
    try:
        yield
    finally:
        if not connection.needs_rollback:
            with connection.cursor() as cursor:
                cursor.execute(PURGE_FLAG_OFF_SQL)

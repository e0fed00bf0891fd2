"""Celery tasks of the audit log."""

from __future__ import annotations

from celery import shared_task

from phantomhub.audit import services


@shared_task(acks_late=True)
def audit_purge() -> int:
    """Beat (and the embedded sweeper), hourly: entries past PHANTOMHUB_AUDIT_RETENTION_DAYS."""
    return services.audit_purge()

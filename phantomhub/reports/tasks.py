"""Celery: beat runs `reports_send` every PHANTOMHUB_REPORTS_INTERVAL_S (60 s by default); the
embedded sweeper runs it every pass (a pass with nothing due reads two indexes)."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from phantomhub.reports import services


@shared_task(acks_late=True)
def reports_send() -> dict[str, int]:
    """Claim the periods now due and attempt the due deliveries. Idempotent: a redelivered message
    finds the period claimed (ReportDelivery's unique period) and sends nothing twice."""
    return asdict(services.reports_send())

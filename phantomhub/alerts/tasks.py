"""Celery: beat runs `evaluate` every PHANTOMHUB_ALERT_INTERVAL_S (20 s by default)."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from phantomhub.alerts import services


@shared_task(acks_late=True)
def evaluate() -> dict[str, int]:
    """Evaluate every rule from the stored analyses and attempt due deliveries. Idempotent: a
    redelivered message re-evaluates, and a firing is told once (AlertState.notified)."""
    return asdict(services.alerts_evaluate())

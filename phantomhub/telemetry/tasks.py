"""Celery tasks of telemetry: storage maintenance (beat, every PHANTOMHUB_STORAGE_INTERVAL_S)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from phantomhub.telemetry import retention


@shared_task(acks_late=True)
def storage_maintain() -> dict[str, Any]:
    """Partitions ahead, finished runs archived, expired raw rows retired. Idempotent; each run
    is archived on its own, so one failure never stops the others (counted in the result)."""
    return retention.storage_maintain().as_dict()

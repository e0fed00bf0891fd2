"""Celery tasks of the fleet: derive pending node-days, purge old raw samples, re-attribute after a rule save."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from phantomhub.fleet import derive, services
from phantomhub.fleet.focus import INVOICE_IMPORT, STALE_AFTER, invoice_import_run


@shared_task(acks_late=True)
def fleet_derive() -> int:
    """Beat (and the embedded sweeper): rebuild the node-days that ingest marked."""
    return derive.fleet_derive_pending()


@shared_task(acks_late=True)
def fleet_purge() -> int:
    """Beat, hourly: raw samples older than PHANTOMHUB_FLEET_RAW_DAYS (derived rows stay)."""
    return services.raw_samples_purge()


@shared_task(name=INVOICE_IMPORT, acks_late=True, bind=True, max_retries=3)
def invoice_import(self: Any, import_id: int) -> str:
    """A large FOCUS file posted to the API (enqueued on commit): check it all, then store it or
    record why not (phantomhub/fleet/focus.py). Found running (a redelivery after its worker died,
    or a second delivery): asked again once that run would be stale, to take it over or see it done."""
    status = invoice_import_run(import_id=import_id)
    if status == "running":
        raise self.retry(countdown=STALE_AFTER.total_seconds() + 60)
    return status


@shared_task(name=services.REATTRIBUTE, acks_late=True)
def fleet_reattribute(job_id: int) -> int:
    """Enqueued on commit by a rule save: re-attribute every owner (an AttributionJob's progress)."""
    return services.attribution_job_run(job_id=job_id).owners_moved

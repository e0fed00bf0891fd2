"""Celery tasks of the fleet: derive pending node-days, purge old raw samples, re-attribute after a rule save."""

from __future__ import annotations

from celery import shared_task

from phantomhub.fleet import derive, services


@shared_task(acks_late=True)
def fleet_derive() -> int:
    """Beat (and the embedded sweeper): rebuild the node-days that ingest marked."""
    return derive.fleet_derive_pending()


@shared_task(acks_late=True)
def fleet_purge() -> int:
    """Beat, hourly: raw samples older than PHANTOMHUB_FLEET_RAW_DAYS (derived rows stay)."""
    return services.raw_samples_purge()


@shared_task(acks_late=True)
def invoice_import(import_id: int) -> str:
    """A large FOCUS file posted to the API (enqueued on commit): check it all, then store it or
    record why not (phantomhub/fleet/focus.py)."""
    from phantomhub.fleet.focus import invoice_import_run

    return invoice_import_run(import_id=import_id)


@shared_task(acks_late=True)
def fleet_reattribute(job_id: int) -> int:
    """Enqueued on commit by a rule save: re-attribute every owner (an AttributionJob's progress)."""
    return services.attribution_job_run(job_id=job_id).owners_moved

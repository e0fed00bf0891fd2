"""Celery tasks: fetch by id, call one service. Idempotent, so acks_late redelivery is safe."""

from __future__ import annotations

import uuid

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from phantomhub.waste import services
from phantomhub.waste.scheduling import ANALYZE_RUN, redis_client
from phantomhub.waste.sweeps import analysis_sweep


def producer_warm() -> None:
    """Build what the first ``analyze_run.apply_async`` of a process would build, without a
    connection: the broker transport and result backend classes (found through entry points and
    imported), the producer pool and the task sender. A web worker calls it at boot
    (deploy/gunicorn.py), so that its first ingest batch does not wait on it (~80 ms of CPU)."""
    app = analyze_run.app
    app.backend  # noqa: B018  # the properties import and build on first use
    app.amqp.producer_pool  # noqa: B018
    app.amqp.send_task_message  # noqa: B018
    redis_client()


@shared_task(
    name=ANALYZE_RUN,
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=5,
)
def analyze_run(run_id: str) -> str | None:
    row = services.run_analyze_isolated(run_id=uuid.UUID(run_id))
    return None if row is None else row.analysed_at.isoformat() if row.analysed_at else None


@shared_task(acks_late=True)
def sweep() -> dict[str, int]:
    """Beat, every ~30 s: crash detection, dirty runs, pending rollups. A lost analysis message
    delays an analysis until here; it never loses one."""
    result = analysis_sweep(inline=settings.CELERY_TASK_ALWAYS_EAGER)
    return {
        "crashed": result.crashed,
        "analysed": result.analysed,
        "enqueued": result.enqueued,
        "rollup_days": result.rollup_days,
    }

"""The beat schedule derives node-days every 30 s and purges raw samples hourly; a real Celery
worker (Redis broker, the PostgreSQL test database) runs the derivation."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.conf import settings

from phantomhub.celery import app as celery_app
from phantomhub.fleet.models import DayPending, FleetDay, GpuClass
from phantomhub.fleet.tasks import fleet_derive, fleet_purge
from tests.fleet.test_ground_truth import post_hour
from tests.waste.test_celery_worker import Worker, worker  # noqa: F401


def test_beat_derives_every_30_seconds_and_purges_hourly() -> None:
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["fleet-derive"] == {"task": fleet_derive.name, "schedule": 30.0}
    assert schedule["fleet-purge"] == {"task": fleet_purge.name, "schedule": 3600.0}
    celery_app.loader.import_default_modules()
    assert {fleet_derive.name, fleet_purge.name} <= set(celery_app.tasks)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_worker_derives_what_ingest_marked(node_client: Any, h100_price: Any, teams: Any, worker: Worker) -> None:  # noqa: F811
    post_hour(node_client)
    assert DayPending.objects.exists() and not FleetDay.objects.exists()
    fleet_derive.delay()
    deadline = time.monotonic() + 60
    while DayPending.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not DayPending.objects.exists(), worker.log.read_text()[-3000:]
    assert {r.cls: r.cost_cents for r in FleetDay.objects.all()} == dict.fromkeys(
        [GpuClass.INSTRUMENTED, GpuClass.BUSY_UNINSTRUMENTED, GpuClass.IDLE_HELD, GpuClass.EMPTY], 360
    )

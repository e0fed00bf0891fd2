"""The broker sweep catches up lost analyses without adding duplicates of scheduled ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from phantomhub.celery import app as celery_app
from phantomhub.waste import services
from phantomhub.waste.models import OrgSettings
from tests.conftest import Tenant
from tests.waste.test_analysis_service import known_steps, make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery]
QUEUE = "phantomhub"  # the queue the worker consumes (-Q phantomhub)


@pytest.fixture
def broker(settings: Any) -> Iterator[redis.Redis]:
    if connection.vendor != "postgresql":
        pytest.skip("the broker path is tested on PostgreSQL")
    client = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    client.flushdb()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    celery_app.conf.task_always_eager = False
    yield client
    celery_app.conf.task_always_eager = True
    client.flushdb()


def _analyses_queued(client: redis.Redis) -> int:
    return sum(b"analyze_run" in message for message in client.lrange(QUEUE, 0, -1))


def test_the_sweep_leaves_a_scheduled_analysis_alone_and_retries_a_lost_one_once(owner: Tenant, broker: redis.Redis) -> None:
    OrgSettings.objects.update_or_create(pk=1, defaults={"analysis_debounce_s": 30})
    run_id = make_run(owner)
    assert owner.post_steps(run_id, known_steps(10)).status_code == 200
    assert _analyses_queued(broker) == 1  # ingest scheduled one, 30 s ahead

    assert services.analysis_sweep(inline=False).enqueued == 0  # dirty, but already scheduled
    assert _analyses_queued(broker) == 1

    broker.delete(f"phantomhub:analyze:{run_id}")  # the debounce ran out and the message was lost
    assert services.analysis_sweep(inline=False).enqueued == 1
    assert services.analysis_sweep(inline=False).enqueued == 0  # the next sweep within 30 s adds none
    assert _analyses_queued(broker) == 2

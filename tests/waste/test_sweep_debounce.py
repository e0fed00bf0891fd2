"""The broker sweep catches up lost analyses without adding duplicates of scheduled ones."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from phantomhub.celery import app as celery_app
from phantomhub.telemetry.models import Run
from phantomhub.waste import scheduling, services, sweeps
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

    assert sweeps.analysis_sweep(inline=False).enqueued == 0  # dirty, but already scheduled
    assert _analyses_queued(broker) == 1

    broker.delete(f"phantomhub:analyze:{run_id}")  # the debounce ran out and the message was lost
    assert sweeps.analysis_sweep(inline=False).enqueued == 1
    assert sweeps.analysis_sweep(inline=False).enqueued == 0  # the next sweep within 30 s adds none
    assert _analyses_queued(broker) == 2


def test_a_run_whose_debounce_key_this_process_set_costs_no_query_and_no_second_enqueue(
    owner: Tenant, broker: redis.Redis
) -> None:
    OrgSettings.objects.update_or_create(pk=1, defaults={"analysis_debounce_s": 30})
    run_id = make_run(owner)
    assert owner.post_steps(run_id, known_steps(10)).status_code == 200
    assert _analyses_queued(broker) == 1
    with CaptureQueriesContext(connection) as captured:
        for _ in range(20):
            scheduling.analysis_request(uuid.UUID(run_id))
    assert not captured.captured_queries  # neither the settings nor anything else
    assert _analyses_queued(broker) == 1
    assert 29_000 < broker.pttl(f"phantomhub:analyze:{run_id}") <= 30_000  # the key ingest set, untouched


def test_a_key_held_by_another_process_is_waited_out_for_as_long_as_redis_says(owner: Tenant, broker: redis.Redis) -> None:
    OrgSettings.objects.update_or_create(pk=1, defaults={"analysis_debounce_s": 30})
    run_id = uuid.UUID(make_run(owner))
    broker.set(f"phantomhub:analyze:{run_id}", "1", px=400)  # another web process scheduled it
    scheduling.analysis_request(run_id)
    assert _analyses_queued(broker) == 0
    time.sleep(0.5)  # its key expired: the next batch schedules the analysis
    scheduling.analysis_request(run_id)
    assert _analyses_queued(broker) == 1


def test_a_debounce_interval_saved_in_this_process_applies_to_the_next_request(owner: Tenant, broker: redis.Redis) -> None:
    OrgSettings.objects.update_or_create(pk=1, defaults={"analysis_debounce_s": 30})
    first = uuid.UUID(make_run(owner))
    scheduling.analysis_request(first)
    OrgSettings.objects.update_or_create(pk=1, defaults={"analysis_debounce_s": 7})
    second = uuid.UUID(make_run(owner))
    scheduling.analysis_request(second)
    assert 6_000 < broker.pttl(f"phantomhub:analyze:{second}") <= 7_000


def test_a_sweep_with_nothing_dirty_reads_the_settings_once_and_uses_their_crash_threshold(
    owner: Tenant, broker: redis.Redis
) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(10))
    services.run_analyze(run_id=uuid.UUID(run_id))
    Run.objects.filter(pk=run_id).update(last_seen_at=timezone.now() - timedelta(seconds=100))
    OrgSettings.objects.update_or_create(pk=1, defaults={"crash_after_s": 200})

    with CaptureQueriesContext(connection) as captured:
        result = sweeps.analysis_sweep(inline=False)

    assert (result.crashed, result.enqueued) == (0, 0)
    settings_reads = [q["sql"] for q in captured.captured_queries if "waste_orgsettings" in q["sql"]]
    assert len(settings_reads) == 1
    OrgSettings.objects.filter(pk=1).update(crash_after_s=60)
    assert sweeps.analysis_sweep(inline=False).crashed == 1  # silent for 100 s: over the threshold now

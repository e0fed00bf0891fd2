"""The beat path: the schedule names the evaluate task, and a real Celery worker (through the
Redis broker) evaluates the rules and delivers the webhook."""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState
from phantomhub.alerts.tasks import evaluate
from phantomhub.celery import app as celery_app
from tests.alerts.conftest import Receiver
from tests.alerts.test_rules import stalled_run
from tests.conftest import Tenant
from tests.waste.test_celery_worker import Worker, worker  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery, pytest.mark.usefixtures("price_36")]


def test_beat_runs_the_alert_evaluation_every_20_seconds() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["alerts-evaluate"]
    assert entry["task"] == evaluate.name == "phantomhub.alerts.tasks.evaluate"
    assert entry["schedule"] == 20.0
    celery_app.loader.import_default_modules()
    assert evaluate.name in celery_app.tasks


def test_a_worker_evaluates_the_rules_and_sends_the_alert(owner: Tenant, receiver: Receiver, worker: Worker) -> None:  # noqa: F811
    run_id = stalled_run(owner)
    rule = AlertRule.objects.create(name="w", kind="waste_rate", params={"usd_per_hour": 25.0}, for_s=0, window_s=30,
                                    webhook_url=receiver.url)  # fmt: skip
    evaluate.delay()
    got = receiver.wait_for(1, 60)
    assert len(got) == 1, worker.log.read_text()[-3000:]
    assert got[0].json["subject"]["run_id"] == run_id and got[0].json["event"] == "firing"
    assert AlertState.objects.get(rule=rule).state == "firing"
    first = AlertState.objects.get(rule=rule).evaluated_at
    evaluate.delay()  # again: still firing, told once
    deadline = time.monotonic() + 30
    while AlertState.objects.get(rule=rule).evaluated_at == first and time.monotonic() < deadline:
        time.sleep(0.2)
    assert AlertState.objects.get(rule=rule).evaluated_at != first, "the second evaluation did not run"
    assert len(receiver.got) == 1 and AlertDelivery.objects.count() == 1

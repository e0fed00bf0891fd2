"""The periodic jobs (phantomhub/periodic.py): one list, from which beat's schedule and the embedded
sweeper are both built, and every job runs in both modes (the fleet purge included)."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from phantomhub import periodic
from phantomhub.audit.models import AuditEntry
from phantomhub.celery import app as celery_app
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import GpuSample
from tests.fleet.conftest import NS, T0, h100_price, node_client, teams  # noqa: F401
from tests.fleet.test_incremental import post
from tests.waste.test_celery_worker import Worker, worker  # noqa: F401

NAMES = {"sweep", "fleet-derive", "alerts-evaluate", "reports-send", "storage-maintain", "fleet-purge", "audit-purge"}


def test_beat_schedule_is_the_one_list_of_jobs() -> None:
    assert {job.name for job in periodic.JOBS} == NAMES
    assert {
        job.name: {"task": job.task, "schedule": float(getattr(settings, job.interval))} for job in periodic.JOBS
    } == settings.CELERY_BEAT_SCHEDULE
    assert settings.CELERY_BEAT_SCHEDULE["fleet-purge"]["schedule"] == 3600.0
    celery_app.loader.import_default_modules()
    for job in periodic.JOBS:
        assert job.task in celery_app.tasks, job
        assert periodic._task(job).name == job.task  # the sweeper calls the same task


@pytest.mark.django_db  # each job runs between close_old_connections(), as the sweeper's thread does
def test_the_embedded_sweeper_runs_each_job_when_due_and_a_failure_skips_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "CELERY_TASK_ALWAYS_EAGER", True)
    ran: list[str] = []

    def recorder(job: periodic.Job) -> Any:
        def call() -> None:
            ran.append(job.name)
            if job.name == "sweep":
                raise RuntimeError("the analysis sweep failed")

        return call

    monkeypatch.setattr(periodic, "_task", recorder)
    sweeper = periodic.Sweeper(settings)
    every = [job.name for job in periodic.JOBS]
    assert sweeper.run_due(now=1000.0) == (every, ["sweep"])  # all due at the first pass; one failure skips none
    assert ran == every
    quick = [job.name for job in periodic.JOBS if job.quick]
    assert sweeper.run_due(now=1000.0 + periodic.EMBEDDED_PASS_S)[0] == quick
    assert sweeper.run_due(now=1000.0 + periodic.EMBEDDED_PASS_S + 1)[0] == []  # nothing due between passes
    at_storage = 1000.0 + settings.STORAGE_INTERVAL_S
    assert sweeper.run_due(now=at_storage)[0] == [*quick, "storage-maintain"]
    assert sweeper.run_due(now=1000.0 + 3600.0)[0] == [*quick, "storage-maintain", "fleet-purge", "audit-purge"]
    assert periodic.every_s("alerts-evaluate", settings) == periodic.EMBEDDED_PASS_S
    monkeypatch.setattr(settings, "CELERY_TASK_ALWAYS_EAGER", False)
    assert periodic.every_s("alerts-evaluate", settings) == settings.ALERT_INTERVAL_S == 20.0


def _old_audit_entry() -> int:
    """An audit entry past PHANTOMHUB_AUDIT_RETENTION_DAYS; returns its id."""
    old = timezone.now() - timedelta(days=settings.AUDIT_RETENTION_DAYS + 1)
    return AuditEntry.objects.create(
        content_type=ContentType.objects.get_for_model(AuditEntry), object_pk="1", object_repr="old", action=0, timestamp=old
    ).pk


def _old_raw_samples(client: Any) -> int:
    """Raw GPU samples from T0 (months ago: past PHANTOMHUB_FLEET_RAW_DAYS), their days derived."""
    kept = settings.FLEET_RAW_DAYS
    settings.FLEET_RAW_DAYS = 3650  # accepted now; past the 14 days the purge (and a worker) keep
    try:
        post(client, [T0 + (i + 1) * 15 * NS for i in range(8)])
    finally:
        settings.FLEET_RAW_DAYS = kept
    fleet_derive_pending()
    return GpuSample.objects.count()


def _due_report() -> int:
    """A finance review subscription past its due time; returns its id (the job claims its period)."""
    from django.contrib.auth.models import User

    from phantomhub.accounts.models import Profile
    from phantomhub.reports.models import Subscription

    user = User.objects.create_user("periodic-fin", email="fin@example.com")
    Profile.objects.create(user=user, is_finance=True)
    return Subscription.objects.create(
        owner=user, kind="finance_month", cadence="monthly", day_of_month=1, email_to=["fin@example.com"],
        next_due_at=timezone.now() - timedelta(minutes=1),
    ).pk  # fmt: skip


def _report_claimed(sub_id: int) -> bool:
    from phantomhub.reports.models import ReportDelivery

    return ReportDelivery.objects.filter(subscription_id=sub_id).exists()


@pytest.mark.django_db(transaction=True)
def test_every_job_runs_in_the_embedded_sweeper(node_client: Any, h100_price: Any, teams: Any) -> None:  # noqa: F811
    assert _old_raw_samples(node_client) > 0
    old_entry = _old_audit_entry()
    report = _due_report()
    assert settings.CELERY_TASK_ALWAYS_EAGER  # the suite's default: no broker, as with `make run`
    ran, failed = periodic.Sweeper(settings).run_due()
    assert (sorted(ran), failed) == (sorted(NAMES), [])
    assert _report_claimed(report)  # the reports job claimed the due period
    assert GpuSample.objects.count() == 0  # the fleet purge ran: `make run` purges raw samples too
    assert not AuditEntry.objects.filter(pk=old_entry).exists()  # and the audit log's purge


@pytest.mark.django_db(transaction=True)
def test_every_job_runs_on_a_celery_worker(node_client: Any, h100_price: Any, teams: Any, worker: Worker) -> None:  # noqa: F811
    assert _old_raw_samples(node_client) > 0
    old_entry = _old_audit_entry()
    report = _due_report()
    for job in periodic.JOBS:
        celery_app.send_task(job.task, queue="phantomhub")  # as beat sends it
    deadline = time.monotonic() + 90
    pending = {job.task for job in periodic.JOBS}
    while pending and time.monotonic() < deadline:
        log = worker.log.read_text()
        pending = {task for task in pending if not re.search(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", log)}
        time.sleep(0.2)
    assert not pending, worker.log.read_text()[-3000:]
    assert GpuSample.objects.count() == 0
    assert _report_claimed(report)
    assert not AuditEntry.objects.filter(pk=old_entry).exists()

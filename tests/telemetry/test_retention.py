"""Retention: raw rows leave the database only for runs that are over, archived and expired."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from phantomhub.telemetry import services
from phantomhub.telemetry.models import ProjectRetention, RunArchive, RunStatus
from phantomhub.telemetry.partitions import week_start
from phantomhub.telemetry.retention import storage_maintain
from phantomhub.telemetry.tasks import storage_maintain as storage_maintain_task
from tests import rawrows
from tests.conftest import Tenant, steps_body
from tests.telemetry.storage_helpers import RANKS, STEPS, later, run_with_telemetry

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


@pytest.fixture(autouse=True)
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    settings.ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive"


def _hot(run: Any) -> int:
    """The run's steps and samples still in the database."""
    return len(rawrows.steps(run.pk)) + len(rawrows.samples(run.pk))


def _dropped_own_week(result: Any, run: Any) -> bool:
    """Whether the pass dropped the run's week (a pass far in the future also drops empty weeks)."""
    return any(name.endswith(f"_w{week_start(run.storage_week):%Y%m%d}") for name in result.partitions_dropped)


def test_a_running_run_is_neither_archived_nor_pruned_however_old(owner: Tenant) -> None:
    running = run_with_telemetry(owner, finished_days_ago=None)
    result = storage_maintain(now=later(400))
    assert result.archived == 0 and not RunArchive.objects.filter(run=running).exists()
    assert _hot(running) == RANKS * STEPS + RANKS * 24


def test_an_unarchived_run_keeps_its_rows_however_long_ago_it_ended(owner: Tenant, settings: Any) -> None:
    settings.ARCHIVE_DELAY_S = 400 * 86_400  # archiving held back: nothing is archived yet
    ended = run_with_telemetry(owner, finished_days_ago=100)
    result = storage_maintain(now=later(1))
    assert result.archived == 0 and result.runs_pruned == 0 and not _dropped_own_week(result, ended)
    assert _hot(ended) == RANKS * STEPS + RANKS * 24


def test_a_run_whose_archive_is_stale_keeps_its_rows(owner: Tenant, settings: Any) -> None:
    run = run_with_telemetry(owner, finished_days_ago=2)
    assert storage_maintain(now=later(1)).archived == 1  # archived, not yet expired
    # A late batch makes the archive stale; with archiving held back, the rows must stay.
    services.steps_ingest(run=run, rank=0, host="n", steps=steps_body(5, first=STEPS)["steps"])
    settings.ARCHIVE_DELAY_S = 400 * 86_400
    result = storage_maintain(now=later(200))
    assert result.runs_pruned == 0 and not _dropped_own_week(result, run)
    assert _hot(run) == RANKS * STEPS + 5 + RANKS * 24 and RunArchive.objects.get(run=run).pruned_at is None


def test_rows_stay_until_the_retention_has_passed_then_go(owner: Tenant) -> None:
    run = run_with_telemetry(owner, finished_days_ago=2)  # default retention: 30 days
    first = storage_maintain(now=later(27))  # 29 days after the end
    assert first.archived == 1 and first.runs_pruned == 0 and not _dropped_own_week(first, run)
    assert _hot(run) > 0 and RunArchive.objects.get(run=run).pruned_at is None
    second = storage_maintain(now=later(29))  # 31 days after
    assert second.archived == 0  # already archived at its current telemetry
    assert _hot(run) == 0 and RunArchive.objects.get(run=run).pruned_at is not None
    # On PostgreSQL the rows go with their week's partitions, dropped whole, not deleted row by row.
    assert _dropped_own_week(second, run) == (connection.vendor == "postgresql")
    assert second.runs_pruned == (0 if connection.vendor == "postgresql" else 1)


def test_a_project_override_shortens_or_lengthens_the_retention(owner: Tenant, outsider: Tenant) -> None:
    ProjectRetention.objects.create(project=owner.project, raw_retention_days=3)
    ProjectRetention.objects.create(project=outsider.project, raw_retention_days=90)
    short, long = run_with_telemetry(owner, finished_days_ago=2), run_with_telemetry(outsider, finished_days_ago=2)
    storage_maintain(now=later(10))
    assert _hot(short) == 0 and _hot(long) > 0
    storage_maintain(now=later(89))
    assert _hot(long) == 0


def test_a_dry_run_changes_nothing_and_says_what_it_would_do(owner: Tenant, archive_dir: Path) -> None:
    run = run_with_telemetry(owner, finished_days_ago=2)
    out = StringIO()
    call_command("retention", "--dry-run", stdout=out)
    assert f"would archive run {run.pk}" in out.getvalue()
    assert not RunArchive.objects.exists() and not archive_dir.exists() and _hot(run) > 0


def test_the_command_reports_each_step(owner: Tenant) -> None:
    run = run_with_telemetry(owner, finished_days_ago=2)
    out = StringIO()
    call_command("retention", stdout=out)
    assert f"archived run {run.pk}: {RANKS * STEPS} steps" in out.getvalue()


def test_one_run_failing_to_archive_does_not_stop_the_others(owner: Tenant, outsider: Tenant, archive_dir: Path) -> None:
    broken, fine = run_with_telemetry(outsider, finished_days_ago=3), run_with_telemetry(owner, finished_days_ago=2)
    # A file where the broken run's project directory must go: writing fails for real, for it only.
    (archive_dir / "steps").mkdir(parents=True)
    (archive_dir / "steps" / "project=detector").write_text("in the way")
    result = storage_maintain(now=later(31))
    assert result.archive_failed == 1 and result.archived == 1
    assert RunArchive.objects.filter(run=fine).exists() and not RunArchive.objects.filter(run=broken).exists()
    assert _hot(broken) == RANKS * STEPS + RANKS * 24
    if connection.vendor == "postgresql":  # the week's partition waits for its unarchived run
        assert _hot(fine) > 0 and not _dropped_own_week(result, fine)
    else:
        assert _hot(fine) == 0
    (archive_dir / "steps" / "project=detector").unlink()
    again = storage_maintain(now=later(31))
    assert again.archived == 1 and _hot(broken) == 0 and _hot(fine) == 0


def test_the_beat_task_runs_a_pass(owner: Tenant) -> None:
    run = run_with_telemetry(owner, finished_days_ago=2)
    result = storage_maintain_task()
    assert result["archived"] == 1 and result["archive_failed"] == 0
    assert RunArchive.objects.filter(run=run, pruned_at__isnull=True).exists()


def test_a_crashed_run_counts_as_over(owner: Tenant) -> None:
    run = run_with_telemetry(owner, finished_days_ago=40)
    type(run).objects.filter(pk=run.pk).update(status=RunStatus.CRASHED, finished_at=None)
    storage_maintain(now=later(31))
    assert _hot(run) == 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the pass lock is a PostgreSQL advisory lock")
def test_a_second_pass_while_one_runs_does_nothing(owner: Tenant) -> None:
    run_with_telemetry(owner, finished_days_ago=2)
    import psycopg
    from django.conf import settings as django_settings

    conf = django_settings.DATABASES["default"]
    other = psycopg.connect(
        dbname=connection.settings_dict["NAME"],
        user=conf["USER"],
        password=conf["PASSWORD"],
        host=conf["HOST"],
        port=conf["PORT"] or 5432,
    )
    try:
        other.execute("SELECT pg_advisory_lock(4242, 7011)")  # a pass elsewhere holds it
        result = storage_maintain(now=later(1))
        assert result.skipped and result.archived == 0 and not RunArchive.objects.exists()
        other.execute("SELECT pg_advisory_unlock(4242, 7011)")  # that pass ends
    finally:
        other.close()
    assert storage_maintain(now=later(1)).archived == 1

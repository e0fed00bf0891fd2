"""Weekly partitions of the raw tables on PostgreSQL (phantomhub/telemetry/partitions.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from phantomhub.telemetry import services
from phantomhub.telemetry.models import Run, Step
from phantomhub.telemetry.partitions import (
    RAW_TABLES,
    partition_name,
    partitions_ensure,
    partitions_list,
    week_now,
    week_of,
    week_start,
)
from phantomhub.telemetry.selectors import steps_arrays
from tests.conftest import Tenant, steps_body

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(settings.TEST_BACKEND != "postgresql", reason="partitions exist on PostgreSQL only"),
]
ROOT = Path(__file__).resolve().parents[2]


def _count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return int(cursor.fetchone()[0])


def test_weeks_start_on_mondays() -> None:
    assert week_start(week_now()).weekday() == 0
    assert week_of(week_start(100)) == 100 and week_of(week_start(100) - timedelta(days=1)) == 99


def test_the_migration_left_legacy_default_and_weekly_partitions_ahead() -> None:
    names = {p.name for p in partitions_list()}
    for table in RAW_TABLES:
        assert {f"{table}_legacy", f"{table}_default"} <= names
        for week in range(week_now(), week_now() + 5):
            assert partition_name(table, week) in names


def test_a_runs_rows_land_in_the_partition_of_the_week_it_was_registered_in(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(40)).status_code == 200
    run = Run.objects.get(pk=run_id)
    assert run.storage_week == week_now()
    assert _count(partition_name("telemetry_step", run.storage_week)) == 40
    assert _count("telemetry_step_legacy") == 0 and _count("telemetry_step_default") == 0


def test_a_read_of_one_run_touches_only_its_partitions(owner: Tenant) -> None:
    run_id = uuid.UUID(owner.create_run())
    owner.post_steps(str(run_id), steps_body(10))
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT step FROM telemetry_step WHERE run_id = %s AND run_week = ANY(%s) ORDER BY rank, step",
            [run_id, [0, week_now()]],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    touched = {name.removesuffix("_pkey") for name in re.findall(r" on (telemetry_step_\w+)", plan)}
    assert touched <= {"telemetry_step_legacy", partition_name("telemetry_step", week_now())}, plan


def test_partitions_are_made_ahead_once(owner: Tenant) -> None:
    created = partitions_ensure(now=timezone.now() + timedelta(days=14))
    far = [partition_name(t, week_now() + w) for w in (5, 6) for t in RAW_TABLES]
    assert sorted(created) == sorted(far)
    assert partitions_ensure(now=timezone.now() + timedelta(days=14)) == []


def test_a_week_whose_rows_went_to_the_default_partition_is_not_created_and_its_rows_stay_readable(owner: Tenant) -> None:
    week = week_now() + 8  # no partition yet
    run = Run.objects.create(
        id=uuid.uuid4(), project=owner.project, storage_week=week,
        allocation_start=timezone.now(), started_at=timezone.now(), last_seen_at=timezone.now(),
    )  # fmt: skip
    services.steps_ingest(run=run, rank=0, host="n", steps=steps_body(6)["steps"])
    assert _count("telemetry_step_default") == 6
    created = partitions_ensure(now=timezone.now() + timedelta(weeks=6))
    assert partition_name("telemetry_step", week) not in created and partition_name("telemetry_step", week + 1) in created
    assert steps_arrays(run_id=run.pk, rank=0)["step"].tolist() == list(range(6))


def test_a_replayed_batch_is_refused_by_the_partitioned_primary_key(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(20)).json()["accepted"] == 20
    assert owner.post_steps(run_id, steps_body(20)).json() == {"accepted": 0, "duplicates": 20, "reused_step": 0}
    assert Step.objects.filter(run_id=run_id).count() == 20


def _manage(database_url: str, *args: str) -> str:
    env = {
        **os.environ,
        "PHANTOMHUB_DATABASE_URL": database_url,
        "PHANTOMHUB_DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
    }
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def scratch_database() -> Any:
    conf = settings.DATABASES["default"]
    name = f"phantomhub_conv_{uuid.uuid4().hex[:8]}"
    admin = dict(user=conf["USER"], password=conf["PASSWORD"], host=conf["HOST"], port=conf["PORT"] or 5432)
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    password = f":{conf['PASSWORD']}" if conf["PASSWORD"] else ""
    yield f"postgres://{conf['USER']}{password}@{conf['HOST']}:{admin['port']}/{name}", {"dbname": name, **admin}
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.slow
def test_the_migration_converts_a_database_with_data_and_back(scratch_database: Any) -> None:
    url, params = scratch_database
    _manage(url, "migrate", "--no-input", "-v", "0")
    run_id = uuid.uuid4()
    _manage(url, "shell", "-c", (
        "from django.utils import timezone as tz; from phantomhub.accounts.services import project_token_for_slugs as p; "
        "from phantomhub.telemetry.models import Run; "
        f"Run.objects.create(id='{run_id}', project=p(team_slug='t', project_slug='p').token.project, "
        "allocation_start=tz.now(), started_at=tz.now(), last_seen_at=tz.now())"
    ))  # fmt: skip
    _manage(url, "migrate", "telemetry", "0005", "--no-input", "-v", "0")  # the schema before partitioning
    with psycopg.connect(**params) as conn:
        conn.execute(
            "INSERT INTO telemetry_step (run_id, rank, step, t_start_ns, dur_ns) "
            "SELECT %s, r, s, 1790000000000000000 + s * 100000000, 100000000 "
            "FROM generate_series(0, 3) r, generate_series(0::bigint, 499) s",
            [run_id],
        )
        conn.execute(
            "INSERT INTO telemetry_systemsample (run_id, rank, device, t_ns, gpu_util_pct) VALUES (%s, 0, 0, 1, 50.0)", [run_id]
        )
    _manage(url, "migrate", "--no-input", "-v", "0")
    with psycopg.connect(**params) as conn:
        assert conn.execute("SELECT storage_week FROM telemetry_run WHERE id = %s", [run_id]).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM telemetry_step_legacy").fetchone() == (2000,)
        assert conn.execute("SELECT count(*) FROM telemetry_systemsample_legacy").fetchone() == (1,)
        indexes = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'telemetry_step_legacy'").fetchone()
        assert indexes == (1,)  # the primary key alone: no index built twice, none on run_id alone
        kind = conn.execute("SELECT relkind FROM pg_class WHERE relname = 'telemetry_step'").fetchone()
        assert kind == ("p",)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO telemetry_step (run_id, rank, step, t_start_ns) VALUES (%s, 0, 7, 1)", [run_id])
    _manage(url, "migrate", "telemetry", "0006", "--no-input", "-v", "0")  # and back again
    with psycopg.connect(**params) as conn:
        assert conn.execute("SELECT relkind FROM pg_class WHERE relname = 'telemetry_step'").fetchone() == ("r",)
        assert conn.execute("SELECT count(*), sum(step) FROM telemetry_step").fetchone() == (2000, 4 * sum(range(500)))


def test_retention_drops_the_weeks_partitions_once_its_runs_are_archived_and_expired(
    owner: Tenant, settings: Any, tmp_path: Path
) -> None:
    from phantomhub.telemetry.models import RunArchive, RunStatus
    from phantomhub.telemetry.retention import storage_maintain

    settings.ARCHIVE_URL = str(tmp_path)
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(30))
    ended = timezone.now()
    Run.objects.filter(pk=run_id).update(status=RunStatus.FINISHED, finished_at=ended, last_seen_at=ended)
    week = Run.objects.get(pk=run_id).storage_week
    names = [partition_name(table, week) for table in RAW_TABLES]
    kept = storage_maintain(now=ended + timedelta(days=29))  # archived, not yet expired
    assert kept.archived == 1 and not set(names) & set(kept.partitions_dropped)
    result = storage_maintain(now=ended + timedelta(days=31))
    assert set(names) <= set(result.partitions_dropped)
    assert not set(names) & {p.name for p in partitions_list()}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname = ANY(%s)", [names])
        assert cursor.fetchone()[0] == 0  # dropped, not just detached
    assert RunArchive.objects.get(run_id=run_id).pruned_at is not None
    assert steps_arrays(run_id=uuid.UUID(run_id), rank=0)["step"].tolist() == list(range(30))  # from the archive


def test_rows_a_bulk_copy_wrote_without_their_week_leave_with_the_week(owner: Tenant, settings: Any, tmp_path: Path) -> None:
    """A COPY that names no run_week (bench/ingest.py's baseline) lands in the legacy partition:
    read with the run's other rows, archived with them, and deleted when its week is dropped."""
    from phantomhub.telemetry.models import RunStatus
    from phantomhub.telemetry.retention import storage_maintain
    from phantomhub.telemetry.services import _steps_checked
    from phantomhub.telemetry.storage import STEP_TABLE, pg_copy_payload

    settings.ARCHIVE_URL = str(tmp_path)
    run = Run.objects.get(pk=owner.create_run())
    owner.post_steps(str(run.pk), steps_body(10, rank=0))
    batch = _steps_checked(run, steps_body(10, rank=1)["steps"])
    names = [n for n in STEP_TABLE.pg_types if n in batch.values]
    connection.ensure_connection()
    sql = f"COPY telemetry_step (run_id, rank, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
    with connection.connection.cursor() as cursor, cursor.copy(sql) as copy:
        copy.write(pg_copy_payload(STEP_TABLE, names, run.pk, 1, batch))
    assert _count("telemetry_step_legacy") == 10
    assert steps_arrays(run_id=run.pk, rank=1)["step"].tolist() == list(range(10))
    ended = timezone.now()
    Run.objects.filter(pk=run.pk).update(status=RunStatus.FINISHED, finished_at=ended, last_seen_at=ended)
    result = storage_maintain(now=ended + timedelta(days=31))
    assert partition_name("telemetry_step", run.storage_week) in result.partitions_dropped
    assert _count("telemetry_step_legacy") == 0 and not Step.objects.filter(run=run).exists()
    assert steps_arrays(run_id=run.pk, rank=1)["step"].tolist() == list(range(10))  # from the archive

"""Weekly partitions of the raw tables on PostgreSQL (phantomhub/telemetry/partitions.py)."""

from __future__ import annotations

import os
import struct
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
from phantomhub.telemetry.models import Run, RunRank
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
from tests import rawrows
from tests.conftest import Tenant, steps_body

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(settings.TEST_BACKEND != "postgresql", reason="partitions exist on PostgreSQL only"),
]
ROOT = Path(__file__).resolve().parents[2]


def _count(table: str) -> int:
    """Rows (steps or samples) stored in a chunk table or one of its partitions: the chunks' n."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(sum(n), 0) FROM {table}")
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
    assert _count(partition_name("telemetry_stepchunk", run.storage_week)) == 40
    assert _count("telemetry_stepchunk_legacy") == 0 and _count("telemetry_stepchunk_default") == 0
    assert [row["step"] for row in rawrows.steps(run_id)] == list(range(40))


def _scans(table: str) -> dict[str, int]:
    """Scans of the table's partitions so far in this transaction (PostgreSQL's own count)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname LIKE %s",
            [f"{table}\\_%"],
        )
        return dict(cursor.fetchall())


def test_a_read_of_one_run_touches_only_its_partitions(owner: Tenant) -> None:
    run_id = uuid.UUID(owner.create_run())
    owner.post_steps(str(run_id), steps_body(10))
    # The server's own read, however it sends its statements: the partitions PostgreSQL scanned.
    before = _scans("telemetry_stepchunk")
    assert steps_arrays(run_id=run_id, rank=0)["step"].tolist() == list(range(10))
    after = _scans("telemetry_stepchunk")
    touched = {name for name, scans in after.items() if scans > before.get(name, 0)}
    week = partition_name("telemetry_stepchunk", week_now())
    assert len(after) >= 7, after  # legacy, default and the weeks ahead: a read could touch them all
    assert week in touched and touched <= {"telemetry_stepchunk_legacy", week}, after


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
    assert _count("telemetry_stepchunk_default") == 6
    created = partitions_ensure(now=timezone.now() + timedelta(weeks=6))
    assert partition_name("telemetry_stepchunk", week) not in created
    assert partition_name("telemetry_stepchunk", week + 1) in created
    assert steps_arrays(run_id=run.pk, rank=0)["step"].tolist() == list(range(6))


def test_a_replayed_batch_is_refused_in_the_partitioned_tables(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(20)).json()["accepted"] == 20
    assert owner.post_steps(run_id, steps_body(20)).json() == {"accepted": 0, "duplicates": 20, "reused_step": 0}
    assert len(rawrows.steps(run_id)) == 20
    assert _count(partition_name("telemetry_stepchunk", week_now())) == 20


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
    _manage(url, "migrate", "--no-input", "-v", "0")  # partitioned (0007), then packed into chunks (0009)
    with psycopg.connect(**params) as conn:
        assert conn.execute("SELECT storage_week FROM telemetry_run WHERE id = %s", [run_id]).fetchone() == (0,)
        gone = conn.execute("SELECT count(*) FROM pg_class WHERE relname IN ('telemetry_step', 'telemetry_systemsample')")
        assert gone.fetchone() == (0,)  # the row tables, their partitions with them
        assert conn.execute("SELECT sum(n) FROM telemetry_stepchunk_legacy").fetchone() == (2000,)
        assert conn.execute("SELECT sum(n) FROM telemetry_samplechunk_legacy").fetchone() == (1,)
        indexes = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'telemetry_stepchunk_legacy'").fetchone()
        assert indexes == (1,)  # the primary key alone: no index built twice, none on run_id alone
        kind = conn.execute("SELECT relkind FROM pg_class WHERE relname = 'telemetry_stepchunk'").fetchone()
        assert kind == ("p",)
        # The packed records decode (with struct, not the server's numpy) to the rows stored, nulls kept.
        step_record = struct.Struct(">" + "".join("d" if name == "flops" else "q" for name in rawrows.STEP_FIELDS))
        steps: dict[int, list[tuple[Any, ...]]] = {}
        chunks = conn.execute(
            "SELECT rank, seq, key_lo, key_hi, n, payload FROM telemetry_stepchunk WHERE run_id = %s ORDER BY rank, seq",
            [run_id],
        ).fetchall()
        for rank, _, key_lo, key_hi, n, payload in chunks:
            records = list(step_record.iter_unpack(bytes(payload)))
            assert len(records) == n and (key_lo, key_hi) == (records[0][0], records[-1][0])
            steps.setdefault(rank, []).extend(records)
        for rank in range(4):
            assert [r[:3] for r in steps[rank]] == [(s, 1790000000000000000 + s * 100000000, 100000000) for s in range(500)]
            assert all(r[3:8] == (-1,) * 5 and r[8] != r[8] and r[9:] == (-1,) * 6 for r in steps[rank])  # nulls
        ((payload,),) = conn.execute("SELECT payload FROM telemetry_samplechunk WHERE run_id = %s", [run_id]).fetchall()
        sample = struct.Struct(">qqddqddddq").unpack(bytes(payload))
        assert sample[:3] == (0, 1, 50.0) and sample[4] == sample[9] == -1
        # Each rank's marks and chunk sequence cover what was packed: a replay is refused, a new batch numbered after.
        marks = conn.execute(
            "SELECT rank, last_step, last_sample_ns, chunk_seq FROM telemetry_runrank WHERE run_id = %s ORDER BY rank",
            [run_id],
        ).fetchall()
        assert [m[:3] for m in marks] == [(0, 499, 1), (1, 499, None), (2, 499, None), (3, 499, None)]
        seqs = dict(conn.execute("SELECT rank, max(seq) FROM telemetry_stepchunk WHERE run_id = %s GROUP BY rank", [run_id]))
        assert all(chunk_seq > seqs[rank] for rank, _, _, chunk_seq in marks)
        rank, seq, key_lo, key_hi, n, payload = chunks[0]
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO telemetry_stepchunk (run_id, rank, seq, key_lo, key_hi, n, payload) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [run_id, rank, seq, key_lo, key_hi, n, payload],
            )
    _manage(url, "migrate", "telemetry", "0006", "--no-input", "-v", "0")  # and back again
    with psycopg.connect(**params) as conn:
        assert conn.execute("SELECT relkind FROM pg_class WHERE relname = 'telemetry_step'").fetchone() == ("r",)
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname = 'telemetry_stepchunk'").fetchone() == (0,)
        assert conn.execute("SELECT count(*), sum(step) FROM telemetry_step").fetchone() == (2000, 4 * sum(range(500)))
        unpacked = "SELECT count(*) FROM telemetry_step WHERE dur_ns = 100000000 AND comm_ns IS NULL AND flops IS NULL"
        assert conn.execute(unpacked).fetchone() == (2000,)
        assert conn.execute("SELECT device, t_ns, gpu_util_pct, rss_bytes FROM telemetry_systemsample").fetchall() == [
            (0, 1, 50.0, None)
        ]


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
    assert RunArchive.objects.get(run_id=run_id).pruned_at is not None and rawrows.steps(run_id) == []
    assert steps_arrays(run_id=uuid.UUID(run_id), rank=0)["step"].tolist() == list(range(30))  # from the archive


def test_rows_a_bulk_load_wrote_without_their_week_leave_with_the_week(owner: Tenant, settings: Any, tmp_path: Path) -> None:
    """Chunks written straight to the table without a run_week (a bulk loader's, storage.chunk_rows
    with no week) land in the legacy partition: read with the run's other rows, archived with
    them, and deleted when its week is dropped."""
    from phantomhub.telemetry.models import RunStatus
    from phantomhub.telemetry.retention import storage_maintain
    from phantomhub.telemetry.services import _steps_checked
    from phantomhub.telemetry.storage import CHUNK_COLUMNS, STEPS, chunk_rows

    settings.ARCHIVE_URL = str(tmp_path)
    run = Run.objects.get(pk=owner.create_run())
    owner.post_steps(str(run.pk), steps_body(10, rank=0))
    batch = _steps_checked(run, steps_body(10, rank=1)["steps"])
    row = chunk_rows(STEPS, run.pk, 1, 0, batch, None)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO telemetry_stepchunk ({', '.join(CHUNK_COLUMNS)}) VALUES ({', '.join(['%s'] * len(row))})", row
        )
    # A loader leaves the rank's marks at what it wrote (storage.chunk_rows says why).
    RunRank.objects.create(run=run, rank=1, step_rows=10, last_step=9, chunk_seq=2)
    assert _count("telemetry_stepchunk_legacy") == 10
    assert _count(partition_name("telemetry_stepchunk", run.storage_week)) == 10  # rank 0's, through ingest
    assert steps_arrays(run_id=run.pk, rank=1)["step"].tolist() == list(range(10))
    ended = timezone.now()
    Run.objects.filter(pk=run.pk).update(status=RunStatus.FINISHED, finished_at=ended, last_seen_at=ended)
    result = storage_maintain(now=ended + timedelta(days=31))
    assert partition_name("telemetry_stepchunk", run.storage_week) in result.partitions_dropped
    assert _count("telemetry_stepchunk_legacy") == 0 and rawrows.steps(run.pk) == []
    assert steps_arrays(run_id=run.pk, rank=1)["step"].tolist() == list(range(10))  # from the archive
    assert steps_arrays(run_id=run.pk, rank=0)["step"].tolist() == list(range(10))

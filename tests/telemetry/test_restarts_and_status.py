"""Restarts and status: step numbers reused by a restarted process are counted (never confused
with replays), ranks report their last stored step, registration is an upsert, and a run's status
only moves the way its ranks and its telemetry say."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from phantomhub.telemetry.models import Run, RunRank, RunStatus
from phantomhub.waste.sweeps import runs_mark_crashed
from tests import rawrows
from tests.conftest import T0_NS, Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]

HOUR_NS = 3600 * 10**9


def restarted(n: int, *, first: int = 0, rank: int = 0) -> dict[str, Any]:
    """The same step numbers as steps_body, an hour later: a process that numbered from 0 again."""
    body = steps_body(n, first=first, rank=rank)
    body["steps"]["t_start_ns"] = [t + HOUR_NS for t in body["steps"]["t_start_ns"]]
    return body


def register(tenant: Tenant, run_id: str, **fields: Any) -> Any:
    return tenant.client.post("/api/v1/runs", {"id": run_id, "name": "r", **fields}, format="json")


def post_events(tenant: Tenant, run_id: str, *events: dict[str, Any]) -> Any:
    response = tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": list(events)}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def finish_event(rank: int, status: str, t_ns: int = T0_NS + 10 * 10**9) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "kind": "finish", "rank": rank, "t_ns": t_ns, "status": status}


def mark_silent_runs_crashed() -> int:
    return runs_mark_crashed(now=timezone.now() + timedelta(days=1))


# -- reused step numbers -----------------------------------------------------------------------


def test_a_reused_step_number_is_refused_and_counted_apart_from_a_replay(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(10)).json() == {"accepted": 10, "duplicates": 0, "reused_step": 0}
    # a restart numbering from 0 again: steps 0-9 are taken (refused, counted), 10-14 are new
    response = owner.post_steps(run_id, restarted(15))
    assert response.json() == {"accepted": 5, "duplicates": 0, "reused_step": 10}
    # a replay of the first batch is a true duplicate, not a reuse
    assert owner.post_steps(run_id, steps_body(10)).json() == {"accepted": 0, "duplicates": 10, "reused_step": 0}
    rank = RunRank.objects.get(run_id=run_id, rank=0)
    assert rank.reused_step_rows == 10 and rank.step_rows == 15
    stored = dict(rawrows.values(rawrows.steps(run_id), "step", "t_start_ns"))
    assert sorted(stored) == list(range(15))  # each step number once: the reused ones were not stored again
    assert stored[3] == T0_NS + 3 * 100_000_000  # the first write of a step number wins
    assert stored[12] == T0_NS + 12 * 100_000_000 + HOUR_NS


def test_reused_rows_are_counted_per_rank(owner: Tenant) -> None:
    run_id = owner.create_run()
    for rank in (0, 1):
        owner.post_steps(run_id, steps_body(4, rank=rank))
    assert owner.post_steps(run_id, restarted(4, rank=1)).json()["reused_step"] == 4
    counts = dict(RunRank.objects.filter(run_id=run_id).values_list("rank", "reused_step_rows"))
    assert counts == {0: 0, 1: 4}


def test_a_refused_batch_counts_no_reused_rows(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(4))
    bad = restarted(4)
    bad["steps"]["dur_ns"][2] = -1
    assert owner.post_steps(run_id, bad).status_code == 400
    assert RunRank.objects.get(run_id=run_id, rank=0).reused_step_rows == 0


# -- the last stored step, for a restarted agent -------------------------------------------------


def test_registration_answers_each_ranks_last_stored_step(owner: Tenant) -> None:
    run_id = str(uuid.uuid4())
    assert register(owner, run_id).json()["ranks"] == []
    owner.post_steps(run_id, steps_body(30))
    owner.post_steps(run_id, steps_body(5, rank=1, first=100))
    owner.post_steps(run_id, steps_body(10))  # a replay lowers nothing
    ranks = register(owner, run_id).json()["ranks"]
    assert [(r["rank"], r["last_step"], r["reused_step_rows"]) for r in ranks] == [(0, 29, 0), (1, 104, 0)]


def test_samples_leave_the_last_step_alone(owner: Tenant) -> None:
    run_id = owner.create_run()
    samples = {"rank": 2, "samples": {"t_ns": [T0_NS]}}
    assert owner.client.post(f"/api/v1/runs/{run_id}/samples", samples, format="json").status_code == 200
    assert RunRank.objects.get(run_id=run_id, rank=2).last_step is None
    owner.post_steps(run_id, steps_body(3, rank=2))
    owner.client.post(f"/api/v1/runs/{run_id}/samples", {"rank": 2, "samples": {"t_ns": [T0_NS + 1]}}, format="json")
    assert RunRank.objects.get(run_id=run_id, rank=2).last_step == 2


def test_the_migration_backfills_the_last_step_of_stored_ranks(owner: Tenant) -> None:
    """Migration 0004 ran on the row table of its time (telemetry_step, a row per step; packed
    into chunks and dropped by 0009, whose marks test_migration_packed_chunks.py checks): here a
    stand-in of that table's key columns, so that its backfill is checked on what it reads."""
    from importlib import import_module

    from phantomhub.telemetry.storage import run_param

    migration = import_module("phantomhub.telemetry.migrations.0004_runrank_last_step_reused_step_rows")
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(7))
    owner.post_steps(run_id, steps_body(3, rank=1))
    run = run_param(uuid.UUID(run_id))
    uuid_type = "uuid" if connection.vendor == "postgresql" else "char(32)"
    with connection.cursor() as cursor:  # temporary, and undone with the test's transaction in any case
        cursor.execute(
            f"CREATE TEMPORARY TABLE telemetry_step (run_id {uuid_type} NOT NULL, rank integer NOT NULL, step bigint NOT NULL)"
        )
        for row in rawrows.steps(run_id):
            cursor.execute("INSERT INTO telemetry_step (run_id, rank, step) VALUES (%s, %s, %s)", [run, row["rank"], row["step"]])
    RunRank.objects.filter(run_id=run_id).update(last_step=None)
    RunRank.objects.filter(run_id=run_id, rank=1).update(step_rows=0)  # a rank that counted no rows: left alone
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL_LAST_STEP)
        cursor.execute("DROP TABLE telemetry_step")
    assert dict(RunRank.objects.filter(run_id=run_id).values_list("rank", "last_step")) == {0: 6, 1: None}


# -- registration is an upsert -------------------------------------------------------------------


def register_at_once(tenant: Tenant, run_id: str, ranks: int) -> list[int]:
    """Every rank posts the registration at the same moment; the status codes they got."""
    statuses: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(ranks)

    def post(rank: int) -> None:
        try:
            barrier.wait()
            statuses.append(register(tenant, run_id, world_size=ranks, environment={"rank": rank}).status_code)
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(rank,)) for rank in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return statuses


@pytest.mark.django_db(transaction=True)
def test_ranks_registering_one_new_run_at_once_get_one_201_and_the_rest_200(owner: Tenant) -> None:
    for _attempt in range(3):  # the race is timing-dependent: several rounds
        run_id = str(uuid.uuid4())
        assert sorted(register_at_once(owner, run_id, 8)) == [200] * 7 + [201]
        assert Run.objects.filter(pk=run_id).count() == 1


# Another project registering the same id gets a run of its own: tests/telemetry/test_run_ids.py.


# -- status integrity ----------------------------------------------------------------------------


def test_replaying_the_registration_does_not_reopen_a_finished_run(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(5))
    post_events(owner, run_id, finish_event(0, "finished"))
    finished_at = Run.objects.get(pk=run_id).finished_at
    response = register(owner, run_id)
    assert response.status_code == 200 and response.json()["status"] == "finished"
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.FINISHED and run.finished_at == finished_at
    assert mark_silent_runs_crashed() == 0  # and so it never turns "crashed" later
    assert Run.objects.get(pk=run_id).status == RunStatus.FINISHED


def test_a_run_marked_crashed_runs_again_when_its_steps_resume_and_ends_as_its_ranks_report(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(10))
    assert mark_silent_runs_crashed() == 1
    Run.objects.filter(pk=run_id).update(finished_at=timezone.now())  # what analysis of a crashed run sets
    assert register(owner, run_id).json()["status"] == "crashed"  # a registration is no telemetry
    owner.post_steps(run_id, steps_body(10, first=10))  # the outage is over
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.RUNNING and run.finished_at is None
    post_events(owner, run_id, finish_event(0, "finished", t_ns=T0_NS + 30 * 10**9))
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.FINISHED
    assert run.finished_at is not None and run.finished_at.timestamp() == (T0_NS + 30 * 10**9) / 1e9


def test_a_finish_reported_after_a_server_side_crash_mark_sets_the_status(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(10))
    mark_silent_runs_crashed()
    # the spool delivers the rest after the outage: events may come before the steps
    post_events(owner, run_id, finish_event(0, "finished"))
    assert Run.objects.get(pk=run_id).status == RunStatus.FINISHED
    owner.post_steps(run_id, steps_body(10, first=10))
    assert Run.objects.get(pk=run_id).status == RunStatus.FINISHED


def test_samples_resume_a_run_marked_crashed_but_a_replay_does_not(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(10))
    mark_silent_runs_crashed()
    owner.post_steps(run_id, steps_body(10))  # nothing new: no sign of life
    assert Run.objects.get(pk=run_id).status == RunStatus.CRASHED
    samples = {"rank": 0, "samples": {"t_ns": [T0_NS + 5 * 10**9]}}
    owner.client.post(f"/api/v1/runs/{run_id}/samples", samples, format="json")
    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_a_crash_its_ranks_reported_stands_when_more_telemetry_arrives(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(5))
    post_events(owner, run_id, finish_event(1, "crashed"))
    owner.post_steps(run_id, steps_body(5, first=5))
    post_events(owner, run_id, {"id": "p", "kind": "phase", "t_ns": T0_NS, "name": "eval", "t_start_ns": T0_NS, "dur_ns": 1})
    post_events(owner, run_id, finish_event(0, "finished"))
    assert Run.objects.get(pk=run_id).status == RunStatus.CRASHED

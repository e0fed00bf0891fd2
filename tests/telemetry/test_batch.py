"""The combined batch: one rank's steps, samples and events of an interval in one request.

Same checks, same idempotency and the same per-field 4xx as the separate endpoints, and all or
nothing: a bad part refuses the whole batch.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from phantomhub.telemetry.models import Run, RunEvent, RunRank, Step, SystemSample
from tests.conftest import T0_NS, Tenant, steps_body

pytestmark = [pytest.mark.django_db]


def batch(run_id: str, tenant: Tenant, body: Any) -> Any:
    return tenant.client.post(f"/api/v1/runs/{run_id}/batch", body, format="json")


def samples(n: int = 4) -> dict[str, Any]:
    return {"t_ns": [T0_NS + i * 10**9 for i in range(n)], "device": [0] * n, "gpu_util_pct": [90.0] * n}


def counters_event(**data: int) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "kind": "counters", "t_ns": T0_NS, "data": data}


def full_body(rank: int = 2) -> dict[str, Any]:
    return {**steps_body(20, rank=rank), "host": "node-0", "samples": samples(), "events": [counters_event(sent_batches=3)]}


@pytest.mark.backends
def test_one_batch_stores_every_part(owner: Tenant) -> None:
    run_id = owner.create_run()
    response = batch(run_id, owner, full_body())
    assert response.status_code == 200, response.content
    assert response.json() == {
        "steps": {"accepted": 20, "duplicates": 0, "reused_step": 0},
        "samples": {"accepted": 4, "duplicates": 0},
        "events": {"accepted": 1, "duplicates": 0},
    }
    assert Step.objects.filter(run_id=run_id, rank=2).count() == 20
    assert SystemSample.objects.filter(run_id=run_id, rank=2).count() == 4
    rank = RunRank.objects.get(run_id=run_id, rank=2)
    assert (rank.step_rows, rank.last_step, rank.host) == (20, 19, "node-0")
    assert rank.counters == {"sent_batches": 3}  # an event without a rank is the batch's rank's
    assert RunEvent.objects.get(run_id=run_id).rank == 2


def test_replayed_batch_changes_nothing(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = full_body()
    assert batch(run_id, owner, body).status_code == 200
    seq = Run.objects.get(pk=run_id).ingest_seq
    again = batch(run_id, owner, body)
    assert again.json() == {
        "steps": {"accepted": 0, "duplicates": 20, "reused_step": 0},
        "samples": {"accepted": 0, "duplicates": 4},
        "events": {"accepted": 0, "duplicates": 1},
    }
    assert Run.objects.get(pk=run_id).ingest_seq == seq  # nothing new: no new analysis
    assert RunRank.objects.get(run_id=run_id, rank=2).step_rows == 20  # counted once


def test_a_batch_may_hold_any_one_part(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert batch(run_id, owner, {"rank": 0, "samples": samples()}).json() == {"samples": {"accepted": 4, "duplicates": 0}}
    assert batch(run_id, owner, {"rank": 0, "events": [counters_event(a=1)]}).json() == {
        "events": {"accepted": 1, "duplicates": 0}
    }
    assert batch(run_id, owner, steps_body(3)).json() == {"steps": {"accepted": 3, "duplicates": 0, "reused_step": 0}}
    assert RunRank.objects.get(run_id=run_id, rank=0).step_rows == 3


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"steps": {"step": [0, 1], "t_start_ns": [T0_NS, T0_NS - 1]}}, "steps.t_start_ns"),
        ({"samples": {"t_ns": [T0_NS], "gpu_util_pct": [140.0]}}, "samples.gpu_util_pct[0]"),
        ({"events": [{"id": "x", "kind": "nonsense", "t_ns": T0_NS}]}, "events"),
        ({"rank": -1}, "rank"),
        ({"frames": []}, "frames"),
        ({"host": 7}, "host"),
        ({"counters": [1]}, "counters"),
        ({"counters": None}, "counters"),
        ({"counters": {"sent_batches": -1}}, "counters.sent_batches"),
        ({"counters": {"sent_batches": 1.5}}, "counters.sent_batches"),
        ({"counters": {f"c{i}": 1 for i in range(65)}}, "counters"),
    ],
)
def test_a_bad_part_refuses_the_whole_batch_naming_the_field(owner: Tenant, change: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    response = batch(run_id, owner, {**full_body(), **change})
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert any(name.startswith(field) for name in fields), fields
    assert not Step.objects.filter(run_id=run_id).exists()
    assert not SystemSample.objects.filter(run_id=run_id).exists()
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_an_empty_batch_is_refused(owner: Tenant) -> None:
    run_id = owner.create_run()
    response = batch(run_id, owner, {"rank": 0})
    assert response.status_code == 400 and "steps" in response.json()["error"]["fields"]


def test_a_batch_cannot_write_to_another_projects_run(owner: Tenant, outsider: Tenant) -> None:
    run_id = owner.create_run()
    assert batch(run_id, outsider, full_body()).status_code == 404
    assert not Step.objects.filter(run_id=run_id).exists()


@pytest.mark.backends
def test_batch_counters_merge_into_the_rank_without_an_event(owner: Tenant) -> None:
    """The counters field does what a counters event does to the rank (each counter keeps its
    highest value, across events and fields alike) and stores no event row."""
    run_id = owner.create_run()
    body = {**steps_body(5, rank=1), "counters": {"sent_batches": 4, "dropped_steps": 0}}
    assert batch(run_id, owner, body).json() == {"steps": {"accepted": 5, "duplicates": 0, "reused_step": 0}}
    assert RunRank.objects.get(run_id=run_id, rank=1).counters == {"sent_batches": 4, "dropped_steps": 0}
    # An older agent's counters event, then a field that is behind on one counter (a replayed batch).
    assert batch(run_id, owner, {"rank": 1, "events": [counters_event(sent_batches=6, spooled_batches=2)]}).status_code == 200
    assert batch(run_id, owner, {"rank": 1, "counters": {"sent_batches": 5, "dropped_steps": 3}}).status_code == 200
    rank = RunRank.objects.get(run_id=run_id, rank=1)
    assert rank.counters == {"sent_batches": 6, "dropped_steps": 3, "spooled_batches": 2}
    assert (rank.step_rows, rank.last_step) == (5, 4)  # the counters-only batch left the row counts alone
    assert RunEvent.objects.filter(run_id=run_id, kind="counters").count() == 1  # the event's; fields store none
    # A rank first seen through its counters gets its row.
    assert batch(run_id, owner, {"rank": 3, "counters": {"sent_batches": 1}}).status_code == 200
    assert RunRank.objects.get(run_id=run_id, rank=3).counters == {"sent_batches": 1}


@pytest.mark.backends
def test_batch_counters_beyond_the_ranks_limit_refuse_the_batch(owner: Tenant) -> None:
    from phantomhub.telemetry.bounds import MAX_COUNTERS, MAX_RANK_COUNTERS

    run_id = owner.create_run()
    names = [f"c{i}" for i in range(MAX_RANK_COUNTERS)]
    for lo in range(0, len(names), MAX_COUNTERS):
        assert batch(run_id, owner, {"rank": 0, "counters": dict.fromkeys(names[lo : lo + MAX_COUNTERS], 1)}).status_code == 200
    response = batch(run_id, owner, {**steps_body(2), "counters": {"one_more": 1}})
    assert response.status_code == 400 and "counters" in response.json()["error"]["fields"]
    assert not Step.objects.filter(run_id=run_id).exists()  # all or nothing
    assert len(RunRank.objects.get(run_id=run_id, rank=0).counters) == MAX_RANK_COUNTERS


def test_the_registration_answer_says_batches_may_carry_counters(owner: Tenant) -> None:
    run_id = owner.create_run()
    answer = owner.client.get(f"/api/v1/runs/{run_id}").json()
    assert answer["wire"] == {"packed_columns": True, "batch_counters": True}

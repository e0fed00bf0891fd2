"""The combined batch: one rank's steps, samples and events of an interval in one request.

Same checks, same idempotency and the same per-field 4xx as the separate endpoints, and all or
nothing: a bad part refuses the whole batch.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from phantomhub.telemetry.models import Run, RunEvent, RunRank
from tests import rawrows
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
    assert rawrows.values(rawrows.steps(run_id), "rank", "step") == [(2, step) for step in range(20)]
    assert rawrows.values(rawrows.samples(run_id), "rank", "device", "t_ns", "gpu_util_pct") == [
        (2, 0, T0_NS + i * 10**9, 90.0) for i in range(4)
    ]
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
    assert (len(rawrows.steps(run_id)), len(rawrows.samples(run_id))) == (20, 4)  # stored once


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
    assert rawrows.steps(run_id) == [] and rawrows.samples(run_id) == []
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_an_empty_batch_is_refused(owner: Tenant) -> None:
    run_id = owner.create_run()
    response = batch(run_id, owner, {"rank": 0})
    assert response.status_code == 400 and "steps" in response.json()["error"]["fields"]


def test_a_batch_cannot_write_to_another_projects_run(owner: Tenant, outsider: Tenant) -> None:
    run_id = owner.create_run()
    assert batch(run_id, outsider, full_body()).status_code == 404
    assert rawrows.steps() == [] and rawrows.samples() == []  # the outsider's run neither


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
def test_batch_counters_merge_like_a_running_maximum_per_counter(owner: Tenant) -> None:
    """Random fields and events over three ranks against a plain per-key maximum; values up to
    2**63 - 1 stay exact (PostgreSQL merges them in the upsert, SQLite in Python)."""
    import random

    rng = random.Random(11)
    run_id = owner.create_run()
    expected: dict[int, dict[str, int]] = {}
    big = 2**63 - 1
    for _ in range(40):
        rank = rng.randrange(3)
        data = {f"c{rng.randrange(6)}": rng.choice([0, 1, rng.randrange(10**6), big - rng.randrange(3), big]) for _ in range(3)}
        body: dict[str, Any] = {"rank": rank}
        if rng.random() < 0.3:
            body["events"] = [counters_event(**data)]
        else:
            body["counters"] = data
        assert batch(run_id, owner, body).status_code == 200
        kept = expected.setdefault(rank, {})
        for key, value in data.items():
            kept[key] = max(kept.get(key, 0), value)
    stored = {row.rank: row.counters for row in RunRank.objects.filter(run_id=run_id)}
    assert stored == expected


@pytest.mark.backends
def test_batch_counters_beyond_the_ranks_limit_refuse_the_batch(owner: Tenant) -> None:
    from phantomhub.telemetry.bounds import MAX_COUNTERS, MAX_RANK_COUNTERS

    run_id = owner.create_run()
    names = [f"c{i}" for i in range(MAX_RANK_COUNTERS)]
    for lo in range(0, len(names), MAX_COUNTERS):
        assert batch(run_id, owner, {"rank": 0, "counters": dict.fromkeys(names[lo : lo + MAX_COUNTERS], 1)}).status_code == 200
    response = batch(run_id, owner, {**steps_body(2), "counters": {"one_more": 1}})
    assert response.status_code == 400 and "counters" in response.json()["error"]["fields"]
    assert rawrows.steps(run_id) == []  # all or nothing
    assert len(RunRank.objects.get(run_id=run_id, rank=0).counters) == MAX_RANK_COUNTERS


def test_the_registration_answer_says_batches_may_carry_counters(owner: Tenant) -> None:
    run_id = owner.create_run()
    answer = owner.client.get(f"/api/v1/runs/{run_id}").json()
    assert answer["wire"] == {"packed_columns": True, "batch_counters": True, "packed_nulls": True, "node_batches": True}


@pytest.mark.backends
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stored_first", ["samples", "steps"])
def test_a_partly_stored_batch_stores_the_rest_and_counts_every_part_once(owner: Tenant, stored_first: str) -> None:
    """Outside any test transaction, as in production: the part already stored is recognised from
    the rank's marks and its stored chunks, the other part goes in whole, and every part is
    counted exactly once."""
    run_id = owner.create_run()
    body = {**full_body(), "counters": {"sender_cpu_us": 7}}
    first = {"rank": 2, stored_first: body[stored_first]}
    assert batch(run_id, owner, first).status_code == 200
    seq = Run.objects.get(pk=run_id).ingest_seq
    response = batch(run_id, owner, body)
    assert response.status_code == 200, response.content
    new_steps = 0 if stored_first == "steps" else 20
    new_samples = 0 if stored_first == "samples" else 4
    assert response.json() == {
        "steps": {"accepted": new_steps, "duplicates": 20 - new_steps, "reused_step": 0},
        "samples": {"accepted": new_samples, "duplicates": 4 - new_samples},
        "events": {"accepted": 1, "duplicates": 0},
    }
    assert rawrows.values(rawrows.steps(run_id), "rank", "step") == [(2, step) for step in range(20)]
    assert rawrows.values(rawrows.samples(run_id), "rank", "t_ns") == [(2, T0_NS + i * 10**9) for i in range(4)]
    assert RunEvent.objects.filter(run_id=run_id).count() == 1
    rank = RunRank.objects.get(run_id=run_id, rank=2)
    assert rank.step_rows == 20 and rank.counters == {"sent_batches": 3, "sender_cpu_us": 7}
    assert Run.objects.get(pk=run_id).ingest_seq == seq + 1
    assert (rank.last_step, rank.last_sample_ns) == (19, T0_NS + 3 * 10**9)  # the marks passed every stored key
    # The next batch goes in whole.
    assert batch(run_id, owner, steps_body(5, rank=2, first=20)).json()["steps"]["accepted"] == 5


@pytest.mark.backends
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("parts", ["steps", "samples", "events", "steps+samples+counters"])
def test_rows_for_a_run_gone_since_its_lookup_are_refused_whole(owner: Tenant, parts: str) -> None:
    """Raw rows have no foreign key on PostgreSQL: the batch's run update is their check. A run
    that disappears between the request's lookup and the write gets a 404 and keeps no row."""
    from django.db import connection

    from phantomhub.errors import ApiError
    from phantomhub.telemetry import services
    from phantomhub.telemetry.storage import run_param

    run_id = owner.create_run()
    run = Run.objects.get(pk=run_id)
    with connection.cursor() as cursor:  # gone behind the ORM's back, as a concurrent delete would be
        cursor.execute("DELETE FROM telemetry_run WHERE id = %s", [run_param(run.pk)])
    body = full_body()
    kwargs: dict[str, Any] = {}
    for part in parts.split("+"):
        kwargs[part] = body[part] if part != "counters" else {"sent_batches": 1}
    if "events" in kwargs:
        kwargs["events"] = [{"rank": 2, **event} for event in kwargs["events"]]
    with pytest.raises(ApiError) as caught:
        services.batch_ingest(run=run, rank=2, host="node-0", **kwargs)
    assert caught.value.status_code == 404
    assert rawrows.steps(run_id) == [] and rawrows.samples(run_id) == []
    assert not RunRank.objects.filter(run_id=run_id).exists()
    assert not RunEvent.objects.filter(run_id=run_id).exists()

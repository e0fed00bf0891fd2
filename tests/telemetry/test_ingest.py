"""The ingest contract: exact storage, idempotency, and a clear 4xx for every bad input."""

from __future__ import annotations

import gzip
import json
import threading
import uuid
from typing import Any

import pytest
from django.db import connection, connections
from django.test import override_settings

from phantomhub.telemetry.models import Run, RunEvent, RunRank
from tests import rawrows
from tests.conftest import T0_NS, Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def read_steps(tenant: Tenant, run_id: str, **params: Any) -> dict[str, Any]:
    response = tenant.client.get(f"/api/v1/runs/{run_id}/steps", params)
    assert response.status_code == 200, response.content
    return response.json()


def test_create_then_resume_a_run(owner: Tenant) -> None:
    run_id = str(uuid.uuid4())
    body = {"id": run_id, "name": "exp-42", "gpu_model": "H100-SXM", "gpu_count": 8, "tags": ["baseline"]}
    first = owner.client.post("/api/v1/runs", body, format="json")
    assert first.status_code == 201
    assert first.json()["status"] == "running" and first.json()["team"] == "nlp"
    again = owner.client.post("/api/v1/runs", {**body, "world_size": 8}, format="json")
    assert again.status_code == 200
    assert again.json()["world_size"] == 8 and again.json()["gpu_count"] == 8
    assert Run.objects.count() == 1


def test_a_batch_is_stored_exactly_and_read_back(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = steps_body(25, rank=3)
    response = owner.post_steps(run_id, body)
    assert response.status_code == 200
    assert response.json() == {"accepted": 25, "duplicates": 0, "reused_step": 0}
    page = read_steps(owner, run_id, rank=3, limit=10_000)
    for name, values in body["steps"].items():
        assert page["steps"][name] == values, name
    assert page["next"] is None


def test_replayed_batch_changes_nothing(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(50)).json() == {"accepted": 50, "duplicates": 0, "reused_step": 0}
    seq = Run.objects.get(pk=run_id).ingest_seq
    changed = steps_body(50, dur_ns=[1] * 50)  # same keys, other values: the first write wins
    assert owner.post_steps(run_id, changed).json() == {"accepted": 0, "duplicates": 50, "reused_step": 0}
    assert len(rawrows.steps(run_id)) == 50
    assert {row["dur_ns"] for row in rawrows.steps(run_id)} == {100_000_000}
    assert Run.objects.get(pk=run_id).ingest_seq == seq  # nothing new: analysis is not re-triggered
    assert RunRank.objects.get(run_id=run_id, rank=0).step_rows == 50  # counted once


def test_overlapping_batch_stores_only_new_rows(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(10))
    assert owner.post_steps(run_id, steps_body(10, first=5)).json() == {"accepted": 5, "duplicates": 5, "reused_step": 0}
    assert read_steps(owner, run_id, rank=0)["steps"]["step"] == list(range(15))


def test_same_step_numbers_on_other_ranks_are_distinct_rows(owner: Tenant) -> None:
    run_id = owner.create_run()
    for rank in range(3):
        assert owner.post_steps(run_id, steps_body(10, rank=rank)).json()["accepted"] == 10
    page = read_steps(owner, run_id, limit=10_000)
    assert page["steps"]["rank"] == [r for r in range(3) for _ in range(10)]
    assert set(RunRank.objects.filter(run_id=run_id).values_list("rank", flat=True)) == {0, 1, 2}


def test_reading_pages_through_all_ranks(owner: Tenant) -> None:
    run_id = owner.create_run()
    for rank in range(2):
        owner.post_steps(run_id, steps_body(7, rank=rank))
    seen: list[tuple[int, int]] = []
    params: dict[str, Any] = {"limit": 4}
    while True:
        page = read_steps(owner, run_id, **params)
        seen += list(zip(page["steps"]["rank"], page["steps"]["step"]))
        if page["next"] is None:
            break
        params = {"limit": 4, **page["next"]}
    assert seen == [(r, s) for r in range(2) for s in range(7)]


def test_optional_columns_may_be_absent_or_hold_nulls(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = {"rank": 0, "steps": {"step": [0, 1], "t_start_ns": [T0_NS, T0_NS + 5], "comm_ns": [None, 7]}}
    assert owner.post_steps(run_id, body).json() == {"accepted": 2, "duplicates": 0, "reused_step": 0}
    page = read_steps(owner, run_id, rank=0)
    assert page["steps"]["comm_ns"] == [None, 7]
    assert page["steps"]["dur_ns"] == [None, None]


def test_gzip_bodies_are_accepted(owner: Tenant) -> None:
    run_id = owner.create_run()
    raw = gzip.compress(json.dumps(steps_body(100)).encode())
    response = owner.client.post(
        f"/api/v1/runs/{run_id}/steps", raw, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.json() == {"accepted": 100, "duplicates": 0, "reused_step": 0}


def test_unsorted_batches_are_stored_in_order(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = steps_body(3)
    for column in body["steps"].values():
        column.reverse()
    assert owner.post_steps(run_id, body).json()["accepted"] == 3
    page = read_steps(owner, run_id, rank=0)
    assert page["steps"]["step"] == [0, 1, 2]
    assert page["steps"]["t_start_ns"] == sorted(page["steps"]["t_start_ns"])


@pytest.mark.django_db(transaction=True)
def test_the_same_batch_twice_at_once_is_stored_once(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = steps_body(2000)
    results: list[dict[str, int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def post() -> None:
        try:
            barrier.wait()
            response = owner.post_steps(run_id, body)
            assert response.status_code == 200, response.content
            results.append(response.json())
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sorted(r["accepted"] for r in results) == [0, 0, 0, 2000]
    assert all(r["accepted"] + r["duplicates"] == 2000 and r["reused_step"] == 0 for r in results)
    assert len(rawrows.steps(run_id)) == 2000
    assert RunRank.objects.get(run_id=run_id, rank=0).step_rows == 2000


def _broken(**columns: Any) -> dict[str, Any]:
    return steps_body(4, **columns)


def _without(name: str) -> dict[str, Any]:
    body = steps_body(4)
    del body["steps"][name]
    return body


BAD_BATCHES = [
    ("unequal lengths", _broken(dur_ns=[1, 2, 3]), "steps"),
    ("a string among numbers", _broken(data_ns=[1, "2", 3, 4]), "steps.data_ns"),
    ("a float in an integer column", _broken(forward_ns=[1.5, 2, 3, 4]), "steps.forward_ns"),
    ("a boolean", _broken(samples=[True, 1, 1, 1]), "steps.samples"),
    ("a negative duration", _broken(backward_ns=[1, -5, 3, 4]), "steps.backward_ns[1]"),
    ("an absurd duration", _broken(dur_ns=[1, 2, 3, 10**16]), "steps.dur_ns[3]"),
    ("a timestamp in seconds", _broken(t_start_ns=[1_790_000_000 + i for i in range(4)]), "steps.t_start_ns[0]"),
    ("NaN", _broken(flops=[1.0, float("nan"), 1.0, 1.0]), "steps.flops"),
    ("Infinity", _broken(flops=[1.0, float("inf"), 1.0, 1.0]), "steps.flops"),
    ("a step twice in one batch", _broken(step=[0, 1, 1, 2]), "steps.step"),
    ("start times that fall as steps rise", _broken(step=[0, 1, 3, 2]), "steps.t_start_ns"),
    ("an unknown column", _broken(gpu_temp=[1, 2, 3, 4]), "steps.gpu_temp"),
    ("no step column", _without("step"), "steps.step"),
    ("no t_start_ns column", _without("t_start_ns"), "steps.t_start_ns"),
    ("a null step", _broken(step=[0, None, 2, 3]), "steps.step"),
    ("an integer beyond 64 bits", _broken(tokens=[2**70, 1, 1, 1]), "steps.tokens"),
    ("a nested array", _broken(tokens=[[1], [1], [1], [1]]), "steps.tokens"),
    ("a column that is no array", _broken(tokens=5), "steps.tokens"),
    ("an empty batch", {"rank": 0, "steps": {"step": [], "t_start_ns": []}}, "steps.step"),
    ("steps that are no object", {"rank": 0, "steps": [1, 2]}, "steps"),
    ("a negative rank", {**steps_body(4), "rank": -1}, "rank"),
    ("a string rank", {**steps_body(4), "rank": "0"}, "rank"),
    ("no rank", {"steps": steps_body(4)["steps"]}, "rank"),
    ("an unknown field", {**steps_body(4), "extra": 1}, "extra"),
    ("a host that is no string", {**steps_body(4), "host": 7}, "host"),
    ("a body that is no object", [1, 2, 3], "body"),
]


@pytest.mark.parametrize(("case", "body", "field"), BAD_BATCHES, ids=[c[0] for c in BAD_BATCHES])
def test_bad_batches_get_a_400_naming_the_field_and_store_nothing(owner: Tenant, case: str, body: Any, field: str) -> None:
    run_id = owner.create_run()
    if case in ("NaN", "Infinity"):  # not expressible by the JSON encoder of the test client
        raw = json.dumps(body).encode()
        response = owner.client.post(f"/api/v1/runs/{run_id}/steps", raw, content_type="application/json")
    else:
        response = owner.post_steps(run_id, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "fields"}
    assert field in error["fields"], error
    assert field.split("[")[0] in error["message"]
    assert rawrows.steps(run_id) == []
    assert Run.objects.get(pk=run_id).ingest_seq == 0


def test_too_many_rows_get_a_400(owner: Tenant) -> None:
    run_id = owner.create_run()
    with override_settings(MAX_BATCH_ROWS=100):
        response = owner.post_steps(run_id, steps_body(101))
    assert response.status_code == 400
    assert "over the limit of 100" in response.json()["error"]["message"]


def test_a_body_over_the_cap_gets_413(owner: Tenant) -> None:
    run_id = owner.create_run()
    with override_settings(MAX_BODY_BYTES=10_000):
        response = owner.post_steps(run_id, steps_body(1000))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert rawrows.steps() == []


def test_a_gzip_body_that_inflates_past_the_cap_gets_413(owner: Tenant) -> None:
    run_id = owner.create_run()
    bomb = gzip.compress(b'{"rank": 0, "steps": {"step": [' + b"0," * 5_000_000 + b"0]}}")
    assert len(bomb) < 100_000
    with override_settings(MAX_INFLATED_BYTES=1_000_000):
        response = owner.client.post(
            f"/api/v1/runs/{run_id}/steps", bomb, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
        )
    assert response.status_code == 413
    assert "inflated" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("raw", "encoding", "status", "field"),
    [
        (b"{not json", None, 400, "body"),
        (b"\x1f\x8b garbage", "gzip", 400, "body"),
        (b"{}", "br", 415, None),
    ],
    ids=["invalid json", "invalid gzip", "unsupported encoding"],
)
def test_undecodable_bodies_get_a_clear_4xx(
    owner: Tenant, raw: bytes, encoding: str | None, status: int, field: str | None
) -> None:
    run_id = owner.create_run()
    extra = {"HTTP_CONTENT_ENCODING": encoding} if encoding else {}
    response = owner.client.post(f"/api/v1/runs/{run_id}/steps", raw, content_type="application/json", **extra)
    assert response.status_code == status
    if field:
        assert field in response.json()["error"]["fields"]


def test_posting_to_an_unknown_run_gets_404(owner: Tenant) -> None:
    response = owner.post_steps(str(uuid.uuid4()), steps_body())
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x"}, "id"),
        ({"id": "not-a-uuid"}, "id"),
        ({"id": str(uuid.uuid4()), "gpu_count": 0}, "gpu_count"),
        ({"id": str(uuid.uuid4()), "pricing_tier": "cheap"}, "pricing_tier"),
        ({"id": str(uuid.uuid4()), "tags": "a,b"}, "tags"),
        ({"id": str(uuid.uuid4()), "colour": "red"}, "colour"),
        ({"id": str(uuid.uuid4()), "started_at": "yesterday"}, "started_at"),
        (
            {"id": str(uuid.uuid4()), "started_at": "2026-01-01T00:00:00Z", "allocation_start": "2026-01-02T00:00:00Z"},
            "allocation_start",
        ),
    ],
)
def test_bad_run_bodies_get_a_400_naming_the_field(owner: Tenant, body: dict[str, Any], field: str) -> None:
    response = owner.client.post("/api/v1/runs", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert Run.objects.count() == 0


def test_samples_are_stored_once_per_device_and_time(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = {
        "rank": 0,
        "host": "node-a",
        "samples": {
            "t_ns": [T0_NS, T0_NS, T0_NS, T0_NS + 10**9],
            "device": [0, 1, None, 0],
            "gpu_util_pct": [97.0, 95.5, None, 12.0],
            "cpu_other_pct": [None, None, 35.0, None],
        },
    }
    url = f"/api/v1/runs/{run_id}/samples"
    assert owner.client.post(url, body, format="json").json() == {"accepted": 4, "duplicates": 0}
    assert owner.client.post(url, body, format="json").json() == {"accepted": 0, "duplicates": 4}
    (host_row,) = [row for row in rawrows.samples(run_id) if row["device"] == -1]
    assert host_row["cpu_other_pct"] == 35.0 and host_row["gpu_util_pct"] is None
    bad = {"rank": 0, "samples": {"t_ns": [T0_NS], "gpu_util_pct": [140.0]}}
    response = owner.client.post(url, bad, format="json")
    assert response.status_code == 400 and "samples.gpu_util_pct[0]" in response.json()["error"]["fields"]
    assert RunRank.objects.get(run_id=run_id, rank=0).host == "node-a"


def test_events_record_phases_finish_and_counters_once(owner: Tenant) -> None:
    run_id = owner.create_run()
    url = f"/api/v1/runs/{run_id}/events"
    events = [
        {"id": "p1", "kind": "phase", "t_ns": T0_NS + 9, "name": "eval", "t_start_ns": T0_NS, "dur_ns": 9},
        {"id": "c1", "kind": "counters", "t_ns": T0_NS, "rank": 1, "data": {"dropped_steps": 3}},
        {"id": "f0", "kind": "finish", "t_ns": T0_NS + 10**9, "rank": 0, "status": "finished"},
    ]
    assert owner.client.post(url, {"events": events}, format="json").json() == {"accepted": 3, "duplicates": 0}
    assert owner.client.post(url, {"events": events}, format="json").json() == {"accepted": 0, "duplicates": 3}
    run = Run.objects.get(pk=run_id)
    assert run.status == "finished" and run.finished_at is not None
    assert RunRank.objects.get(run_id=run_id, rank=1).counters == {"dropped_steps": 3}
    assert RunEvent.objects.filter(run_id=run_id).count() == 3
    # A later crash report on another rank makes the run's status the worse of the two.
    crash = {"id": "f1", "kind": "finish", "t_ns": T0_NS + 2 * 10**9, "rank": 1, "status": "crashed"}
    owner.client.post(url, {"events": [crash]}, format="json")
    assert Run.objects.get(pk=run_id).status == "crashed"


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"id": "x", "kind": "phase", "t_ns": T0_NS}, "events[0].name"),
        ({"id": "x", "kind": "finish", "t_ns": T0_NS}, "events[0].status"),
        ({"id": "x", "kind": "party", "t_ns": T0_NS}, "events[0].kind"),
        ({"id": "x", "kind": "oom", "t_ns": 5}, "events[0].t_ns"),
        ({"id": "x", "kind": "counters", "t_ns": T0_NS, "data": {"dropped": -1}}, "events[0].data.dropped"),
        ({"id": "x", "kind": "oom", "t_ns": T0_NS, "colour": 1}, "events[0].colour"),
    ],
)
def test_bad_events_get_a_400_and_store_nothing(owner: Tenant, event: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    good = {"id": "ok", "kind": "oom", "t_ns": T0_NS}
    response = owner.client.post(f"/api/v1/runs/{run_id}/events", {"events": [good, event]}, format="json")
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert field.replace("[0]", "[1]") in fields, fields
    assert RunEvent.objects.count() == 0


def test_the_backend_under_test_is_the_one_configured() -> None:
    from django.conf import settings

    assert connection.vendor == settings.TEST_BACKEND

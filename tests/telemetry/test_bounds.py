"""Bounds on every telemetry field: moments within 2000-01-01..2100-01-01 (and within the span the
analysis accepts), JSON documents capped in size and values, integers in range. Each refusal is
a 400 (or 413) naming the field, and nothing of the request is stored."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import uuid
from typing import Any

import pytest

from phantomhub.telemetry.bounds import INT64_MAX, MAX_JSON_BYTES, MAX_JSON_VALUES, MAX_RANK_COUNTERS
from phantomhub.telemetry.models import Run, RunEvent, RunRank
from tests import rawrows
from tests.conftest import T0_NS, Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]

DAY_NS = 86_400 * 10**9


def _post_raw(tenant: Tenant, path: str, raw: bytes, **extra: Any) -> Any:
    return tenant.client.post(path, raw, content_type="application/json", **extra)


def _refused(response: Any, field: str, status: int = 400) -> None:
    """Refused with `status`, naming `field` (or one of its items, as `steps.dur_ns[3]`)."""
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "fields"}
    assert any(name == field or name.startswith(f"{field}[") for name in error["fields"]), error
    assert field in error["message"]


# -- moments -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "moment",
    [
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00+05:00",  # before year 1 in UTC
        "1999-12-31T23:59:59Z",
        "2100-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:00:00-05:00",  # past year 9999 in UTC
    ],
)
@pytest.mark.parametrize("field", ["started_at", "allocation_start"])
def test_run_moments_outside_2000_to_2100_get_a_400_naming_the_field(owner: Tenant, field: str, moment: str) -> None:
    response = owner.client.post("/api/v1/runs", {"id": str(uuid.uuid4()), field: moment}, format="json")
    _refused(response, field)
    assert Run.objects.count() == 0


def test_the_first_and_last_moments_of_the_range_are_accepted(owner: Tenant) -> None:
    for start in ("2000-01-01T00:00:00Z", "2099-12-31T23:59:59Z"):
        body = {"id": str(uuid.uuid4()), "started_at": start, "allocation_start": start}
        assert owner.client.post("/api/v1/runs", body, format="json").status_code == 201


def test_an_allocation_longer_than_the_analysis_accepts_gets_a_400(owner: Tenant) -> None:
    body = {"id": str(uuid.uuid4()), "allocation_start": "2025-01-01T00:00:00Z", "started_at": "2026-06-01T00:00:00Z"}
    _refused(owner.client.post("/api/v1/runs", body, format="json"), "allocation_start")
    future = {"id": str(uuid.uuid4()), "allocation_start": "2099-01-01T00:00:00Z"}  # started_at: now
    _refused(owner.client.post("/api/v1/runs", future, format="json"), "allocation_start")
    assert Run.objects.count() == 0


def _run_allocated_at_t0(owner: Tenant) -> str:
    return owner.create_run(allocation_start="2026-09-21T00:00:00Z", started_at="2026-09-21T00:00:00Z")


def test_telemetry_beyond_the_analysable_span_of_its_run_gets_a_400_and_stores_nothing(owner: Tenant) -> None:
    run_id = _run_allocated_at_t0(owner)
    late = T0_NS + 401 * DAY_NS
    steps = steps_body(3)
    steps["steps"]["t_start_ns"][2] = late
    _refused(owner.post_steps(run_id, steps), "steps.t_start_ns")
    samples = {"rank": 0, "samples": {"t_ns": [T0_NS, late]}}
    _refused(owner.client.post(f"/api/v1/runs/{run_id}/samples", samples, format="json"), "samples.t_ns")
    events = [
        {"id": "ok", "kind": "oom", "t_ns": T0_NS},
        {"id": "f", "kind": "finish", "t_ns": late, "status": "finished"},
    ]
    _refused(owner.client.post(f"/api/v1/runs/{run_id}/events", {"events": events}, format="json"), "events[1].t_ns")
    assert rawrows.steps() == [] and rawrows.samples() == [] and not RunEvent.objects.exists()
    run = Run.objects.get(pk=run_id)
    assert run.finished_at is None and run.status == "running" and run.ingest_seq == 0
    assert owner.post_steps(run_id, steps_body(3, first=10)).status_code == 200  # within the span: stored
    assert [row["step"] for row in rawrows.steps(run_id)] == [10, 11, 12]


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"kind": "oom", "t_ns": 2**64}, "t_ns"),
        ({"kind": "finish", "t_ns": 4_102_444_800 * 10**9 + 1, "status": "finished"}, "t_ns"),  # after 2100
        ({"kind": "phase", "t_ns": T0_NS, "name": "eval", "t_start_ns": T0_NS, "dur_ns": -1}, "dur_ns"),
        (
            {"kind": "phase", "t_ns": T0_NS, "name": "eval", "t_start_ns": 4_102_444_800 * 10**9 - 5, "dur_ns": 10},
            "dur_ns",
        ),
        ({"kind": "oom", "t_ns": T0_NS, "rank": 2**63}, "rank"),
    ],
)
def test_event_times_and_numbers_out_of_range_get_a_400(owner: Tenant, event: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    body = {"events": [{"id": "ok", "kind": "oom", "t_ns": T0_NS}, {"id": "bad", **event}]}
    _refused(owner.client.post(f"/api/v1/runs/{run_id}/events", body, format="json"), f"events[1].{field}")
    assert not RunEvent.objects.exists()
    assert Run.objects.get(pk=run_id).finished_at is None


@pytest.mark.parametrize(
    ("column", "value"),
    [("step", 2**63), ("step", 2**64), ("step", -1), ("t_start_ns", 2**64), ("dur_ns", -1), ("comm_ns", 2**63)],
)
def test_step_values_beyond_their_range_get_a_400(owner: Tenant, column: str, value: int) -> None:
    run_id = owner.create_run()
    body = steps_body(3)
    body["steps"][column][1] = value
    response = _post_raw(owner, f"/api/v1/runs/{run_id}/steps", json.dumps(body).encode())
    _refused(response, f"steps.{column}")
    assert rawrows.steps() == []


# -- counters ------------------------------------------------------------------------------------


def _counters(run_id: str, data: dict[str, Any], event_id: str = "c") -> bytes:
    event = {"id": event_id, "kind": "counters", "t_ns": T0_NS, "rank": 1, "data": data}
    return json.dumps({"events": [{"id": "ok", "kind": "oom", "t_ns": T0_NS}, event]}).encode()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"dropped_steps": int("9" * 400)}, "events[1].data.dropped_steps"),
        ({"dropped_steps": INT64_MAX + 1}, "events[1].data.dropped_steps"),
        ({"dropped_steps": -1}, "events[1].data.dropped_steps"),
        ({"dropped_steps": 1.5}, "events[1].data.dropped_steps"),
        ({f"c{i}": 1 for i in range(65)}, "events[1].data"),
        ({"x" * 65: 1}, "events[1].data"),
    ],
    ids=["400 digits", "past int64", "negative", "a float", "too many", "a long name"],
)
def test_counters_out_of_range_get_a_400_and_store_nothing(owner: Tenant, data: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    response = _post_raw(owner, f"/api/v1/runs/{run_id}/events", _counters(run_id, data))
    _refused(response, field)
    assert not RunEvent.objects.exists() and not RunRank.objects.exists()


def test_the_largest_counter_is_kept_and_a_rank_keeps_a_bounded_number_of_names(owner: Tenant) -> None:
    run_id = owner.create_run()
    url = f"/api/v1/runs/{run_id}/events"
    assert _post_raw(owner, url, _counters(run_id, {"dropped_steps": INT64_MAX})).status_code == 200
    assert RunRank.objects.get(run_id=run_id, rank=1).counters == {"dropped_steps": INT64_MAX}
    names = [f"n{i}" for i in range(MAX_RANK_COUNTERS - 1)]  # with dropped_steps: the limit
    for lo in range(0, len(names), 64):
        event = {"id": f"n{lo}", "kind": "counters", "t_ns": T0_NS, "rank": 1, "data": dict.fromkeys(names[lo : lo + 64], 1)}
        assert owner.client.post(url, {"events": [event]}, format="json").status_code == 200
    assert len(RunRank.objects.get(run_id=run_id, rank=1).counters) == MAX_RANK_COUNTERS
    one_more = {"events": [{"id": "over", "kind": "counters", "t_ns": T0_NS, "rank": 1, "data": {"new": 1, "n2": 1}}]}
    _refused(owner.client.post(url, one_more, format="json"), "events[0].data")
    assert not RunEvent.objects.filter(event_id="over").exists()
    assert "new" not in RunRank.objects.get(run_id=run_id, rank=1).counters


# -- JSON documents ------------------------------------------------------------------------------


def _run_body(**fields: Any) -> bytes:
    return json.dumps({"id": str(uuid.uuid4()), **fields}).encode()


@pytest.mark.parametrize("field", ["config", "environment"])
@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"xs": [0] * MAX_JSON_VALUES}, ""),  # the list and its key: one value too many
        ({"notes": "x" * MAX_JSON_BYTES}, ""),
        ({"lr": float("nan")}, ".lr"),
        ({"opt": {"betas": [0.9, float("inf")]}}, ".opt.betas[1]"),
        ({"seed": int("9" * 400)}, ".seed"),
        ({"seed": -int("9" * 400)}, ".seed"),
        ([1, 2], ""),
    ],
    ids=["too many values", "too many bytes", "NaN", "Infinity", "400 digits", "-400 digits", "a list"],
)
def test_run_json_documents_over_their_bounds_get_a_400_naming_the_field(
    owner: Tenant, field: str, value: Any, path: str
) -> None:
    _refused(_post_raw(owner, "/api/v1/runs", _run_body(**{field: value})), field + path)
    assert Run.objects.count() == 0


def test_run_json_documents_at_their_bounds_are_stored(owner: Tenant) -> None:
    config = {"xs": [0] * (MAX_JSON_VALUES - 3), "seed": 2**64 - 1, "low": -(2**63)}  # 10,000 values, 64 bits
    environment = {"notes": "x" * (MAX_JSON_BYTES - 12)}  # {"notes":"…"} is 12 bytes more
    response = _post_raw(owner, "/api/v1/runs", _run_body(config=config, environment=environment))
    assert response.status_code == 201, response.content
    assert response.json()["config"]["seed"] == 2**64 - 1
    assert Run.objects.get().environment == environment


def test_tags_are_bounded(owner: Tenant) -> None:
    _refused(owner.client.post("/api/v1/runs", {"id": str(uuid.uuid4()), "tags": ["t"] * 65}, format="json"), "tags")
    _refused(owner.client.post("/api/v1/runs", {"id": str(uuid.uuid4()), "tags": ["t" * 65]}, format="json"), "tags[0]")
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"msg": "x" * MAX_JSON_BYTES}, "events[1].data"),
        ({"xs": list(range(MAX_JSON_VALUES + 1))}, "events[1].data"),
        ({"free": float("nan")}, "events[1].data.free"),
        ({"bytes": int("9" * 400)}, "events[1].data.bytes"),
    ],
    ids=["too many bytes", "too many values", "NaN", "400 digits"],
)
def test_event_data_over_its_bounds_gets_a_400(owner: Tenant, data: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    body = {"events": [{"id": "ok", "kind": "oom", "t_ns": T0_NS}, {"id": "bad", "kind": "oom", "t_ns": T0_NS, "data": data}]}
    _refused(_post_raw(owner, f"/api/v1/runs/{run_id}/events", json.dumps(body).encode()), field)
    assert not RunEvent.objects.exists()


def test_a_compressed_config_of_20m_values_is_refused_at_once_without_building_it(owner: Tenant) -> None:
    run_id = str(uuid.uuid4())
    raw = b'{"id": "' + run_id.encode() + b'", "config": {"x": [' + b"0," * 20_000_000 + b"0]}}"
    bomb = gzip.compress(raw)
    assert len(bomb) < 64_000
    tracemalloc.start()
    began = time.perf_counter()
    try:
        response = _post_raw(owner, "/api/v1/runs", bomb, HTTP_CONTENT_ENCODING="gzip")
        elapsed = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _refused(response, "body", status=413)
    assert elapsed < 1.0, elapsed
    assert peak < 16 * 2**20, peak  # a few MiB: the body is never inflated past the endpoint's cap
    assert not Run.objects.exists()


def test_an_uncompressed_config_of_millions_of_values_is_refused_too(owner: Tenant) -> None:
    raw = b'{"id": "' + str(uuid.uuid4()).encode() + b'", "config": {"x": [' + b"0," * 3_000_000 + b"0]}}"
    _refused(_post_raw(owner, "/api/v1/runs", raw), "body", status=413)
    events = b'{"events": [{"id": "a", "kind": "log", "t_ns": 1, "data": {"x": [' + b"0," * 3_000_000 + b"0]}}]}"
    run_id = owner.create_run()
    _refused(_post_raw(owner, f"/api/v1/runs/{run_id}/events", events), "body", status=413)
    assert Run.objects.count() == 1 and not RunEvent.objects.exists()


def test_step_batches_keep_the_global_body_limits(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = json.dumps({**steps_body(10_000), "host": "node-1"}).encode()
    assert len(body) > 1024 * 1024  # larger than a registration may be
    assert _post_raw(owner, f"/api/v1/runs/{run_id}/steps", body).json()["accepted"] == 10_000

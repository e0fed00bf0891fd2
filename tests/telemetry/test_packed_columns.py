"""Packed columns on ingest: {"i8" | "f8": base64 of little-endian values} stores exactly what the
same batch as arrays stores, and every malformed packed column is a 400 naming its field."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from tests.conftest import Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _i8(values: list[int]) -> dict[str, str]:
    return {"i8": base64.b64encode(np.asarray(values, dtype="<i8").tobytes()).decode()}


def _f8(values: list[float]) -> dict[str, str]:
    return {"f8": base64.b64encode(np.asarray(values, dtype="<f8").tobytes()).decode()}


def _packed(body: dict[str, Any]) -> dict[str, Any]:
    steps = dict(body["steps"])
    for name, values in steps.items():
        steps[name] = _f8(values) if name == "flops" else _i8(values)
    return {**body, "steps": steps}


def _read(tenant: Tenant, run_id: str) -> dict[str, Any]:
    response = tenant.client.get(f"/api/v1/runs/{run_id}/steps?limit=10000")
    assert response.status_code == 200
    return dict(response.json()["steps"])


def test_the_run_answer_says_the_server_takes_packed_columns(owner: Tenant) -> None:
    response = owner.client.post("/api/v1/runs", {"id": "6f1c2a52-4d0e-4d7e-9a0c-3a1f5e9b7c11"}, format="json")
    assert response.json()["wire"]["packed_columns"] is True


def test_a_packed_batch_stores_what_the_same_batch_as_arrays_stores(owner: Tenant) -> None:
    body = steps_body(300, flops=[1.5e15 + i for i in range(300)], tokens=[4096 + i for i in range(300)])
    plain, packed = owner.create_run(), owner.create_run()
    assert owner.post_steps(plain, body).json()["accepted"] == 300
    assert owner.post_steps(packed, _packed(body)).json()["accepted"] == 300
    assert _read(owner, packed) == _read(owner, plain)
    assert owner.post_steps(packed, _packed(body)).json() == {"accepted": 0, "duplicates": 300, "reused_step": 0}


def test_packed_and_array_columns_mix_in_one_batch_and_in_the_combined_wire(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = steps_body(20)
    body["steps"]["step"] = _i8(body["steps"]["step"])
    samples = {"t_ns": _i8([body["steps"]["t_start_ns"][0]]), "gpu_util_pct": _f8([87.5]), "device": [0]}
    response = owner.client.post(f"/api/v1/runs/{run_id}/batch", {**body, "samples": samples}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["steps"]["accepted"] == 20 and response.json()["samples"]["accepted"] == 1


@pytest.mark.parametrize(
    ("column", "value", "field", "words"),
    [
        ("step", {"f8": base64.b64encode(np.arange(10, dtype="<f8").tobytes()).decode()}, "steps.step", "integers"),
        ("dur_ns", {"i8": "not base64!"}, "steps.dur_ns", "base64"),
        ("dur_ns", {"i8": base64.b64encode(b"\x00" * 12).decode()}, "steps.dur_ns", "12 bytes"),
        ("dur_ns", {"i4": "AAAA"}, "steps.dur_ns", "packed column"),
        ("dur_ns", {"i8": "AAAAAAAAAAA=", "f8": ""}, "steps.dur_ns", "packed column"),
        ("dur_ns", _i8([1] * 9), "steps", "same length"),
        ("dur_ns", _i8([-5] * 10), "steps.dur_ns[0]", "out of range"),
        ("flops", _f8([float("nan")] * 10), "steps.flops", "finite"),
    ],
)
def test_a_malformed_packed_column_is_a_400_naming_it(owner: Tenant, column: str, value: Any, field: str, words: str) -> None:
    run_id = owner.create_run()
    body = steps_body(10)
    body["steps"][column] = value
    response = owner.post_steps(run_id, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"], error
    assert words in error["message"], error
    assert _read(owner, run_id)["step"] == []  # nothing of it kept

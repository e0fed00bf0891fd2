"""Packed columns with a null mask: {"i8" | "f8": base64 of values, "null": base64 of one byte a
row, 1 = null}. A masked column gives exactly what the same column as a JSON array with nulls
gives (values, nulls, key defaults, sort), whatever bytes lie under its null rows; the rows read
back from the database are the ones sent; and every malformed mask is a 400 naming its column."""

from __future__ import annotations

import base64
import random
from typing import Any

import numpy as np
import pytest

from phantomhub.telemetry.columns import (
    SAMPLE_COLUMNS,
    STEP_COLUMNS,
    Batch,
    Column,
    ColumnError,
    columns_validate,
    packed_length,
)
from tests.conftest import T0_NS, Tenant, steps_body
from tests.telemetry.test_copy_nulls import columns as sample_columns
from tests.telemetry.test_copy_nulls import expected, same, sample_rows, stored


def samples_validate(body: Any) -> Batch:
    """As POST .../samples and .../batch check samples (phantomhub.telemetry.services)."""
    return columns_validate(
        body, SAMPLE_COLUMNS, where="samples", keys=("device", "t_ns"), max_rows=50_000, key_defaults={"device": -1}
    )


def steps_validate(body: Any) -> Batch:
    return columns_validate(body, STEP_COLUMNS, where="steps", keys=("step",), max_rows=50_000, rising="t_start_ns")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def masked(values: list[Any], code: str, rng: random.Random, *, mask_always: bool = False) -> dict[str, str]:
    """``values`` packed as ``code`` with a null mask, written here with numpy (not the agent's
    encoder); under each null row lie random bytes (NaN, infinities, out-of-range integers)."""
    nulls = [v is None for v in values]
    raw = bytearray(np.asarray([0 if v is None else v for v in values], dtype="<i8" if code == "i8" else "<f8").tobytes())
    for i, null in enumerate(nulls):
        if null:
            raw[8 * i : 8 * i + 8] = rng.choice([rng.randbytes(8), np.array([np.nan]).tobytes(), np.array([-np.inf]).tobytes()])
    column = {code: b64(bytes(raw))}
    if any(nulls) or mask_always:
        column["null"] = b64(bytes(nulls))
    return column


def random_values(col: Column, n: int, rng: random.Random, null_share: float) -> tuple[list[Any], str]:
    """A column's values as an array would carry them, and the packed code that fits them."""
    lo, hi = max(col.lo, -1e6), min(col.hi, 2**50)
    ints = col.kind == "int" or rng.random() < 0.3  # a float column may hold only integers
    values: list[Any] = [
        None if rng.random() < null_share else (rng.randint(int(lo), int(hi)) if ints else round(rng.uniform(lo, hi), 3))
        for _ in range(n)
    ]
    return values, "i8" if ints else "f8"


def sample_arrays(n: int, rng: random.Random) -> tuple[dict[str, list[Any]], dict[str, str]]:
    arrays: dict[str, list[Any]] = {"t_ns": [T0_NS + i * 10**9 for i in range(n)]}
    codes = {"t_ns": "i8"}
    for col in SAMPLE_COLUMNS[1:]:
        if rng.random() < 0.1:
            continue  # an absent column: null throughout (device: the host)
        null_share = rng.choice([0.0, 0.2, 0.5, 0.9, 1.0])
        if col.name == "device":
            arrays["device"] = [None if rng.random() < null_share else rng.randrange(8) for _ in range(n)]
            codes["device"] = "i8"
        else:
            arrays[col.name], codes[col.name] = random_values(col, n, rng, null_share)
    order = list(range(n))
    rng.shuffle(order)  # the server sorts by (device, t_ns)
    return {name: [values[i] for i in order] for name, values in arrays.items()}, codes


def step_arrays(n: int, rng: random.Random) -> tuple[dict[str, list[Any]], dict[str, str]]:
    arrays: dict[str, list[Any]] = {"step": list(range(n)), "t_start_ns": [T0_NS + i * 10**8 for i in range(n)]}
    codes = {"step": "i8", "t_start_ns": "i8"}
    for col in STEP_COLUMNS[2:]:
        arrays[col.name], codes[col.name] = random_values(col, n, rng, rng.choice([0.0, 0.3, 1.0]))
    return arrays, codes


def packed_form(arrays: dict[str, list[Any]], codes: dict[str, str], rng: random.Random) -> dict[str, Any]:
    return {name: masked(values, codes[name], rng, mask_always=rng.random() < 0.3) for name, values in arrays.items()}


def assert_same_batch(got: Batch, want: Batch) -> None:
    assert got.n == want.n
    assert got.values.keys() == want.values.keys()
    for name, arr in want.values.items():
        assert got.values[name].dtype == arr.dtype, name
        assert np.array_equal(got.values[name], arr), name
    assert got.nulls.keys() == want.nulls.keys()
    for name, mask in want.nulls.items():
        assert np.array_equal(got.nulls[name], mask), name


@pytest.mark.parametrize("seed", range(40))
def test_masked_sample_columns_validate_to_the_batch_of_the_same_arrays(seed: int) -> None:
    rng = random.Random(seed)
    arrays, codes = sample_arrays(rng.randint(1, 400), rng)
    want = samples_validate(arrays)
    got = samples_validate(packed_form(arrays, codes, rng))
    assert_same_batch(got, want)


@pytest.mark.parametrize("seed", range(20))
def test_masked_step_columns_validate_to_the_batch_of_the_same_arrays(seed: int) -> None:
    rng = random.Random(1000 + seed)
    arrays, codes = step_arrays(rng.randint(1, 300), rng)
    want = steps_validate(arrays)
    got = steps_validate(packed_form(arrays, codes, rng))
    assert_same_batch(got, want)


def test_a_masked_column_counts_its_rows_and_a_host_row_takes_device_minus_one() -> None:
    rng = random.Random(3)
    column = masked([None, 2, None, 0], "i8", rng)
    assert packed_length(column) == 4
    assert packed_length({**column, "null": b64(bytes(3))}) is None  # the mask's length must match
    batch = samples_validate({"t_ns": [T0_NS + i for i in range(4)], "device": column})
    assert batch.values["device"].tolist() == [-1, -1, 0, 2]
    assert batch.nulls == {}


def test_a_mask_of_zeros_is_a_column_without_nulls() -> None:
    body = {"t_ns": [T0_NS, T0_NS + 1], "power_w": {"f8": b64(np.array([1.5, 2.5], "<f8").tobytes()), "null": b64(bytes(2))}}
    batch = samples_validate(body)
    assert batch.values["power_w"].tolist() == [1.5, 2.5] and batch.nulls == {}


def _post_batch(tenant: Tenant, run_id: str, body: dict[str, Any]) -> Any:
    return tenant.client.post(f"/api/v1/runs/{run_id}/batch", body, format="json")


def _read_steps(tenant: Tenant, run_id: str) -> dict[str, Any]:
    response = tenant.client.get(f"/api/v1/runs/{run_id}/steps?limit=10000")
    assert response.status_code == 200
    return dict(response.json()["steps"])


@pytest.mark.django_db
@pytest.mark.backends
@pytest.mark.parametrize("seed", [1, 2])
def test_masked_samples_through_the_api_are_stored_as_sent(owner: Tenant, seed: int) -> None:
    rng = random.Random(seed)
    rows = sample_rows(300, seed=seed)
    arrays = sample_columns(rows)
    codes = {name: "i8" if name in ("t_ns", "device", "gpu_mem_used_bytes", "rss_bytes") else "f8" for name in arrays}
    run_id = owner.create_run()
    response = _post_batch(owner, run_id, {"rank": 1, "host": "node-0", "samples": packed_form(arrays, codes, rng)})
    assert response.status_code == 200, response.content
    assert response.json()["samples"] == {"accepted": 300, "duplicates": 0}
    assert same(stored(run_id, 1), expected(rows))


@pytest.mark.django_db
@pytest.mark.backends
def test_masked_steps_through_the_api_read_back_as_the_same_arrays_do(owner: Tenant) -> None:
    rng = random.Random(9)
    arrays, codes = step_arrays(200, rng)
    plain, packed = owner.create_run(), owner.create_run()
    assert _post_batch(owner, plain, {"rank": 0, "steps": arrays}).status_code == 200
    response = _post_batch(owner, packed, {"rank": 0, "steps": packed_form(arrays, codes, rng)})
    assert response.status_code == 200, response.content
    assert response.json()["steps"]["accepted"] == 200
    read = _read_steps(owner, packed)
    assert read == _read_steps(owner, plain)
    assert read["comm_ns"] == arrays["comm_ns"]  # nulls where sent, not the bytes under them


def _samples_body(n: int = 6) -> dict[str, Any]:
    rng = random.Random(5)
    util = [None if i % 2 else 50.0 + i for i in range(n)]
    return {
        "rank": 0,
        "samples": {
            "t_ns": {"i8": b64(np.array([T0_NS + i * 10**9 for i in range(n)], "<i8").tobytes())},
            "device": masked([None if i % 2 else 0 for i in range(n)], "i8", rng),
            "gpu_util_pct": masked(util, "f8", rng),
        },
    }


def _with(column: str, change: Any) -> dict[str, Any]:
    body = _samples_body()
    body["samples"][column] = change(body["samples"][column])
    return body


BAD_MASKS = [
    ("short", lambda c: {**c, "null": b64(bytes(5))}, "samples.gpu_util_pct", '"null" has 5 bytes for 6 rows'),
    ("long", lambda c: {**c, "null": b64(bytes(9))}, "samples.gpu_util_pct", '"null" has 9 bytes for 6 rows'),
    ("byte 2", lambda c: {**c, "null": b64(bytes([0, 1, 2, 0, 1, 0]))}, "samples.gpu_util_pct", '"null" byte 2 is 2'),
    ("ascii", lambda c: {**c, "null": b64(b"010101")}, "samples.gpu_util_pct", "1 (null) or 0 (a value)"),
    ("not base64", lambda c: {**c, "null": "!!" + c["null"][2:]}, "samples.gpu_util_pct", '"null" is not valid base64'),
    ("not text", lambda c: {**c, "null": [0, 1, 0, 1, 0, 1]}, "samples.gpu_util_pct", '"null" must be base64 text'),
    ("json null", lambda c: {**c, "null": None}, "samples.gpu_util_pct", '"null" must be base64 text'),
    ("unknown key", lambda c: {"f8": c["f8"], "nulls": c["null"]}, "samples.gpu_util_pct", "unknown key 'nulls'"),
    ("extra key", lambda c: {**c, "mask": c["null"]}, "samples.gpu_util_pct", "unknown key 'mask'"),
    ("mask alone", lambda c: {"null": c["null"]}, "samples.gpu_util_pct", "a packed column is"),
    ("two codes", lambda c: {**c, "i8": c["f8"]}, "samples.gpu_util_pct", "a packed column is"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("case", "change", "field", "words"), BAD_MASKS, ids=[case[0] for case in BAD_MASKS])
def test_a_malformed_mask_is_a_400_naming_the_column(owner: Tenant, case: str, change: Any, field: str, words: str) -> None:
    run_id = owner.create_run()
    assert _post_batch(owner, run_id, _samples_body()).status_code == 200  # the body before the change is good
    response = _post_batch(owner, owner.create_run(), _with("gpu_util_pct", change))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"], error
    assert words in error["fields"][field], error


@pytest.mark.django_db
def test_a_required_column_must_not_mask_a_row_as_null(owner: Tenant) -> None:
    rng = random.Random(1)
    body = _samples_body()
    body["samples"]["t_ns"] = masked([T0_NS, None, T0_NS + 2, T0_NS + 3, T0_NS + 4, T0_NS + 5], "i8", rng)
    response = _post_batch(owner, owner.create_run(), body)
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"samples.t_ns": "must not contain null"}
    steps = steps_body(4)
    steps["steps"]["step"] = masked([0, 1, None, 3], "i8", rng)
    response = _post_batch(owner, owner.create_run(), steps)
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"steps.step": "must not contain null"}


def test_what_lies_under_a_null_row_is_never_checked_but_the_other_rows_are() -> None:
    n = 4
    values = np.array([50.0, np.nan, np.inf, 1e300], "<f8")
    body = {
        "t_ns": [T0_NS + i for i in range(n)],
        "gpu_util_pct": {"f8": b64(values.tobytes()), "null": b64(bytes([0, 1, 1, 1]))},
    }
    batch = samples_validate(body)
    assert batch.values["gpu_util_pct"].tolist() == [50.0, 0.0, 0.0, 0.0]
    assert batch.nulls["gpu_util_pct"].tolist() == [False, True, True, True]
    ints = np.array([-5, 2**62, 7, -(2**63)], "<i8")
    body = {"t_ns": [T0_NS + i for i in range(n)], "rss_bytes": {"i8": b64(ints.tobytes()), "null": b64(bytes([1, 1, 0, 1]))}}
    assert samples_validate(body).values["rss_bytes"].tolist() == [0, 0, 7, 0]
    body["rss_bytes"]["null"] = b64(bytes([0, 1, 0, 1]))
    with pytest.raises(ColumnError) as caught:
        samples_validate(body)
    assert caught.value.field == "samples.rss_bytes[0]" and "out of range" in caught.value.message
    body = {
        "t_ns": [T0_NS + i for i in range(n)],
        "gpu_util_pct": {"f8": b64(values.tobytes()), "null": b64(bytes([0, 0, 1, 1]))},
    }
    with pytest.raises(ColumnError, match="finite"):
        samples_validate(body)


def test_a_float_mask_in_an_integer_column_is_refused_as_an_array_of_floats_is() -> None:
    body = {"t_ns": [T0_NS, T0_NS + 1], "rss_bytes": {"f8": b64(np.array([1.0, 0.0], "<f8").tobytes()), "null": b64(b"\x00\x01")}}
    with pytest.raises(ColumnError, match="must be integers"):
        samples_validate(body)
    with pytest.raises(ColumnError, match="must be integers"):
        samples_validate({"t_ns": body["t_ns"], "rss_bytes": [1.0, None]})

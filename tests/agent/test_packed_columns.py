"""Packed columns: the agent packs step and sample columns only for a server that said it takes
them, and every packed column decodes to exactly the values it was made from."""

from __future__ import annotations

import base64
import json
import math
import sqlite3
import struct
import time
import uuid
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import phantomhub_agent as pa
from phantomhub_agent import _batcher as b
from tests import rawrows

from .conftest import FakeServer, LiveServer, Recorded, carries

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.lists(INT64, min_size=1, max_size=200))
def test_an_integer_column_packs_as_int64_and_comes_back_exact(values: list[int]) -> None:
    packed = b.pack_column(values)
    assert set(packed) == {"i8"}
    assert b.unpack_column(json.loads(json.dumps(packed))) == values


@given(st.lists(st.one_of(INT64, st.floats(allow_nan=False, allow_infinity=False)), min_size=1, max_size=200))
def test_a_column_of_numbers_packs_as_float64_when_any_is_a_float(values: list[Any]) -> None:
    packed = b.pack_column(values)
    if all(type(v) is int for v in values):
        assert set(packed) == {"i8"}
    else:
        assert set(packed) == {"f8"}
        assert b.unpack_column(packed) == [float(v) for v in values]


def test_columns_that_cannot_be_packed_stay_lists() -> None:
    for values in ([1, None, 3], [1.0, math.nan], [True, False], [2**64], ["a"], []):
        assert b.pack_column(values) is values


def _announcing_packed(req: Recorded, index: int) -> Any:
    if req.path.endswith("/runs"):
        return 201, {}, json.dumps({**req.body, "ranks": [], "wire": {"packed_columns": True}}).encode()
    return None


def _loop(run: pa.Run, n: int) -> None:
    for i in range(n):
        with run.step(step=i, tokens=10 + i), run.stage("forward"):
            pass


def test_a_server_that_takes_packed_columns_gets_them(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    fake_server.script = _announcing_packed
    agent_kwargs.update(system_interval_s=0.05)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    _loop(run, 40)
    run.finish()
    batches = [r.body for r in fake_server.requests if carries(r, "steps")]
    assert batches and all(isinstance(body["steps"]["step"], dict) for body in batches)
    steps = [s for body in batches for s in b.unpack_column(body["steps"]["step"])]
    tokens = [t for body in batches for t in b.unpack_column(body["steps"]["tokens"])]
    assert steps == list(range(40)) and tokens == [10 + i for i in range(40)]
    assert all(isinstance(b.unpack_column(c), list) for body in batches for c in body["steps"].values())


def test_a_server_that_did_not_say_so_gets_arrays(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    _loop(run, 40)
    run.finish()
    batches = [r.body for r in fake_server.requests if carries(r, "steps")]
    assert batches and all(isinstance(v, list) for body in batches for v in body["steps"].values())


def test_unpacking_a_batch_gives_the_arrays_an_older_server_takes() -> None:
    cols = {"step": [5, 6, 7], "t_start_ns": [10, 20, 30], "flops": [1.5, 2.0, 2.5], "comm_ns": [None, 1, 2]}
    payload = json.loads(b.encode_json({"rank": 0, "steps": b.pack_columns(cols), "events": [{"id": "x"}]}))
    assert isinstance(payload["steps"]["step"], dict) and payload["steps"]["comm_ns"] == [None, 1, 2]
    assert b.unpack_payload(payload) == {"rank": 0, "steps": cols, "events": [{"id": "x"}]}


# -- columns with nulls: packed with a null mask for a server that said wire.packed_nulls -----------

MAYBE_INT = st.one_of(INT64, st.none())
MAYBE_NUMBER = st.one_of(INT64, st.floats(), st.none())  # floats() includes NaN and infinities


def as_an_array_sends_it(values: list[Any]) -> list[Any]:
    """The column as the agent sends it in an array: NaN and infinities become null (encode_json)."""
    return json.loads(b.encode_json(values))


def decoded(column: dict[str, str]) -> list[Any]:
    """A packed column read with numpy (not unpack_column): values, None where the mask says so."""
    [code] = set(column) - {"null"}
    values = np.frombuffer(base64.b64decode(column[code]), dtype="<i8" if code == "i8" else "<f8").tolist()
    mask = base64.b64decode(column.get("null", "")) or bytes(len(values))
    assert set(mask) <= {0, 1} and len(mask) == len(values)
    return [None if null else v for v, null in zip(values, mask)]


@given(st.lists(MAYBE_INT, min_size=1, max_size=200))
def test_an_integer_column_with_nulls_packs_with_its_mask_and_comes_back_exact(values: list[int | None]) -> None:
    packed = b.pack_column(values, nulls=True)
    if None in values:
        assert set(packed) == {"i8", "null"}
        assert base64.b64decode(packed["null"]) == bytes(v is None for v in values)
    assert decoded(packed) == values
    assert b.unpack_column(json.loads(json.dumps(packed))) == values


@given(st.lists(MAYBE_NUMBER, min_size=1, max_size=200))
def test_a_column_of_numbers_and_nulls_comes_back_as_the_array_would_carry_it(values: list[Any]) -> None:
    packed = b.pack_column(values, nulls=True)
    sent = as_an_array_sends_it(values)
    assert isinstance(packed, dict)
    # int64 exactly when what an array would carry besides nulls is integers (the server's rule).
    assert ("i8" in packed) == all(type(v) is not float for v in sent)
    want = sent if "i8" in packed else [None if v is None else float(v) for v in sent]
    assert decoded(packed) == want
    assert b.unpack_column(json.loads(json.dumps(packed))) == want
    assert ("null" in packed) == (None in sent)


def test_without_the_servers_word_columns_with_nulls_stay_lists() -> None:
    for values in ([1, None, 3], [None, 2.5], [1.0, math.nan], [None, None]):
        assert b.pack_column(values) is values
        assert isinstance(b.pack_column(values, nulls=True), dict)
    for values in ([True, None], [2**64, None], ["a", None], [np.float32(1.5), None], []):
        assert b.pack_column(values, nulls=True) is values  # what cannot be packed stays a list, as before


def test_a_batch_packs_sample_nulls_only_for_a_server_that_takes_them() -> None:
    samples = {"t_ns": [1, 1, 2, 2], "device": [None, 0, None, 0], "gpu_util_pct": [None, 50.5, None, 61.0],
               "rss_bytes": [2**30, None, 2**31, None]}  # fmt: skip
    [(old, _, _)] = b.fit_batch({"samples": samples}, {"rank": 0}, 1 << 20, packed=True)
    [(new, _, _)] = b.fit_batch({"samples": samples}, {"rank": 0}, 1 << 20, packed=True, nulls=True)
    old_cols, new_cols = json.loads(old)["samples"], json.loads(new)["samples"]
    assert old_cols["device"] == [None, 0, None, 0] and old_cols["gpu_util_pct"] == [None, 50.5, None, 61.0]
    assert set(old_cols["t_ns"]) == {"i8"}
    assert all(set(new_cols[name]) == {"i8", "null"} for name in ("device", "rss_bytes"))
    assert set(new_cols["gpu_util_pct"]) == {"f8", "null"}
    assert b.unpack_payload(json.loads(new)) == {"rank": 0, "samples": samples} == b.unpack_payload(json.loads(old))


class StandinGpus:
    """NVML as a board answers it: two GPUs, one of which cannot tell its memory or its power."""

    def __init__(self) -> None:
        self.calls = 0

    def sample(self) -> list[tuple[int, float | None, int | None, int | None, float | None]]:
        self.calls += 1
        k = self.calls
        return [(0, 40.0 + k % 50, 1980, 60 * 2**30 + k, 312.25 + k), (1, float(k % 100), None, None, None)]


def _with_gpus(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """Stand-in GPUs for the system sampler; returns the rows it produces, as they are produced."""
    from phantomhub_agent import _system

    produced: list[list[Any]] = []
    sample = _system.SystemSampler.sample

    def recording(self: Any, t_ns: int) -> list[list[Any]]:
        rows = sample(self, t_ns)
        # Only this test's samplers: another test's worker still winding down in this process
        # samples through the same (patched) method, without the stand-in GPUs.
        if isinstance(self.gpu, StandinGpus):
            produced.extend(list(row) for row in rows)
        return rows

    monkeypatch.setattr(_system, "open_gpu_sampler", lambda devices: StandinGpus())
    monkeypatch.setattr(_system.SystemSampler, "sample", recording)
    return produced


def _announcing(**wire: bool) -> Any:
    def script(req: Recorded, index: int) -> Any:
        if req.path.endswith("/runs"):
            return 201, {}, json.dumps({**req.body, "ranks": [], "wire": wire}).encode()
        return None

    return script


def _unpacked_samples(part: dict[str, Any]) -> list[list[Any]]:
    """Every sample column of a request as a list (one the agent left out, as null throughout)."""
    rows = len(b.unpack_column(part["t_ns"]))
    return [b.unpack_column(part[name]) if name in part else [None] * rows for name in b.SAMPLE_COLUMNS]


def _sample_columns(server: FakeServer) -> list[dict[str, Any]]:
    return [r.body["samples"] for r in server.requests if carries(r, "samples")]


def _samples_sent(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **wire: bool
) -> tuple[Any, Any]:
    """A run with two stand-in GPUs against a server that announces ``wire``: (the sample rows
    the sampler produced, the sample parts the server received)."""
    produced = _with_gpus(monkeypatch)
    fake_server.script = _announcing(**wire)
    agent_kwargs.update(system_interval_s=0.05)
    run = pa.init(server=fake_server.url, token="t", gpu_devices=[0, 1], **agent_kwargs)
    _loop(run, 10)
    time.sleep(0.5)
    run.finish()
    return produced, _sample_columns(fake_server)


def test_a_server_that_takes_packed_nulls_gets_host_and_gpu_samples_masked(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    produced, parts = _samples_sent(fake_server, agent_kwargs, monkeypatch, packed_columns=True, packed_nulls=True)
    assert parts and all(set(part["gpu_util_pct"]) == {"f8", "null"} for part in parts)
    assert all(isinstance(column, dict) for part in parts for column in part.values())
    sent = [row for part in parts for row in zip(*_unpacked_samples(part))]
    assert sorted(map(list, sent), key=repr) == sorted(produced, key=repr)


def test_a_server_without_packed_nulls_gets_the_columns_with_nulls_as_arrays(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    produced, parts = _samples_sent(fake_server, agent_kwargs, monkeypatch, packed_columns=True)
    assert parts and produced
    for part in parts:
        assert set(part["t_ns"]) == {"i8"}  # no nulls: packed as before
        assert all(isinstance(part[name], list) for name in ("device", "gpu_util_pct", "cpu_process_pct", "rss_bytes"))
        assert not any(isinstance(column, dict) and "null" in column for column in part.values())


# A stored sample as the server packs it (tests/rawrows.py): device, t_ns, then the other columns
# in rawrows.SAMPLE_FIELDS's order, big-endian int64 / float64, a null as -1 / NaN.
SAMPLE_RECORD = struct.Struct(">qqddqddddq")


def _stored_samples(live: LiveServer, run_id: str, rank: int) -> list[list[Any]]:
    """The rank's samples in the server's SQLite file, decoded from its chunks (one per batch)
    here, not by the server: rows of the agent's columns (b.SAMPLE_COLUMNS), nulls as None."""
    with sqlite3.connect(live.workdir / "db.sqlite3") as db:
        chunks = db.execute(
            "SELECT n, payload FROM telemetry_samplechunk WHERE run_id = ? AND rank = ?", [uuid.UUID(run_id).hex, rank]
        ).fetchall()
    assert SAMPLE_RECORD.size == 8 * len(rawrows.SAMPLE_FIELDS)
    rows = []
    for n, payload in chunks:
        assert len(payload) == n * SAMPLE_RECORD.size
        for values in SAMPLE_RECORD.iter_unpack(payload):
            row = dict(zip(rawrows.SAMPLE_FIELDS, values, strict=True))
            for name, value in row.items():
                if name not in ("device", "t_ns") and (math.isnan(value) if isinstance(value, float) else value < 0):
                    row[name] = None
            rows.append([row[name] for name in b.SAMPLE_COLUMNS])
    return rows


@pytest.mark.live_server
def test_against_the_real_server_masked_samples_are_stored_exactly(
    live: LiveServer, agent_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    produced = _with_gpus(monkeypatch)
    agent_kwargs.update(system_interval_s=0.05, flush_interval_s=0.3)
    run = pa.init(project="agent", team="agent-tests", name="packed-nulls", server=live.url, token=live.token,
                  gpu_devices=[0, 1], **agent_kwargs)  # fmt: skip
    _loop(run, 10)
    time.sleep(0.6)
    worker = run._worker
    assert worker.registration.packed and worker.registration.packed_nulls  # the server said so
    run.finish()
    assert len(produced) >= 9 and any(row[2] is None for row in produced) and any(row[6] is None for row in produced)
    want = [[-1 if v is None and i == 1 else v for i, v in enumerate(row)] for row in produced]  # host rows: device -1
    assert sorted(_stored_samples(live, run.id, run.rank), key=repr) == sorted(want, key=repr)

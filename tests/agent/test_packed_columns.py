"""Packed columns: the agent packs step and sample columns only for a server that said it takes
them, and every packed column decodes to exactly the values it was made from."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import phantomhub_agent as pa
from phantomhub_agent import _batcher as b

from .conftest import FakeServer, Recorded, carries

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

"""The CUDA timing path with stand-in events (no GPU here): rows wait for their events, are
resolved off the training thread into the right columns, and nothing ever synchronizes.
scripts/agent_gpu_check.py runs the same path on a real GPU."""

from __future__ import annotations

import time
from typing import Any

import phantomhub_agent as pa
from phantomhub_agent._run import _CudaResolver

from .conftest import FakeServer

MS = 1_000_000


class FakeEvent:
    clock_ms = 0.0
    done = False

    def __init__(self) -> None:
        self.t: float | None = None

    def record(self) -> None:
        self.t = FakeEvent.clock_ms

    def query(self) -> bool:
        return FakeEvent.done

    def synchronize(self) -> None:
        raise AssertionError("the agent must never synchronize")

    def elapsed_time(self, end: FakeEvent) -> float:
        assert FakeEvent.done, "read before completion"
        assert self.t is not None and end.t is not None
        return end.t - self.t


class FakePool:
    def __init__(self) -> None:
        self.free: list[FakeEvent] = []
        self.created = 0

    def get(self) -> FakeEvent:
        if self.free:
            return self.free.pop()
        self.created += 1
        return FakeEvent()

    def put(self, event: FakeEvent) -> None:
        self.free.append(event)


def cuda_run(server: FakeServer, agent_kwargs: dict[str, Any]) -> tuple[pa.Run, FakePool]:
    run = pa.init(server=server.url, token="t", timing="cpu", **agent_kwargs)
    pool = FakePool()
    run._cuda = True
    run._cuda_pool = pool
    run._rec.cuda_pool = pool
    run._worker.cuda = _CudaResolver(pool)
    run._stages = {}
    return run, pool


def gpu_step(run: pa.Run, step: int, fwd_ms: float, bwd_ms: float) -> None:
    with run.step(step=step):
        with run.stage("forward"):
            FakeEvent.clock_ms += fwd_ms
        with run.stage("backward"):
            FakeEvent.clock_ms += bwd_ms


def test_rows_wait_for_their_events_then_carry_gpu_times(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    FakeEvent.done = False
    run, pool = cuda_run(fake_server, agent_kwargs)
    for i in range(5):
        gpu_step(run, i, fwd_ms=3.0, bwd_ms=7.0)
    time.sleep(0.6)  # several sender passes: the GPU has not finished, nothing may go out
    assert fake_server.of("/steps") == []
    FakeEvent.done = True
    run.finish()
    rows = [r.body["steps"] for r in fake_server.of("/steps")]
    forward = [v for r in rows for v in r["forward_ns"]]
    backward = [v for r in rows for v in r["backward_ns"]]
    assert forward == [3 * MS] * 5 and backward == [7 * MS] * 5
    assert len(pool.free) == pool.created  # every event went back to the pool for reuse


def test_exposed_comm_from_the_hook_events_is_moved_out_of_backward(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    FakeEvent.done = True
    run, pool = cuda_run(fake_server, agent_kwargs)

    class Comm:
        cuda = True

        def take_events(self) -> tuple[FakeEvent, FakeEvent]:
            ready, done = pool.get(), pool.get()
            ready.t, done.t = 0.0, 4.0  # 4 ms from the last bucket ready to the all-reduce done
            return ready, done

    run._rec.comm = Comm()
    gpu_step(run, 0, fwd_ms=2.0, bwd_ms=10.0)
    run.finish()
    [row] = [r.body["steps"] for r in fake_server.of("/steps")]
    assert row["comm_ns"] == [4 * MS]
    assert row["backward_ns"] == [6 * MS]

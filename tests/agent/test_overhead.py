"""The training-thread budget: a step with a data wait and three stages costs p50 <= 10 us and
p99 <= 50 us, whether the server is healthy, slow, or dead; memory stays bounded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import phantomhub_agent as pa
from bench.agent_overhead import timed_step
from phantomhub_agent._spool import decode_file

from .conftest import FakeServer, free_port

P50_BUDGET_NS = 10_000
P99_BUDGET_NS = 50_000


def items(n: int) -> Iterator[int]:
    yield from range(n)


def step_costs(run: pa.Run, n: int) -> list[int]:
    """Training-thread time of each step: data wait, step, forward/backward/optimizer, no work."""
    batches = run.data(items(n))
    costs = [timed_step(run, batches) for _ in range(n)]  # the step bench/agent_overhead.py times
    return sorted(costs[n // 10 :])  # without the warm-up


def percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def assert_within_budget(costs: list[int]) -> None:
    p50, p99 = percentile(costs, 0.5), percentile(costs, 0.99)
    assert p50 <= P50_BUDGET_NS, f"p50 {p50 / 1000:.1f} us"
    assert p99 <= P99_BUDGET_NS, f"p99 {p99 / 1000:.1f} us"


def test_step_cost_is_within_budget_with_a_healthy_server(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    assert_within_budget(step_costs(run, 20_000))
    run.finish()
    assert len([s for r in fake_server.of("/steps") for s in r.body["steps"]["step"]]) == 20_000


@pytest.mark.parametrize("server", ["slow", "dead"])
def test_a_slow_or_dead_server_does_not_change_step_cost(
    server: str, fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    if server == "slow":
        fake_server.delay_s = 2.0
        url = fake_server.url
    else:
        url = f"http://127.0.0.1:{free_port()}"
    run = pa.init(server=url, token="t", request_timeout_s=5.0, **agent_kwargs)
    assert_within_budget(step_costs(run, 20_000))
    run.finish(timeout=1.0)
    assert run.counters["dropped_steps"] == 0


def test_memory_stays_bounded_with_the_server_down(agent_kwargs: dict[str, Any]) -> None:
    """With the server down the sender spools: the in-memory queue never grows past its cap."""
    run = pa.init(server=f"http://127.0.0.1:{free_port()}", token="t", queue_max_steps=5000, **agent_kwargs)
    peak = 0
    for i in range(30):
        step_costs(run, 2_000)
        peak = max(peak, len(run._worker.steps))
        if i % 10 == 0:
            time.sleep(0.3)
    run.finish(timeout=2.0)
    assert peak <= 5000
    spooled_rows = sum(
        decode_file(path.read_bytes()).rows
        for path in (agent_kwargs["spool_dir"] / run.id).glob("*.phk")
        if decode_file(path.read_bytes()).kind in ("steps", "batch")
    )
    assert spooled_rows + run.counters["dropped_steps"] == 60_000  # every step is on disk or counted

"""A live run fed batch by batch (its state stored and read back in between, in the compact form
of waste/core/state.py) ends exactly where a from-scratch analysis of the same rows does."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.model import (
    NotAppendable,
    RunAccumulator,
    RunConfig,
    RunInputs,
    SystemSamples,
    analysis_from,
    analyze,
)
from phantomhub.waste.core.state import StateParts, state_pack, state_unpack
from tests.examples import examples
from tests.waste import state_fixture
from tests.waste.factories import MS, S, steps
from tests.waste.strategies import runs


def assert_same_analysis(x: Any, y: Any, path: str = "") -> None:
    """Equal JSON trees: integers (ns, cents, counts) exactly, floats to 1e-9 relative."""
    if isinstance(x, dict):
        assert x.keys() == y.keys(), path
        for k in x:
            assert_same_analysis(x[k], y[k], f"{path}.{k}")
    elif isinstance(x, list):
        assert len(x) == len(y), path
        for i, (a, b) in enumerate(zip(x, y, strict=True)):
            assert_same_analysis(a, b, f"{path}[{i}]")
    elif isinstance(x, float) and not isinstance(y, bool):
        assert y == pytest.approx(x, rel=1e-9, abs=1e-9), path
    else:
        assert x == y, path


def feed_in_batches(run: RunInputs, rnd: random.Random, roundtrip: bool) -> RunAccumulator:
    """Each rank's rows in random chunks, ranks interleaved at random, state sometimes reloaded."""
    queues = []
    for b in run.steps:
        cuts = sorted(rnd.sample(range(1, len(b)), k=min(len(b) - 1, rnd.randint(0, 4))))
        bounds = [0, *cuts, len(b)]
        queues.append([b.take(np.arange(lo, hi)) for lo, hi in itertools.pairwise(bounds)])
    acc = RunAccumulator(run.config)
    while any(queues):
        queue = rnd.choice([q for q in queues if q])
        acc.add_steps(queue.pop(0))
        if roundtrip and rnd.random() < 0.5:
            acc = state_fixture.reloaded(acc)
    for samples in run.samples:
        acc.add_samples(samples)
    return acc


def _ending_after_every_row(run: RunInputs, extra_ns: int) -> RunInputs:
    last = max((int((b.t_start_ns + b.dur_ns).max()) for b in run.steps), default=run.end_ns)
    return RunInputs(config=run.config, end_ns=max(run.end_ns, last) + extra_ns, steps=run.steps, samples=run.samples)


@pytest.mark.slow  # seconds: make test runs it, make check does not
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 3 * S), st.randoms(use_true_random=False), st.booleans())
def test_incremental_analysis_equals_from_scratch(run, extra_ns, rnd, roundtrip):
    run = _ending_after_every_row(run, extra_ns)

    full = analyze(run)
    live = analysis_from(feed_in_batches(run, rnd, roundtrip), end_ns=run.end_ns)

    assert live.cost_cents == full.cost_cents
    assert [c.usd_cents for c in live.categories] == [c.usd_cents for c in full.categories]
    assert [c.gpu_seconds for c in live.categories] == [c.gpu_seconds for c in full.categories]
    assert_same_analysis(full.to_json(), live.to_json())


def _lockstep_run(n_steps: int, slow_rank: int | None = None) -> RunInputs:
    starts = [i * 100 * MS for i in range(n_steps)]
    batches = []
    for r in range(4):
        fwd = 60 * MS if r == slow_rank else 40 * MS
        batches.append(
            steps(
                rank=r,
                host=f"node-{r}",
                starts_ns=starts,
                dur_ns=100 * MS,
                forward_ns=fwd,
                comm_ns=100 * MS - fwd,
                flops=1e10,
                mem_allocated=2**30,
                mem_reserved=2**31,
                mem_peak=2**31,
            )
        )
    config = RunConfig(gpu_count=4, world_size=4, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    samples = [SystemSamples(host="node-0", t_ns=np.arange(0, n_steps // 10) * S, gpu_util_pct=np.full(n_steps // 10, 90.0))]
    return RunInputs(config=config, end_ns=n_steps * 100 * MS, steps=batches, samples=samples)


def test_a_live_run_grows_its_chart_windows_like_a_finished_one():
    # 30,000 steps of 100 ms = 3,000 s: buckets must coarsen several times on the way.
    run = _lockstep_run(30_000, slow_rank=2)
    acc = RunAccumulator(run.config)
    for lo in range(0, 30_000, 1_000):
        for b in run.steps:
            acc.add_steps(b.take(np.arange(lo, lo + 1_000)))
    for s in run.samples:
        acc.add_samples(s)

    full, live = analyze(run), analysis_from(acc, end_ns=run.end_ns)

    assert len(full.windows) <= 2000
    assert full.windows.width_ns == live.windows.width_ns == 2048 * MS
    assert_same_analysis(full.to_json(), live.to_json())
    assert [s.rank for s in live.stragglers] == [2]


def test_analysing_a_state_leaves_it_appendable():
    run = _lockstep_run(200)
    acc = RunAccumulator(run.config)
    for b in run.steps:
        acc.add_steps(b.take(np.arange(0, 100)))
    early = analysis_from(acc, end_ns=100 * 100 * MS)
    for b in run.steps:
        acc.add_steps(b.take(np.arange(100, 200)))
    for samples in run.samples:
        acc.add_samples(samples)

    assert early.steps == 400
    assert_same_analysis(analyze(run).to_json(), analysis_from(acc, end_ns=run.end_ns).to_json())


def test_rows_from_the_past_are_not_appendable():
    run = _lockstep_run(200)
    acc = RunAccumulator(run.config)
    for b in run.steps:
        acc.add_steps(b.take(np.arange(100, 200)))

    with pytest.raises(NotAppendable):
        acc.add_steps(run.steps[0].take(np.arange(0, 100)))


def test_a_rank_arriving_after_its_steps_were_aligned_is_not_appendable():
    run = _lockstep_run(200)
    config = RunConfig(gpu_count=4, world_size=3, allocation_start_ns=0)
    acc = RunAccumulator(config)
    for b in run.steps[:3]:  # world_size 3 reached: steps up to 198 get aligned
        acc.add_steps(b)

    with pytest.raises(NotAppendable, match="watermark"):
        acc.add_steps(run.steps[3])


def test_an_end_before_already_analysed_steps_needs_a_fresh_analysis():
    run = _lockstep_run(200)
    acc = RunAccumulator(run.config)
    for b in run.steps:
        acc.add_steps(b)

    with pytest.raises(NotAppendable, match="past end_ns"):
        analysis_from(acc, end_ns=50 * 100 * MS)


def test_a_stored_state_reads_back_to_the_same_bytes_and_appends_like_the_live_one():
    # Three of four ranks have reported 150 steps: rows wait for alignment (the tail), each rank's
    # last row is pending, and the windows hold the chart so far.
    run = _lockstep_run(200, slow_rank=1)
    acc = RunAccumulator(run.config)
    for b in run.steps[:3]:
        acc.add_steps(b.take(np.arange(0, 150)))
    stored = state_fixture.packed(acc)

    restored = state_fixture.unpacked(stored)

    assert state_fixture.packed(restored) == stored
    for state in (acc, restored):
        state.add_steps(run.steps[3].take(np.arange(0, 150)))
        for b in run.steps:
            state.add_steps(b.take(np.arange(150, 200)))
        for samples in run.samples:
            state.add_samples(samples)
    assert state_fixture.packed(restored) == state_fixture.packed(acc)
    live = analysis_from(restored, end_ns=run.end_ns)
    assert live.to_json_bytes() == analysis_from(acc, end_ns=run.end_ns).to_json_bytes()
    assert_same_analysis(analyze(run).to_json(), live.to_json())
    assert [s.rank for s in live.stragglers] == [1]


def test_state_from_another_version_is_refused():
    parts = state_pack(RunAccumulator(_lockstep_run(10).config))
    header = {**orjson.loads(orjson.dumps(parts.header)), "version": 0}
    with pytest.raises(NotAppendable, match="another version"):
        state_unpack(StateParts(header, parts.ranks, parts.windows))


def test_state_knows_which_config_it_was_built_under():
    run = _lockstep_run(10)
    acc = RunAccumulator(run.config)
    restored = state_fixture.reloaded(acc)

    assert restored.matches(run.config)
    assert not restored.matches(RunConfig(gpu_count=4, world_size=4, allocation_start_ns=0, target_mfu=0.4))

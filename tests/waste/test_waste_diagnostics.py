"""Memory, host-contention and chart-window diagnostics, and the money helpers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phantomhub.waste.core.model import RunConfig, RunInputs, SystemSamples, analyze
from phantomhub.waste.core.money import cents_allocate, cents_round
from phantomhub.waste.core.steps import split_in_two
from phantomhub.waste.core.timeline import split_exact
from tests.waste.factories import MS, S, steps

GIB = 2**30


def _memory_run(oom_count: int = 0) -> RunInputs:
    config = RunConfig(gpu_count=2, world_size=2, allocation_start_ns=0, gpu_memory_bytes=80 * GIB)
    batches = [
        steps(
            rank=r,
            starts_ns=[i * S for i in range(4)],
            dur_ns=S,
            forward_ns=S,
            mem_allocated=[30 * GIB, 30 * GIB, 45 * GIB, 30 * GIB],
            mem_reserved=[40 * GIB, 40 * GIB, 60 * GIB, 60 * GIB],
            mem_peak=[50 * GIB, 50 * GIB, (60 + r) * GIB, 50 * GIB],
            alloc_retries=[0, 0, 3, 1],
        )
        for r in range(2)
    ]
    return RunInputs(config=config, end_ns=4 * S, steps=batches, oom_count=oom_count)


def test_memory_diagnostics_report_fragmentation_peak_and_retries():
    m = analyze(_memory_run(oom_count=1)).memory

    # 1 - allocated/reserved per step: 0.25, 0.25, 0.25, 0.5 -> mean 0.3125
    assert m.fragmentation_mean == pytest.approx(0.3125)
    assert (m.peak_bytes_max, m.peak_rank) == (61 * GIB, 1)
    assert m.peak_fraction_of_capacity == pytest.approx(61 / 80)
    assert m.headroom_bytes == 19 * GIB
    assert (m.reserved_bytes_max, m.allocated_bytes_max) == (60 * GIB, 45 * GIB)
    assert m.alloc_retries_total == 8
    assert m.alloc_retries_per_1k_steps == pytest.approx(1000.0)
    assert m.oom_count == 1


def test_memory_diagnostics_are_unknown_without_memory_columns():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    a = analyze(RunInputs(config=config, end_ns=S, steps=[steps(starts_ns=[0], dur_ns=S)]))

    m = a.memory
    assert (m.peak_bytes_max, m.fragmentation_mean, m.alloc_retries_total) == (None, None, None)


def test_background_cpu_load_flags_the_host_and_relates_it_to_host_overhead():
    config = RunConfig(gpu_count=2, world_size=2, allocation_start_ns=0)
    batches = [
        steps(rank=0, host="busy", starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=700 * MS),
        steps(rank=1, host="calm", starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=950 * MS),
    ]
    t = np.arange(10) * S
    samples = [
        SystemSamples(host="busy", t_ns=t, cpu_other_pct=np.full(10, 60.0), cpu_steal_pct=np.full(10, 2.0)),
        SystemSamples(host="calm", t_ns=t, cpu_other_pct=np.full(10, 3.0), cpu_steal_pct=np.zeros(10)),
        SystemSamples(host="busy", t_ns=t, gpu_util_pct=np.full(10, 97.0), rank=0),
    ]

    h = analyze(RunInputs(config=config, end_ns=10 * S, steps=batches, samples=samples)).host

    hosts = {f.host: f for f in h.hosts}
    assert hosts["busy"].contended and not hosts["calm"].contended
    assert hosts["busy"].cpu_other_pct_mean == 60.0 and hosts["busy"].cpu_other_pct_p95 == 60.0
    assert hosts["busy"].host_overhead_share == pytest.approx(0.3)
    assert hosts["calm"].host_overhead_share == pytest.approx(0.05)
    assert h.host_overhead_share == pytest.approx(0.175)
    assert h.gpu_util_pct_mean == 97.0
    assert hosts["busy"].ranks == (0,)


def test_chart_windows_decompose_step_time_and_carry_throughput_and_mfu():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    run = RunInputs(
        config=config,
        end_ns=4 * S,
        steps=[
            steps(
                starts_ns=[i * 100 * MS for i in range(40)],
                dur_ns=100 * MS,
                data_ns=10 * MS,
                forward_ns=30 * MS,
                backward_ns=40 * MS,
                optimizer_ns=5 * MS,
                comm_ns=10 * MS,
                flops=2e10,
                tokens=1000,
                mem_allocated=GIB,
                mem_reserved=2 * GIB,
                mem_peak=3 * GIB,
            )
        ],
    )

    w = analyze(run).windows

    # Not 4 s / 2000 = 2 ms: no window is narrower than 9 in 10 steps (100 ms -> 128 ms).
    assert w.width_ns == 128 * MS
    assert len(w) == 32  # 4 s / 128 ms, the last window 32 ms long
    assert sum(w.step_starts) == 40
    assert sum(w.steps) == pytest.approx(40)  # step-equivalents: every step's span, spread
    for i in range(len(w)):
        # Steps run back to back, so every window is covered by step time: every figure is the
        # steps' own, whatever share of a step the window holds.
        assert (w.data_ms[i], w.forward_ms[i], w.backward_ms[i], w.optimizer_ms[i], w.comm_ms[i], w.host_ms[i]) == (
            pytest.approx(10),
            pytest.approx(30),
            pytest.approx(40),
            pytest.approx(5),
            pytest.approx(10),
            pytest.approx(5),
        )
        assert w.step_ms[i] == pytest.approx(100)
        assert w.tokens_per_s[i] == pytest.approx(1000 / 0.1)
        assert w.mfu[i] == pytest.approx(2e10 / 0.1 / 1e12)
    starts = [i for i, n in enumerate(w.step_starts) if n]
    i = starts[0]
    assert (w.mem_allocated_bytes[i], w.mem_reserved_bytes[i], w.mem_peak_bytes[i]) == (GIB, 2 * GIB, 3 * GIB)


def test_long_runs_get_at_most_2000_windows():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    day = 86_400 * S
    a = analyze(RunInputs(config=config, end_ns=30 * day, steps=[steps(starts_ns=[0, day], dur_ns=S)]))

    assert len(a.windows) <= 2000
    assert a.windows.width_ns * len(a.windows) >= 30 * day


def test_cents_allocation_always_adds_up_and_breaks_ties_by_order():
    shares = {"a": Fraction(1, 3), "b": Fraction(1, 3), "c": Fraction(1, 3)}
    assert cents_allocate(100, shares) == {"a": 34, "b": 33, "c": 33}
    assert cents_allocate(0, shares) == {"a": 0, "b": 0, "c": 0}
    assert cents_allocate(7, {"a": Fraction(0), "b": Fraction(5)}) == {"a": 0, "b": 7}


def test_cost_rounds_half_up_to_the_cent():
    assert cents_round(Fraction(1, 200)) == 1  # $0.005
    assert cents_round(Fraction(1, 201)) == 0
    assert cents_round(Fraction(37333, 1000)) == 3733


def test_split_exact_keeps_both_row_and_column_totals():
    parts = split_exact([7, 3, 0, 5, 1], [6, 10])
    assert [sum(p) for p in parts] == [6, 10]
    assert [sum(col) for col in zip(*parts, strict=True)] == [7, 3, 0, 5, 1]
    assert all(v >= 0 for p in parts for v in p)
    with pytest.raises(ValueError):
        split_exact([1, 2], [4])


@given(
    st.lists(st.lists(st.integers(0, 10**13), min_size=5, max_size=5), min_size=1, max_size=20),
    st.data(),
)
def test_cutting_steps_at_a_price_change_keeps_row_and_piece_totals(rows, data):
    cats = np.array(rows, dtype=np.int64)
    totals = cats.sum(axis=1)
    before = np.array([data.draw(st.integers(0, int(t))) for t in totals], dtype=np.int64)

    part = split_in_two(cats, before)

    assert (part >= 0).all() and (part <= cats).all()
    assert (part.sum(axis=1) == before).all()
    for row, p, b, t in zip(cats.tolist(), part.tolist(), before.tolist(), totals.tolist(), strict=True):
        for v, x in zip(row, p, strict=True):
            exact = Fraction(v * b, t) if t else Fraction(0)
            assert math.floor(exact) <= x <= math.ceil(exact)


def test_a_handful_of_samples_with_one_odd_reading_does_not_make_a_host_contended():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    batch = steps(host="calm", starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=900 * MS)
    odd_first = np.array([100.0, 2.0, 3.0, 1.0, 2.0])  # a first sample spanning a few milliseconds
    few = SystemSamples(host="calm", t_ns=np.arange(5) * S, cpu_other_pct=odd_first)
    assert not analyze(RunInputs(config=config, end_ns=10 * S, steps=[batch], samples=[few])).host.hosts[0].contended
    many = SystemSamples(host="calm", t_ns=np.arange(10) * S, cpu_other_pct=np.full(10, 60.0))
    assert analyze(RunInputs(config=config, end_ns=10 * S, steps=[batch], samples=[many])).host.hosts[0].contended

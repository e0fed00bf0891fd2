"""Recommendations fire on evidence, carry concrete fixes and price themselves at the run's rate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from phantomhub.waste.model import Phase, PriceSegment, RunConfig, RunInputs, SystemSamples, analyze
from phantomhub.waste.recommendations import Thresholds, recommend
from tests.waste.factories import MS, S, steps
from tests.waste.test_waste_model_exact import worked_example_run
from tests.waste.test_waste_stragglers import lockstep

GIB = 2**30


def by_code(recs):
    return {r.code: r for r in recs}


def test_worked_example_recommendations_and_their_monthly_savings():
    a = analyze(worked_example_run())

    recs = recommend(a)

    codes = [r.code for r in recs]
    # Ordered by recoverable dollars: idle 10.66 x 0.5, data 2.67 x 0.8, inefficiency 6.67 x 0.3,
    # comm 2.67 x 0.5; host overhead (3.6% of the bill) is under its 5% threshold.
    assert codes == ["IDLE", "DATA_STALL", "LOW_MFU", "COMM_EXPOSED"]
    hours = 4200 / 3600
    recs_by = by_code(recs)
    assert recs_by["IDLE"].estimated_saving_usd_per_month == pytest.approx(10.66 * 0.5 / hours * 730)
    assert recs_by["DATA_STALL"].estimated_saving_usd_per_month == pytest.approx(2.67 * 0.8 / hours * 730)
    # The figures docs/waste-model.md quotes in its worked example.
    assert [round(r.estimated_saving_usd_per_month) for r in recs] == [3335, 1337, 1252, 835]
    assert round(a.usd_per_month_at_run_rate) == 23358
    assert round(a.recoverable_usd, 2) == 11.47
    assert recs_by["IDLE"].severity == "high"
    assert recs_by["DATA_STALL"].severity == "low"
    assert any("num_workers" in f for f in recs_by["DATA_STALL"].fixes)
    assert any("pin_memory" in f for f in recs_by["DATA_STALL"].fixes)
    assert any("'eval' phases" in f for f in recs_by["IDLE"].fixes)
    mean_wait = next(e for e in recs_by["DATA_STALL"].evidence if "mean wait" in e.observation)
    assert (mean_wait.value, mean_wait.unit) == (100.0, "ms")
    json.dumps([r.to_json() for r in recs])


def test_a_perfect_run_gets_no_recommendations():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        steps=[steps(starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=S, flops=0.5e12)],
    )
    assert recommend(analyze(run)) == ()


def test_thresholds_are_configurable():
    a = analyze(worked_example_run())

    codes = {r.code for r in recommend(a, Thresholds(host_overhead_share=0.03, idle_share=0.5))}

    assert "HOST_OVERHEAD" in codes and "IDLE" not in codes


def test_a_straggler_gets_its_own_recommendation_and_comm_is_not_counted_twice():
    a = analyze(lockstep({2: 60}))

    recs = by_code(recommend(a))

    s = recs["STRAGGLER"]
    assert "node-2" in s.title and any("node-2" in f for f in s.fixes)
    hours = a.run_hours
    assert s.estimated_saving_usd_per_month == pytest.approx(0.12 * 0.5 / hours * 730)
    assert recs["COMM_EXPOSED"].estimated_saving_usd_per_month == pytest.approx((0.44 - 0.12) * 0.5 / hours * 730)


def test_low_mfu_suggests_a_bigger_batch_when_memory_allows_and_bf16_for_fp32():
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=0,
        peak_flops_per_gpu=1e12,
        gpu_memory_bytes=80 * GIB,
        dtype="fp32",
    )
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        steps=[steps(starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=S, flops=0.1e12, mem_peak=20 * GIB)],
        samples=[SystemSamples(host="node-0", t_ns=np.arange(10) * S, gpu_util_pct=np.full(10, 95.0), rank=0)],
    )

    rec = by_code(recommend(analyze(run)))["LOW_MFU"]

    assert any("micro-batch" in f and "25%" in f for f in rec.fixes)
    assert any("bf16" in f for f in rec.fixes)
    assert any("busy" in e.observation for e in rec.evidence)
    assert rec.severity == "high"  # 80% of the bill is compute inefficiency


def test_unknown_peak_gets_an_info_recommendation_without_a_price():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    run = RunInputs(config=config, end_ns=S, steps=[steps(starts_ns=[0], dur_ns=S, forward_ns=S)])

    rec = by_code(recommend(analyze(run)))["MFU_UNKNOWN"]

    assert rec.severity == "info" and rec.estimated_saving_usd_per_month is None


def test_memory_trouble_recommends_allocator_settings_and_checkpointing():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, gpu_memory_bytes=80 * GIB)
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        steps=[
            steps(
                starts_ns=[i * S for i in range(10)],
                dur_ns=S,
                forward_ns=S,
                mem_allocated=30 * GIB,
                mem_reserved=60 * GIB,
                mem_peak=78 * GIB,
                alloc_retries=1,
            )
        ],
        oom_count=2,
    )

    recs = by_code(recommend(analyze(run)))

    frag = recs["MEMORY_FRAGMENTATION"]
    assert any("expandable_segments:True" in f for f in frag.fixes)
    assert frag.severity == "medium"  # 100 retries per 1,000 steps
    assert recs["OOM"].severity == "high"
    assert any("checkpointing" in f for f in recs["OOM"].fixes)


def test_host_contention_names_the_host_and_prices_its_ranks_overhead():
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=0,
        price_segments=(PriceSegment(0, 100 * S, 36),),
    )
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        steps=[steps(host="noisy", starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=600 * MS)],
        samples=[
            SystemSamples(host="noisy", t_ns=np.arange(10) * S, cpu_other_pct=np.full(10, 70.0), cpu_steal_pct=np.full(10, 8.0))
        ],
    )

    a = analyze(run)
    rec = by_code(recommend(a))["HOST_CONTENTION"]

    assert rec.title == "CPU contention on noisy"
    assert any("numactl" in f for f in rec.fixes)
    assert any("steal" in f for f in rec.fixes)
    # 4 GPU-s of host_overhead at 1 cent/GPU-s, recoverable at 0.5, over 10 s of run.
    assert rec.estimated_saving_usd_per_month == pytest.approx(0.04 * 0.5 / (10 / 3600) * 730)


def test_checkpoint_phases_get_async_checkpointing():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, phases=(Phase("checkpoint", 10 * S, 40 * S),))
    run = RunInputs(
        config=config,
        end_ns=50 * S,
        steps=[steps(starts_ns=[i * S for i in range(10)] + [40 * S + i * S for i in range(10)], dur_ns=S, forward_ns=S)],
    )

    rec = by_code(recommend(analyze(run)))["IDLE"]

    assert any("async_save" in f for f in rec.fixes)

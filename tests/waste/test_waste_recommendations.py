"""Recommendations fire on evidence, carry concrete fixes and claim disjoint recoverable dollars."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from phantomhub.waste.core.model import Peer, Phase, PriceSegment, References, RunConfig, RunInputs, SystemSamples, analyze
from phantomhub.waste.core.recommendations import Thresholds, recommend
from tests.waste.factories import MS, S, steps
from tests.waste.test_waste_model_exact import worked_example_refs, worked_example_run
from tests.waste.test_waste_stragglers import lockstep

GIB = 2**30


def by_code(recs):
    return {r.code: r for r in recs}


def test_worked_example_recommendations_and_their_savings():
    a = analyze(dataclasses.replace(worked_example_run(), refs=worked_example_refs()))

    recs = recommend(a)

    codes = [r.code for r in recs]
    # Ordered by saving: compute 5.96, idle 3.73 + 2.13, data 2.00; comm is an unpriced finding
    # (no peer was better: nothing recoverable, not a $0 saving); host overhead (3.6% of the bill)
    # is under its 5% threshold.
    assert codes == ["LOW_MFU", "IDLE", "DATA_STALL", "COMM_EXPOSED"]
    recs_by = by_code(recs)
    assert [r.saving_usd for r in recs] == [5.96, 5.86, 2.00, None]
    assert recs_by["IDLE"].claims == {"idle": 5.86}
    assert sum(r.saving_usd or 0 for r in recs) == pytest.approx(a.recoverable_usd)
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
    # The others' measured wait for rank 2 is the evidence: 12 cents, claimed by STRAGGLER alone.
    assert a.category("comm_exposed").evidence.kind == "straggler"
    assert s.saving_usd == 0.12 and s.claims == {"comm_exposed": 0.12}
    # Every recoverable cent of exposed communication is the straggler's: no $0 COMM_EXPOSED beside it.
    assert a.category("comm_exposed").recoverable_usd == 0.12 and "COMM_EXPOSED" not in recs


def test_the_straggler_claims_what_removing_its_slowness_saves_and_nothing_is_offered_at_zero():
    """The slow rank's own excess (host overhead here) and the other rank's wait are one cause:
    STRAGGLER claims both; HOST_OVERHEAD and COMM_EXPOSED are left nothing and are not issued."""
    from tests.waste.test_waste_stragglers import two_ranks_one_slow

    a = analyze(two_ranks_one_slow(50))
    recs = by_code(recommend(a))

    s = recs["STRAGGLER"]
    assert s.claims == {"comm_exposed": 0.10, "host_overhead": 0.10} and s.saving_usd == pytest.approx(0.20)
    lead = next(e for e in s.evidence if e.observation.startswith("mean lead over the other ranks"))
    assert (lead.value, lead.unit) == (50.0, "ms")
    assert "HOST_OVERHEAD" not in recs and "COMM_EXPOSED" not in recs
    assert all(r.saving_usd is None or r.saving_usd > 0 for r in recs.values())


def test_a_rule_with_nothing_recoverable_is_an_unpriced_finding_not_a_zero_saving():
    # Every step waits 50 ms for data and no stretch, peer or target shows a better level.
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        steps=[steps(starts_ns=[i * S // 10 for i in range(100)], dur_ns=S // 10, data_ns=50 * MS, forward_ns=50 * MS)],
    )
    a = analyze(run)
    assert a.category("data_stall").recoverable_cents == 0
    r = by_code(recommend(a))["DATA_STALL"]
    assert r.saving_usd is None and r.claims == {}
    assert r.explain is not None and r.explain.formula.startswith("not priced separately: nothing of its data stall")


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

    assert rec.severity == "info" and rec.saving_usd is None


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
    # 4 GPU-s of host overhead at 1 cent/GPU-s; a peer with the same step and no host overhead
    # demonstrates all of it recoverable. With one host nothing shows the contention caused it,
    # so HOST_CONTENTION names it without a price and HOST_OVERHEAD keeps the dollars.
    peer = Peer("quiet", dataclasses.replace(a.profile, host_ns_per_step=0.0, samples_per_step=1.0))
    b = analyze(dataclasses.replace(run, steps=[dataclasses.replace(run.steps[0], samples=np.ones(10, dtype=np.int64))],
                                    refs=References(peers=(peer,))))  # fmt: skip
    recs = by_code(recommend(b))
    assert recs["HOST_CONTENTION"].saving_usd is None and recs["HOST_CONTENTION"].claims == {}
    assert recs["HOST_OVERHEAD"].saving_usd == 0.04


def test_host_contention_claims_only_the_excess_over_calm_hosts():
    # Rank 0 on a busy host waits 30 ms per 100 ms step for data, rank 1 on a calm host 10 ms.
    config = RunConfig(gpu_count=2, world_size=2, allocation_start_ns=0, price_segments=(PriceSegment(0, 1000 * S, 36),))
    batches = [
        steps(rank=r, host=h, starts_ns=[i * 100 * MS for i in range(100)], dur_ns=100 * MS, data_ns=d * MS,
              forward_ns=(100 - d) * MS, samples=8)
        for r, h, d in ((0, "busy", 30), (1, "calm", 10))
    ]  # fmt: skip
    hot = SystemSamples(host="busy", t_ns=np.arange(10) * S, cpu_other_pct=np.full(10, 80.0))
    run = RunInputs(config=config, end_ns=10 * S, steps=batches, samples=[hot])
    first = analyze(run)
    peer = Peer("fast-loader", dataclasses.replace(first.profile, data_ns_per_step=0.0))
    a = analyze(dataclasses.replace(run, refs=References(peers=(peer,))))
    recs = by_code(recommend(a))
    recoverable = a.category("data_stall").recoverable_cents
    # Its share of the data-stall dollars (30 of 40 ms) times the excess over the calm host (1 - 10/30).
    expected = math.floor(recoverable * 0.75 * (1 - 10 / 30) + 1e-9)
    assert round(recs["HOST_CONTENTION"].claims["data_stall"] * 100) == expected
    assert round(recs["DATA_STALL"].saving_usd * 100) == recoverable - expected


def test_checkpoint_phases_get_async_checkpointing():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, phases=(Phase("checkpoint", 10 * S, 40 * S),))
    run = RunInputs(
        config=config,
        end_ns=50 * S,
        steps=[steps(starts_ns=[i * S for i in range(10)] + [40 * S + i * S for i in range(10)], dur_ns=S, forward_ns=S)],
    )

    rec = by_code(recommend(analyze(run)))["IDLE"]

    assert any("async_save" in f for f in rec.fixes)


def test_a_straggler_on_a_node_every_rank_shares_is_not_told_to_cordon_the_node():
    run = lockstep({2: 60})
    one_node = dataclasses.replace(run, steps=[dataclasses.replace(b, host="box") for b in run.steps])
    s = by_code(recommend(analyze(one_node)))["STRAGGLER"]
    assert s.title == "Rank 2 holds the other ranks up"
    assert not any("Cordon" in f for f in s.fixes) and any("rank 0" in f for f in s.fixes)


def test_recommendation_texts_use_the_product_s_words():
    import re

    a = analyze(dataclasses.replace(worked_example_run(), refs=worked_example_refs()))
    texts = [r.title for r in recommend(a)] + [e.observation for r in recommend(a) for e in r.evidence]
    # (fixes quote code people type: find_unused_parameters=True, PYTORCH_CUDA_ALLOC_CONF, ...)
    for text in texts:
        assert not re.search(r"\b[a-z]+_[a-z_]+\b|\b[A-Z]{3,}_[A-Z_]+\b", text), text


def test_a_straggler_saving_under_a_cent_is_said_not_priced_at_zero():
    from tests.waste.test_waste_stragglers import two_ranks_one_slow

    a = analyze(two_ranks_one_slow(50, n=6))  # a few 50 ms steps at a cent a GPU-second: fractions of a cent
    [s] = a.stragglers
    assert 0 < s.saving_usd < 0.01
    r = by_code(recommend(a))["STRAGGLER"]
    assert r.saving_usd is None and r.claims == {}
    assert r.explain is not None and f"comes to ${s.saving_usd:.4f} on this run, under a cent" in r.explain.formula

"""Every figure the run page shows can be traced to its formula and inputs (Analysis.explain and
Recommendation.explain), and the inputs given really produce the figure."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from phantomhub.waste.core.model import (
    HOURS_PER_MONTH,
    Peer,
    PriceSegment,
    References,
    RunConfig,
    RunInputs,
    SystemSamples,
    analyze,
)
from phantomhub.waste.core.recommendations import recommend
from tests.waste.factories import MS, S, steps

GIB = 2**30
N = 200


def busy_run() -> RunInputs:
    """4 ranks on 4 hosts, 100 ms steps, rank 2 slow (a straggler), memory and allocator stats,
    tokens, GPU-utilisation samples, a start-up minute, an OOM; $36/GPU-h = 1 cent per GPU-s."""
    first = 60 * S
    starts = [first + i * 100 * MS for i in range(N)]
    batches = []
    for r in range(4):
        fwd = 60 if r == 2 else 40
        batches.append(
            steps(
                rank=r,
                host=f"node-{r}",
                starts_ns=starts,
                dur_ns=100 * MS,
                data_ns=10 * MS,
                forward_ns=fwd * MS,
                comm_ns=(90 - fwd) * MS,
                flops=1e10,
                tokens=512,
                mem_allocated=30 * GIB,
                mem_reserved=[40 * GIB] * (N - 1) + [60 * GIB],
                mem_peak=(50 + r) * GIB,
                alloc_retries=[0] * (N - 1) + [2],
            )
        )
    end = first + N * 100 * MS
    t = np.arange(0, end, S)
    config = RunConfig(
        gpu_count=4,
        world_size=4,
        allocation_start_ns=0,
        price_segments=(PriceSegment(0, 10**6 * S, 36),),
        peak_flops_per_gpu=1e12,
        gpu_memory_bytes=80 * GIB,
        dtype="bf16",
    )
    samples = [SystemSamples(host=f"node-{r}", t_ns=t, gpu_util_pct=np.full(len(t), 50.0 + 10 * r)) for r in range(2)]
    return RunInputs(config=config, end_ns=end, steps=batches, samples=samples, oom_count=1)


def test_every_headline_figure_has_an_explanation():
    a = analyze(busy_run())
    ex = a.explain

    expected = {
        "billed_gpu_seconds": a.billed_gpu_seconds,
        "gpu_hours": a.billed_gpu_seconds / 3600,
        "run_hours": a.run_hours,
        "cost_usd": a.cost_usd,
        "unpriced_gpu_seconds": a.unpriced_gpu_seconds,
        "waste_usd": a.waste_cents / 100,
        "waste_share": a.waste_cents / a.cost_cents,
        "recoverable_usd": a.recoverable_usd,
        "usd_per_month_at_run_rate": a.usd_per_month_at_run_rate,
        "useful_compute": a.category("useful_compute").gpu_seconds,
        "achieved_flops_per_gpu": a.achieved_flops_per_gpu,
        "mfu": a.mfu,
        "mfu_step_time": a.mfu_step_time,
        "mfu_compute": a.mfu_compute,
        "tokens_per_s": a.tokens_per_s,
        "host.gpu_util_pct_mean": a.host.gpu_util_pct_mean,
        "memory.fragmentation_mean": a.memory.fragmentation_mean,
        "memory.peak_bytes_max": a.memory.peak_bytes_max,
        "memory.peak_fraction_of_capacity": a.memory.peak_fraction_of_capacity,
        "memory.headroom_bytes": a.memory.headroom_bytes,
        "memory.alloc_retries_total": a.memory.alloc_retries_total,
        "memory.alloc_retries_per_1k_steps": a.memory.alloc_retries_per_1k_steps,
        "memory.oom_count": 1,
    }
    for c in a.categories:
        expected[f"categories.{c.category}.gpu_seconds"] = c.gpu_seconds
        expected[f"categories.{c.category}.usd"] = c.usd
        expected[f"categories.{c.category}.recoverable_usd"] = c.recoverable_usd
    for i in a.idle:
        expected[f"idle.{i.label}.usd"] = i.usd_cents / 100
    assert [s.rank for s in a.stragglers] == [2]
    for s in a.stragglers:
        expected[f"stragglers.{s.rank}.caused_wait_usd"] = s.caused_wait_usd
        expected[f"stragglers.{s.rank}.caused_wait_gpu_seconds"] = s.caused_wait_gpu_seconds

    for key, value in expected.items():
        assert key in ex, key
        assert ex[key].value == pytest.approx(value, rel=1e-12), key
        assert ex[key].formula and ex[key].unit, key
    assert set(expected) <= set(ex)
    json.dumps(a.to_json()["explain"], allow_nan=False)


def test_explanations_recompute_from_their_inputs():
    a = analyze(busy_run())
    ex = {k: (e.value, e.inputs) for k, e in a.explain.items()}

    value, i = ex["gpu_hours"]
    assert value == pytest.approx(i["billed_gpu_seconds"] / 3600) == pytest.approx(4 * 80 / 3600)
    value, i = ex["waste_share"]
    assert value == pytest.approx(i["waste_usd"] / i["cost_usd"])
    value, i = ex["usd_per_month_at_run_rate"]
    assert value == pytest.approx(i["cost_usd"] / i["run_hours"] * i["hours_per_month"])
    assert (i["cost_usd"], i["hours_per_month"]) == (3.2, HOURS_PER_MONTH)  # 320 GPU-s at 1 cent
    value, i = ex["host.gpu_util_pct_mean"]
    assert value == pytest.approx(i["gpu_util_sum_pct"] / i["gpu_util_samples"]) == pytest.approx(55.0)
    assert i["hosts_with_samples"] == 2
    value, i = ex["memory.fragmentation_mean"]
    # 1 - 30/40 on 199 steps per rank, 1 - 30/60 on the last one
    assert value == pytest.approx(i["fragmentation_sum"] / i["allocator_rows"]) == pytest.approx((199 * 0.25 + 0.5) / 200)
    value, i = ex["memory.peak_fraction_of_capacity"]
    assert value == pytest.approx(i["peak_bytes_max"] / i["capacity_bytes"]) == pytest.approx(53 / 80)
    value, i = ex["memory.headroom_bytes"]
    assert value == i["capacity_bytes"] - i["peak_bytes_max"] == 27 * GIB
    assert ex["memory.peak_bytes_max"][1]["peak_rank"] == 3
    value, i = ex["memory.alloc_retries_per_1k_steps"]
    assert value == pytest.approx(i["alloc_retries_count"] * 1000 / i["steps"]) == pytest.approx(8 * 1000 / 800)
    value, i = ex["stragglers.2.caused_wait_usd"]
    assert value == pytest.approx(i["caused_wait_gpu_seconds"] * i["comm_exposed_usd"] / i["comm_exposed_gpu_seconds"])
    value, i = ex["stragglers.2.caused_wait_gpu_seconds"]
    assert value == pytest.approx(i["caused_wait_rank_ns"] * i["gpu_count"] / i["ranks_reporting"] / 1e9)
    assert value == pytest.approx(N * 3 * 0.020)  # three ranks wait 20 ms a step for rank 2
    units = a.explain["usd_per_month_at_run_rate"].input_units
    assert units == {"cost_usd": "USD", "run_hours": "h", "hours_per_month": "h/month"}


def test_figures_that_are_absent_have_no_explanation():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    a = analyze(RunInputs(config=config, end_ns=10 * S, steps=[steps(starts_ns=[0], dur_ns=S)]))

    for key in ("host.gpu_util_pct_mean", "memory.fragmentation_mean", "memory.peak_bytes_max", "tokens_per_s"):
        assert key not in a.explain
    assert a.explain["memory.oom_count"].value == 0


def test_every_recommendation_explains_its_saving():
    first = analyze(busy_run())
    peer = Peer("peer", dataclasses.replace(first.profile, data_ns_per_step=0.0, comm_ns_per_step=0.0, startup_s=5.0))
    a = analyze(dataclasses.replace(busy_run(), refs=References(peers=(peer,), project=(peer,))))
    recs = recommend(a)

    codes = {r.code for r in recs}
    assert {"STRAGGLER", "COMM_EXPOSED", "IDLE", "MEMORY_FRAGMENTATION", "OOM"} <= codes
    for r in recs:
        assert r.explain is not None, r.code
        assert r.explain.value == r.saving_usd, r.code
        assert r.explain.unit == "USD"
        assert r.to_json()["explain"]["formula"] == r.explain.formula
        if r.saving_usd is None:
            assert r.explain.formula.startswith("not priced separately")
            continue
        claimed = {k[len("claimed_") : -len("_usd")]: v for k, v in r.explain.inputs.items() if k.startswith("claimed_")}
        assert claimed == r.claims and r.saving_usd == pytest.approx(sum(claimed.values()))
        assert all(unit for unit in r.explain.input_units.values()), r.code
    by = {r.code: r for r in recs}
    straggler = a.stragglers[0]
    claims = dict(by["STRAGGLER"].claims)
    assert claims.pop("comm_exposed") == math.floor(straggler.caused_wait_usd * 100) / 100
    assert straggler.own_excess_usd and set(claims) <= set(straggler.own_excess_usd)  # its own excess, where recoverable
    for cat, usd in claims.items():
        assert 0 < usd <= math.floor(straggler.own_excess_usd[cat] * 100) / 100
    comm = a.category("comm_exposed")
    assert by["COMM_EXPOSED"].saving_usd == pytest.approx(comm.recoverable_usd - by["STRAGGLER"].claims["comm_exposed"])
    json.dumps([r.to_json() for r in recs], allow_nan=False)

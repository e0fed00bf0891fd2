"""Exact figures from synthetic runs whose composition is known in advance."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import numpy as np
import pytest

from phantomhub.waste.core.model import (
    Peer,
    Phase,
    PriceSegment,
    References,
    RunConfig,
    RunInputs,
    RunProfile,
    analyze,
)
from tests.waste.factories import MS, S, cents_by_category, gpu_seconds_by_category, steps

H100_BF16 = 989.4e12
T0 = 1_790_000_000 * S  # 09:00:00 on the worked example's day


def worked_example_run() -> RunInputs:
    """docs/waste-model.md's worked example: 8 H100s at $4.00/GPU-hour for 70 minutes.

    10 min start-up, 1,500 one-second steps, a 5 min eval, 1,500 more steps, 5 min tear-down.
    Each step: 100 ms data, 250 forward, 450 backward, 50 optimizer, 100 comm, 50 unmeasured;
    FLOPs worth 500 ms at the 50% target MFU. As the agent reports it, the step before the eval
    lasts until the next step starts (301 s), and the eval is reported as a phase.
    """
    first = T0 + 600 * S
    before = [first + i * S for i in range(1500)]
    after = [first + 1800 * S + i * S for i in range(1500)]
    dur = np.full(3000, S, dtype=np.int64)
    dur[1499] = 301 * S
    batches = [
        steps(
            rank=r,
            host=f"node-{r // 4}",
            starts_ns=before + after,
            dur_ns=dur,
            data_ns=100 * MS,
            forward_ns=250 * MS,
            backward_ns=450 * MS,
            optimizer_ns=50 * MS,
            comm_ns=100 * MS,
            flops=0.5 * 0.5 * H100_BF16,  # 0.5 s of the target rate 0.5 x peak
            tokens=4096,
        )
        for r in range(8)
    ]
    config = RunConfig(
        gpu_count=8,
        world_size=8,
        allocation_start_ns=T0,
        price_segments=(PriceSegment(T0 - 86400 * S, T0 + 86400 * S, Decimal("4.00")),),
        phases=(Phase("eval", first + 1500 * S, first + 1800 * S),),
        peak_flops_per_gpu=H100_BF16,
        dtype="bf16",
    )
    return RunInputs(config=config, end_ns=T0 + 4200 * S, steps=batches)


def worked_example_peer(**over: float | None) -> RunProfile:
    """A finished run with the worked example's step and figures, except those overridden."""
    base = {
        "live_steps": 24_000, "ranks": 8, "flops_per_step": 0.25 * H100_BF16, "tokens_per_step": 4096.0,
        "samples_per_step": None, "data_ns_per_step": 100e6, "comm_ns_per_step": 100e6,
        "host_ns_per_step": 50e6, "gap_ns_per_step": 0.0, "mfu_compute": 1 / 3, "startup_s": 600.0,
        "teardown_s": 300.0,
    }  # fmt: skip
    return RunProfile(**{**base, **over})  # type: ignore[arg-type]


def worked_example_refs() -> References:
    """docs/waste-model.md's worked example's evidence: two earlier finished runs of the project
    with the same step (FLOPs and tokens per step), a faster loader, better MFU and shorter
    start-up and tear-down; and a third run of another step size, which is not compared."""
    peer = worked_example_peer
    peers = (
        Peer("p-fast", peer(data_ns_per_step=20e6, mfu_compute=0.5, startup_s=120.0, teardown_s=60.0)),
        Peer("p-slow", peer(data_ns_per_step=40e6, mfu_compute=0.4, startup_s=240.0, teardown_s=60.0)),
        Peer("p-other-model", peer(data_ns_per_step=1e6, flops_per_step=1e12, mfu_compute=0.9)),
    )
    return References(peers=peers, project=peers[:2])


def test_worked_example_splits_every_gpu_second_and_cent():
    a = analyze(worked_example_run())

    assert a.billed_gpu_seconds == 33_600
    assert gpu_seconds_by_category(a) == {
        "useful_compute": 12_000,
        "compute_inefficiency": 6_000,
        "data_stall": 2_400,
        "comm_exposed": 2_400,
        "host_overhead": 1_200,
        "idle": 9_600,
    }
    assert a.cost_cents == 3_733  # $37.3333... rounded
    # Exact shares 1333.33 666.67 266.67 266.67 133.33 1066.67: the three spare cents go to the
    # largest remainders, ties (four at .67) in category order.
    assert cents_by_category(a) == {
        "useful_compute": 1_333,
        "compute_inefficiency": 667,
        "data_stall": 267,
        "comm_exposed": 267,
        "host_overhead": 133,
        "idle": 1_066,
    }
    assert a.waste_cents == 3_733 - 1_333


def test_worked_example_idle_breaks_down_by_cause():
    a = analyze(worked_example_run())

    idle = {i.label: (i.gpu_seconds, i.usd_cents) for i in a.idle}
    assert idle == {
        "startup": (4_800, 533),
        "gap": (0, 0),
        "teardown": (2_400, 267),
        "phase:eval": (2_400, 266),
    }
    assert sum(c for _, c in idle.values()) == a.category("idle").usd_cents


def test_worked_example_mfu_and_recoverable_dollars():
    a = analyze(worked_example_run())

    assert a.mfu == pytest.approx(0.25 * 3000 / 4200)  # half the target, 3000 of 4200 s in steps
    assert a.mfu_step_time == pytest.approx(0.25)
    assert a.mfu_compute == pytest.approx(0.25 / 0.75)
    assert a.tokens_per_s == pytest.approx(4096 * 3000 * 8 / 4200)
    assert a.recoverable_usd == 0  # uniform and alone: nothing demonstrates a better level
    # With the project's earlier runs as evidence (docs/waste-model.md): data 2.67 x (1 - 25/100),
    # compute 20.00 x (1 - (1/3)/0.475), start-up 5.33 x (1 - 180/600), tear-down 2.67 x (1 - 60/300).
    b = analyze(dataclasses.replace(worked_example_run(), refs=worked_example_refs()))
    assert {c.category: c.recoverable_cents for c in b.categories} == {
        "useful_compute": 0, "compute_inefficiency": 596, "data_stall": 200, "comm_exposed": 0,
        "host_overhead": 0, "idle": 373 + 213,
    }  # fmt: skip
    assert b.recoverable_usd == 13.82
    assert a.usd_per_month_at_run_rate == pytest.approx(37.33 / (4200 / 3600) * 730)


def test_worked_example_is_json_serialisable_with_explanations():
    a = analyze(worked_example_run())

    payload = json.loads(json.dumps(a.to_json()))
    assert payload["cost_usd"] == 37.33
    cost = payload["explain"]["cost_usd"]
    assert cost["inputs"]["segment_0_usd_per_gpu_hour"] == 4.0
    assert cost["inputs"]["segment_0_seconds"] == 4200
    data = payload["explain"]["categories.data_stall.gpu_seconds"]
    assert data["inputs"] == {"data_stall_rank_ns": 8 * 300 * S, "gpu_count": 8, "ranks_reporting": 8}
    assert "target_mfu" in payload["explain"]["useful_compute"]["formula"]


def test_price_change_mid_run_is_charged_piecewise_and_cuts_the_straddling_step():
    # 1 GPU, $2/h then $3/h from 3600 s. 5 s start-up, 10 s steps (2 s data, 8 s forward) from
    # 5 s to 7195 s, 5 s tear-down. The step at 3595 s is cut in half by the price change.
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=0,
        price_segments=(PriceSegment(0, 3600 * S, 2), PriceSegment(3600 * S, 7200 * S, 3)),
    )
    starts = [5 * S + i * 10 * S for i in range(719)]
    run = RunInputs(
        config=config,
        end_ns=7200 * S,
        steps=[steps(starts_ns=starts, dur_ns=10 * S, data_ns=2 * S, forward_ns=8 * S)],
    )

    a = analyze(run)

    assert a.cost_cents == 500  # 1 h at $2 + 1 h at $3
    secs = gpu_seconds_by_category(a)
    assert secs["data_stall"] == 1438
    assert secs["useful_compute"] == 5752  # peak unknown: all compute counts as useful
    assert secs["idle"] == 10
    # data 719 s in each hour: 719 x $5 / 3600 = 99.86c; forward 2876 x 5 / 3600 = 399.44c;
    # idle 5 x 5 / 3600 = 0.69c. Floors 99 + 399 + 0 = 498; the 2 spare cents by remainder.
    assert cents_by_category(a) == {
        "useful_compute": 399,
        "compute_inefficiency": 0,
        "data_stall": 100,
        "comm_exposed": 0,
        "host_overhead": 0,
        "idle": 1,
    }
    assert a.peak_known is False and a.mfu is None


def test_unpriced_time_is_categorised_but_costs_nothing():
    config = RunConfig(
        gpu_count=2,
        world_size=2,
        allocation_start_ns=0,
        price_segments=(PriceSegment(0, 100 * S, 36),),  # 1 cent per GPU-second
    )
    run = RunInputs(config=config, end_ns=200 * S)

    a = analyze(run)

    assert a.billed_gpu_seconds == 400
    assert a.unpriced_gpu_seconds == 200
    assert a.cost_cents == 200
    assert a.category("idle").gpu_seconds == 400
    assert [i.label for i in a.idle] == ["no_steps"]
    assert any("outside every price segment" in w for w in a.warnings)


def test_stages_longer_than_the_step_are_scaled_down_and_host_overhead_is_zero():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        # 1.2 s of stages measured in 1 s steps: scaled by 1/1.2.
        steps=[
            steps(
                starts_ns=[i * S for i in range(10)],
                dur_ns=S,
                data_ns=600 * MS,
                forward_ns=300 * MS,
                backward_ns=300 * MS,
            )
        ],
    )

    a = analyze(run)

    secs = gpu_seconds_by_category(a)
    assert secs["data_stall"] == pytest.approx(5.0, abs=1e-8)
    assert secs["useful_compute"] == pytest.approx(5.0, abs=1e-8)
    assert secs["host_overhead"] == pytest.approx(0.0, abs=1e-8)
    assert sum(secs.values()) == pytest.approx(10.0, abs=1e-12)
    assert any("scaled down" in w for w in a.warnings)


def test_phase_time_inside_a_step_is_taken_from_its_unmeasured_remainder_first():
    # One 10 s step: 2 s data, 3 s forward, 5 s unmeasured; a 4 s checkpoint phase inside it.
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=0,
        phases=(Phase("checkpoint", 6 * S, 10 * S),),
    )
    run = RunInputs(
        config=config,
        end_ns=10 * S,
        steps=[steps(starts_ns=[0], dur_ns=10 * S, data_ns=2 * S, forward_ns=3 * S)],
    )

    a = analyze(run)

    secs = gpu_seconds_by_category(a)
    assert (secs["data_stall"], secs["useful_compute"], secs["host_overhead"]) == (2, 3, 1)
    assert {i.label: i.gpu_seconds for i in a.idle} == {
        "startup": 0,
        "gap": 0,
        "teardown": 0,
        "phase:checkpoint": 4,
    }


def test_gaps_between_steps_startup_and_teardown_are_idle():
    config = RunConfig(gpu_count=4, world_size=1, allocation_start_ns=0)
    # One process driving 4 GPUs; steps end before the next starts (3 s gaps).
    run = RunInputs(
        config=config,
        end_ns=30 * S,
        steps=[steps(starts_ns=[5 * S, 12 * S, 19 * S], dur_ns=4 * S, forward_ns=4 * S)],
    )

    a = analyze(run)

    assert {i.label: i.gpu_seconds for i in a.idle} == {
        "startup": 20,
        "gap": 24,
        "teardown": 28,
    }
    assert a.category("useful_compute").gpu_seconds == 48


def test_fewer_reporting_ranks_stand_for_the_missing_ones():
    config = RunConfig(gpu_count=8, world_size=8, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    batches = [steps(rank=r, starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=S, flops=0.5e12) for r in (0, 5)]

    a = analyze(RunInputs(config=config, end_ns=10 * S, steps=batches))

    assert a.ranks_reporting == 2
    assert a.billed_gpu_seconds == 80
    assert a.category("useful_compute").gpu_seconds == 80
    assert a.mfu == pytest.approx(0.5)
    assert [r.gpu_seconds["useful_compute"] for r in a.ranks] == [40, 40]
    assert any("2 of 8 ranks" in w for w in a.warnings)


def test_a_rank_driving_several_gpus_is_measured_against_all_their_peak():
    # 1 process, 4 GPUs: 1 s of compute doing 2e12 FLOPs against 4 x 1e12 peak at target 0.5.
    config = RunConfig(gpu_count=4, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    run = RunInputs(
        config=config,
        end_ns=S,
        steps=[steps(starts_ns=[0], dur_ns=S, forward_ns=S, flops=2e12)],
    )

    a = analyze(run)

    assert a.category("useful_compute").gpu_seconds == 4
    assert a.category("compute_inefficiency").gpu_seconds == 0
    assert a.mfu == pytest.approx(0.5)


def test_low_flops_split_compute_into_useful_and_inefficiency_per_step():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    # Step 1 reaches the target (0.5e12 FLOPs in 1 s); step 2 does a quarter of that. A fast
    # step cannot hide a slow one: step 1 is capped at its own compute time.
    run = RunInputs(
        config=config,
        end_ns=2 * S,
        steps=[steps(starts_ns=[0, S], dur_ns=S, forward_ns=S, flops=[1e12, 0.125e12])],
    )

    a = analyze(run)

    assert a.category("useful_compute").gpu_seconds == pytest.approx(1.25)
    assert a.category("compute_inefficiency").gpu_seconds == pytest.approx(0.75)


def test_steps_outside_the_billed_span_are_clipped():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=10 * S)
    run = RunInputs(
        config=config,
        end_ns=20 * S,
        steps=[steps(starts_ns=[8 * S, 12 * S, 18 * S, 25 * S], dur_ns=4 * S, forward_ns=4 * S)],
    )

    a = analyze(run)

    assert a.category("useful_compute").gpu_seconds == 2 + 4 + 2
    assert {i.label: i.gpu_seconds for i in a.idle} == {"startup": 0, "gap": 2, "teardown": 0}


def test_a_run_without_steps_is_all_idle():
    config = RunConfig(
        gpu_count=2,
        world_size=2,
        allocation_start_ns=0,
        price_segments=(PriceSegment(0, 3600 * S, Decimal("1.50")),),
    )

    a = analyze(RunInputs(config=config, end_ns=3600 * S))

    assert a.cost_cents == 300
    assert a.category("idle").usd_cents == 300
    assert a.ranks == () and a.stragglers == ()
    assert a.windows.steps == (0,) * len(a.windows)


def test_zero_length_run_costs_nothing():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=5 * S)
    a = analyze(RunInputs(config=config, end_ns=5 * S))
    assert a.billed_gpu_seconds == 0 and a.cost_cents == 0


def test_end_before_allocation_start_is_rejected():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=5 * S)
    with pytest.raises(ValueError, match="before allocation_start"):
        analyze(RunInputs(config=config, end_ns=4 * S))


def test_overlapping_price_segments_are_rejected():
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=0,
        price_segments=(PriceSegment(0, 10 * S, 1), PriceSegment(5 * S, 20 * S, 2)),
    )
    with pytest.raises(ValueError, match="overlap"):
        analyze(RunInputs(config=config, end_ns=10 * S))


def test_bad_recoverability_is_rejected():
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0)
    with pytest.raises(ValueError, match="within"):
        analyze(RunInputs(config=config, end_ns=S, recoverability={"idle": 1.5}))
    with pytest.raises(ValueError, match="unknown"):
        analyze(RunInputs(config=config, end_ns=S, recoverability={"lunch": 0.5}))


def test_custom_recoverability_changes_recoverable_dollars_only():
    run = dataclasses.replace(worked_example_run(), refs=worked_example_refs())
    custom = dataclasses.replace(run, recoverability={"idle": 0.25})

    a, b = analyze(run), analyze(custom)

    assert cents_by_category(a) == cents_by_category(b)
    assert a.category("idle").recoverable_cents == 586 and not a.category("idle").evidence.capped
    assert b.category("idle").recoverable_cents == 266 and b.category("idle").evidence.capped  # 25% of 10.66
    assert b.recoverable_usd == pytest.approx(a.recoverable_usd - 5.86 + 2.66)


def test_a_step_spanning_three_prices_keeps_its_mix_in_each():
    # $36, $72, $108 per GPU-hour = 1, 2, 3 cents per GPU-second, 10 s each; one 30 s step of
    # 10 s data + 20 s forward: a third of each category falls under each price.
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=0,
        price_segments=(
            PriceSegment(0, 10 * S, 36),
            PriceSegment(10 * S, 20 * S, 72),
            PriceSegment(20 * S, 30 * S, 108),
        ),
    )
    run = RunInputs(
        config=config,
        end_ns=30 * S,
        steps=[steps(starts_ns=[0], dur_ns=30 * S, data_ns=10 * S, forward_ns=20 * S)],
    )

    a = analyze(run)

    assert a.cost_cents == 60
    assert (a.category("data_stall").usd_cents, a.category("useful_compute").usd_cents) == (20, 40)

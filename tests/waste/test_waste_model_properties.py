"""Properties that must hold for every run, checked on generated runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.model import (
    CATEGORIES,
    PriceSegment,
    RunConfig,
    RunInputs,
    StepColumns,
    analyze,
)
from tests.examples import examples
from tests.waste.factories import MS, S, exact_cost_usd, round_half_up_cents, steps
from tests.waste.strategies import runs, scaled

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(runs())
def test_categories_are_non_negative_and_sum_to_billed_time_and_cost(run):
    a = analyze(run)

    billed = run.config.gpu_count * (run.end_ns - run.config.allocation_start_ns) / S
    assert a.billed_gpu_seconds == pytest.approx(billed, rel=1e-12, abs=1e-9)
    assert [c.category for c in a.categories] == list(CATEGORIES)
    assert all(c.gpu_seconds >= 0 and c.usd_cents >= 0 for c in a.categories)
    assert math.fsum(c.gpu_seconds for c in a.categories) == pytest.approx(billed, rel=1e-12, abs=1e-6)
    assert a.cost_cents == round_half_up_cents(exact_cost_usd(run.config, run.end_ns))
    assert sum(c.usd_cents for c in a.categories) == a.cost_cents
    assert sum(i.usd_cents for i in a.idle) == a.category("idle").usd_cents
    assert math.fsum(i.gpu_seconds for i in a.idle) == pytest.approx(a.category("idle").gpu_seconds, abs=1e-6)
    assert a.waste_cents == a.cost_cents - a.category("useful_compute").usd_cents
    json.dumps(a.to_json(), allow_nan=False)  # storable as strict JSON


@SETTINGS
@given(runs())
def test_every_reporting_rank_accounts_for_its_share_of_billed_time(run):
    a = analyze(run)

    for rank in a.ranks:
        share = a.billed_gpu_seconds / a.ranks_reporting
        assert math.fsum(rank.gpu_seconds.values()) == pytest.approx(share, rel=1e-12, abs=1e-6)
        assert all(v >= 0 for v in rank.gpu_seconds.values())
    if a.ranks:
        total_usd = math.fsum(math.fsum(r.usd.values()) for r in a.ranks)
        assert total_usd == pytest.approx(float(exact_cost_usd(run.config, run.end_ns)), abs=1e-9)


@SETTINGS
@given(runs(), st.sampled_from((2, 3, 10)))
def test_scaling_every_time_by_k_scales_gpu_seconds_and_dollars(run, k):
    a, b = analyze(run), analyze(scaled(run, k))

    rows = sum(len(s) for s in run.steps)
    # Per row, integer flooring of scaled stages / FLOP-time can move a few ns, times k.
    tol = (rows + 1) * 12 * k * run.config.gpu_count / S
    for x, y in zip(a.categories, b.categories, strict=True):
        assert y.gpu_seconds == pytest.approx(k * x.gpu_seconds, abs=tol + 1e-9)
        assert abs(y.usd_cents - k * x.usd_cents) <= k + 2
    assert b.cost_cents == pytest.approx(k * a.cost_cents, abs=k)


@SETTINGS
@given(runs(), st.randoms(use_true_random=False))
def test_permuting_rank_labels_changes_nothing_but_labels(run, rnd):
    ids = [b.rank for b in run.steps]
    new_ids = list(range(100, 100 + run.config.world_size))
    rnd.shuffle(new_ids)
    relabel = {old: new for old, new in zip(ids, new_ids, strict=False)}
    permuted = RunInputs(
        config=run.config,
        end_ns=run.end_ns,
        steps=[
            StepColumns(
                **{
                    **{f: getattr(b, f) for f in b.__dataclass_fields__},
                    "rank": relabel[b.rank],
                    "host": f"h-{relabel[b.rank]}",
                }
            )
            for b in reversed(run.steps)
        ],
    )

    a, b = analyze(run), analyze(permuted)

    assert [(c.gpu_seconds, c.usd_cents) for c in a.categories] == [(c.gpu_seconds, c.usd_cents) for c in b.categories]
    assert [(i.label, i.usd_cents) for i in a.idle] == [(i.label, i.usd_cents) for i in b.idle]
    by_rank = {r.rank: r for r in b.ranks}
    for r in a.ranks:
        other = by_rank[relabel[r.rank]]
        assert other.gpu_seconds == r.gpu_seconds
        assert other.caused_wait_gpu_seconds == r.caused_wait_gpu_seconds
        assert other.slow_step_share == r.slow_step_share
    assert sorted(relabel[s.rank] for s in a.stragglers) == sorted(s.rank for s in b.stragglers)


@st.composite
def perfect_runs(draw):
    """No gaps, no data/comm/host time, FLOPs exactly at the target MFU, billing from step one."""
    gpu_count = draw(st.integers(1, 8))
    world_size = draw(st.integers(1, gpu_count))
    peak = draw(st.sampled_from((1e12, 312e12, 989.4e12)))
    target = draw(st.sampled_from((0.3, 0.5, 0.8)))
    start = draw(st.integers(0, 10**9)) * MS
    n = draw(st.integers(1, 30))
    gpus_per_rank = gpu_count / world_size
    batches = []
    for rank in range(world_size):
        fwd = np.array(draw(st.lists(st.integers(1, 2 * S), min_size=n, max_size=n)))
        bwd = np.array(draw(st.lists(st.integers(0, 2 * S), min_size=n, max_size=n)))
        opt = np.array(draw(st.lists(st.integers(0, S // 10), min_size=n, max_size=n)))
        dur = fwd + bwd + opt
        flops = dur / 1e9 * target * peak * gpus_per_rank
        batches.append((fwd, bwd, opt, dur, flops, rank))
    # Ranks run in lockstep: the step length is the slowest rank's; the others' idle shows as
    # waste, so give every rank the same stage times.
    fwd, bwd, opt, dur, flops, _ = batches[0]
    starts = start + np.concatenate(([0], np.cumsum(dur)[:-1]))
    cols = [
        steps(rank=r, starts_ns=starts, dur_ns=dur, forward_ns=fwd, backward_ns=bwd, optimizer_ns=opt, flops=flops)
        for r in range(world_size)
    ]
    config = RunConfig(
        gpu_count=gpu_count,
        world_size=world_size,
        allocation_start_ns=start,
        price_segments=(PriceSegment(start, start + 10**6 * S, 4),),
        peak_flops_per_gpu=peak,
        target_mfu=target,
    )
    return RunInputs(config=config, end_ns=int(starts[-1] + dur[-1]), steps=cols)


@SETTINGS
@given(perfect_runs())
def test_a_run_at_target_mfu_with_no_stalls_has_zero_waste(run):
    a = analyze(run)

    assert a.category("useful_compute").gpu_seconds == pytest.approx(a.billed_gpu_seconds, rel=1e-12)
    for c in a.categories[1:]:
        assert c.gpu_seconds == 0
        assert c.usd_cents == 0
    assert a.waste_cents == 0
    assert a.recoverable_usd == 0
    assert a.mfu == pytest.approx(run.config.target_mfu, rel=1e-9)


@SETTINGS
@given(runs())
def test_mfu_is_physical_unless_the_reported_flops_claim_more_than_peak(run):
    a = analyze(run)

    flagged = any("reported FLOPs exceed the GPU's dense peak" in w for w in a.warnings)
    if not flagged:
        assert all(m is None or m <= 1 + 1e-9 for m in (a.mfu, a.mfu_step_time, *a.windows.mfu))
    if a.mfu_step_time is not None and a.mfu_step_time > 1 + 1e-9:
        assert flagged


@SETTINGS
@given(runs())
def test_chart_windows_hold_the_runs_flops_and_step_time(run):
    a = analyze(run)
    w = a.windows
    t0 = np.array(w.t_start_ns, dtype=np.int64)
    length_s = (np.minimum(t0 + w.width_ns, a.end_ns) - t0) / S

    assert len(w) <= 2000
    assert all(n >= 0 for n in w.steps)
    assert sum(w.step_starts) <= a.steps  # a zero-length row at the very end has no window
    step_s = math.fsum(ms * n for ms, n in zip(w.step_ms, w.steps, strict=True) if ms is not None) / 1e3
    assert step_s == pytest.approx(a.explain["mfu_step_time"].inputs["step_seconds"], rel=1e-9, abs=1e-9)
    if a.mfu is not None and any(m is not None for m in w.mfu):
        window_flop_s = math.fsum(m * s for m, s in zip(w.mfu, length_s, strict=True) if m is not None)
        assert window_flop_s == pytest.approx(a.mfu * (a.end_ns - a.allocation_start_ns) / S, rel=1e-9, abs=1e-12)


@SETTINGS
@given(runs())
def test_every_explanation_names_the_unit_of_each_input(run):
    a = analyze(run)

    for key, ex in a.explain.items():
        assert ex.unit, key
        assert set(ex.input_units) == set(ex.inputs), key
        for name, unit in ex.input_units.items():
            assert unit or name == "dtype", f"{key}: input {name} has no unit"

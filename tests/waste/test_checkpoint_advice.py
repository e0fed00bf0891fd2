"""The checkpoint advice (phantomhub/waste/core/checkpointing.py): Daly's W(τ), its minimiser, the
savings, the asynchronous rule, the cap and the minimum evidence for a failure rate. Pure: no
database. W is checked against a simulation of exponential failures that shares no code with it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.checkpointing import (
    ASYNC_STAGE_SHARE,
    OWN_MIN_FAILURES,
    SECONDS_PER_MONTH,
    FailureRate,
    checkpoint_advice,
    failure_rate,
    optimum_interval,
    wall_per_work,
    young_daly,
)
from tests.examples import examples

OWN = FailureRate(mtbf_s=None, source=None, failures=0, exposure=0.0, exposure_unit="s", reason="no failures")


def rate(mtbf_s: float) -> FailureRate:
    return FailureRate(mtbf_s, "own", 3, 3 * mtbf_s, "s", "test")


def simulate_wall_per_work(tau: float, c: float, r: float, m: float, segments: int, seed: int) -> float:
    """Mean wall seconds per second of work, by simulation: each segment is τ of work then a save
    of C; failures arrive at rate 1/M at any moment (restarts included); a failure loses the
    segment so far, then R of restart must pass without a failure before the segment starts over."""
    rng = np.random.default_rng(seed)
    length = tau + c
    wall = np.zeros(segments)
    active = np.ones(segments, dtype=bool)
    restarting = np.zeros(segments, dtype=bool)
    while active.any():
        idx = np.flatnonzero(active & restarting)
        if len(idx):
            f = rng.exponential(m, len(idx))
            ok = f >= r
            wall[idx] += np.where(ok, r, f)
            restarting[idx[ok]] = False
        idx = np.flatnonzero(active & ~restarting)
        if len(idx):
            f = rng.exponential(m, len(idx))
            done = f >= length
            wall[idx] += np.where(done, length, f)
            active[idx[done]] = False
            restarting[idx[~done]] = True
    return float(wall.mean() / tau)


@pytest.mark.parametrize(
    ("tau", "c", "r", "m"),
    [
        (1800.0, 120.0, 300.0, 6 * 3600.0),  # a big job: saves every 30 min, fails every 6 h
        (600.0, 30.0, 60.0, 3600.0),
        (3600.0, 300.0, 900.0, 4 * 3600.0),  # failures often relative to the interval
        (200.0, 5.0, 0.0, 1000.0),  # no restart time
    ],
)
def test_wall_per_work_matches_a_simulation_of_exponential_failures(tau, c, r, m):
    simulated = simulate_wall_per_work(tau, c, r, m, segments=200_000, seed=7)
    assert simulated == pytest.approx(wall_per_work(tau, checkpoint_s=c, restart_s=r, mtbf_s=m), rel=0.02)


def test_wall_per_work_without_failures_is_the_save_overhead():
    # M → ∞: W → (τ + C) / τ.
    assert wall_per_work(1000.0, checkpoint_s=50.0, restart_s=100.0, mtbf_s=1e12) == pytest.approx(1.05, rel=1e-6)


@settings(max_examples=examples(200), deadline=None)
@given(
    c=st.floats(0.5, 600.0),
    ratio=st.floats(1e3, 1e6),  # M / C: saves are short next to the time between failures
    r=st.floats(0.0, 3600.0),
)
def test_the_exact_optimum_is_the_minimum_and_near_young_daly_when_saves_are_short(c, ratio, r):
    m = c * ratio
    best = optimum_interval(c, m)
    star = young_daly(c, m)
    # Daly: τ_opt ≈ τ*(1 + sqrt(C/2M)/3 + ...) − C, so the two agree to a few sqrt(C/M).
    assert best == pytest.approx(star, rel=3 * math.sqrt(c / m) + 1e-9)
    w_best = wall_per_work(best, checkpoint_s=c, restart_s=r, mtbf_s=m)
    grid = np.geomspace(best / 20, best * 20, 4001)
    w_grid = wall_per_work(grid, checkpoint_s=c, restart_s=r, mtbf_s=m)
    assert w_best <= float(np.min(w_grid)) * (1 + 1e-12)
    assert w_best >= 1.0


@settings(max_examples=examples(200), deadline=None)
@given(c=st.floats(0.1, 1e4), ratio=st.floats(0.2, 1e6))
def test_the_optimum_solves_the_stationarity_equation(c, ratio):
    m = c * ratio  # saves up to 5 times the time between failures
    best = optimum_interval(c, m)
    assert 0 < best <= m
    x = best / m
    # e^{x + C/M} (x − 1) + 1 = 0 at the root; the bisection lands on it to float precision (the
    # left side's slope is x·e^{x+C/M}, so a float step in x moves it by about that much).
    assert (x - 1) * math.expm1(x + c / m) + x == pytest.approx(0.0, abs=1e-12 * math.exp(x + c / m))


@settings(max_examples=examples(200), deadline=None)
@given(
    c=st.floats(1.0, 900.0),
    tau0=st.floats(60.0, 5e4),
    r=st.floats(0.0, 3600.0),
    m=st.floats(3600.0, 1e7),
    usd=st.floats(1e-4, 1.0),
    lost=st.floats(0.0, 1e6),
    saves_async=st.booleans(),
)
def test_savings_are_non_negative_add_up_and_never_exceed_the_lost_dollars(c, tau0, r, m, usd, lost, saves_async):
    advice = checkpoint_advice(
        checkpoint_s=c, interval_s=tau0, restart_s=r, rate=rate(m), cost_usd_per_s=usd, lost_usd_per_month=lost,
        saves_async=saves_async,
    )  # fmt: skip
    parts = [a.saving_usd_per_month for a in (advice.async_advice, advice.interval) if a is not None]
    assert all(p >= 0 for p in parts)
    assert advice.saving_usd_per_month == pytest.approx(sum(parts))
    assert advice.saving_usd_per_month <= lost * (1 + 1e-12)
    if advice.interval is not None and not advice.interval.capped and not (advice.async_advice and advice.async_advice.capped):
        # Uncapped, the two savings are one sequence: cost · (1 − W2 / W0), nothing counted twice.
        w0 = wall_per_work(tau0, checkpoint_s=c, restart_s=r, mtbf_s=m)
        w2 = advice.interval.wall_per_work_best
        assert advice.saving_usd_per_month == pytest.approx(usd * SECONDS_PER_MONTH * (1 - w2 / w0), rel=1e-9, abs=1e-9)


@settings(max_examples=examples(100), deadline=None)
@given(c=st.floats(1.0, 900.0), r=st.floats(0.0, 3600.0), m=st.floats(3600.0, 1e7))
def test_no_saving_when_the_interval_is_already_the_best(c, r, m):
    best = optimum_interval(c, m)
    advice = checkpoint_advice(
        checkpoint_s=c, interval_s=best, restart_s=r, rate=rate(m), cost_usd_per_s=0.01, lost_usd_per_month=1e9,
        saves_async=True,
    )  # fmt: skip
    assert advice.async_advice is None
    assert advice.interval is not None
    assert advice.interval.saving_usd_per_month == pytest.approx(0.0, abs=1e-9)


def test_the_saving_per_month_is_the_documented_formula():
    c, tau0, r, m, usd = 120.0, 7200.0, 600.0, 8 * 3600.0, 32 * 4.0 / 3600  # 32 GPUs at $4/GPU-h
    advice = checkpoint_advice(
        checkpoint_s=c, interval_s=tau0, restart_s=r, rate=rate(m), cost_usd_per_s=usd, lost_usd_per_month=1e9,
        saves_async=True,
    )  # fmt: skip
    assert advice.interval is not None
    best = advice.interval.optimum_s
    w = lambda t: wall_per_work(t, checkpoint_s=c, restart_s=r, mtbf_s=m)  # noqa: E731
    expected = (w(tau0) - w(best)) * usd * (730 * 3600 / w(tau0))
    assert advice.interval.saving_usd_per_month == pytest.approx(expected, rel=1e-12)
    assert advice.interval.young_daly_s == pytest.approx(math.sqrt(2 * c * m))
    # The chart's curve holds today's interval and the optimum, with W at its minimum there.
    curve = advice.interval.curve
    xs = [p["interval_s"] for p in curve]
    assert xs[0] <= best <= xs[-1] and xs[0] <= tau0 <= xs[-1]
    assert min(p["wall_per_work"] for p in curve) >= w(best) * (1 - 1e-12)


def test_async_advice_without_a_failure_rate_is_the_blocking_share():
    c, tau0, usd = 60.0, 1200.0, 0.05
    advice = checkpoint_advice(
        checkpoint_s=c, interval_s=tau0, restart_s=0.0, rate=OWN, cost_usd_per_s=usd, lost_usd_per_month=1e9,
    )  # fmt: skip
    assert advice.interval is None
    assert any("no interval advice" in n for n in advice.notes)
    a = advice.async_advice
    assert a is not None and not a.staged_measured
    assert a.staged_s == pytest.approx(ASYNC_STAGE_SHARE * c)
    assert a.blocking_share == pytest.approx(c / (tau0 + c))
    assert a.saving_usd_per_month == pytest.approx(usd * SECONDS_PER_MONTH * (c - ASYNC_STAGE_SHARE * c) / (tau0 + c))
    assert "assumed" in a.assumption


def test_async_advice_uses_the_measured_staging_time_and_its_threshold():
    measured = checkpoint_advice(
        checkpoint_s=60.0, interval_s=1200.0, restart_s=0.0, rate=OWN, cost_usd_per_s=0.05, lost_usd_per_month=1e9,
        staged_s=3.0,
    )  # fmt: skip
    assert measured.async_advice is not None and measured.async_advice.staged_measured
    assert measured.async_advice.staged_s == 3.0
    # 20 s every 1,200 s is 1.7%: below the 2% threshold, no async advice.
    small = checkpoint_advice(
        checkpoint_s=20.0, interval_s=1200.0, restart_s=0.0, rate=OWN, cost_usd_per_s=0.05, lost_usd_per_month=1e9,
    )  # fmt: skip
    assert small.async_advice is None and small.saving_usd_per_month == 0.0


def test_the_cap_cuts_async_first_then_the_interval():
    advice = checkpoint_advice(
        checkpoint_s=300.0, interval_s=1800.0, restart_s=600.0, rate=rate(4 * 3600.0), cost_usd_per_s=0.1,
        lost_usd_per_month=100.0,
    )  # fmt: skip
    assert advice.async_advice is not None and advice.async_advice.capped
    assert advice.async_advice.saving_usd_per_month == pytest.approx(100.0)
    assert advice.interval is not None and advice.interval.saving_usd_per_month == 0.0
    assert advice.saving_usd_per_month == pytest.approx(100.0)


def test_no_saves_no_advice():
    advice = checkpoint_advice(
        checkpoint_s=None, interval_s=None, restart_s=0.0, rate=rate(3600.0), cost_usd_per_s=1.0, lost_usd_per_month=10.0
    )
    assert advice.async_advice is None and advice.interval is None and advice.saving_usd_per_month == 0
    assert advice.notes == ("no checkpoint advice: the job reported no checkpoint saves",)
    assert advice.to_json()["async"] is None


def test_failure_rate_minimum_evidence():
    own = failure_rate(own_failures=OWN_MIN_FAILURES, own_wall_s=7200.0)
    assert own.source == "own" and own.mtbf_s == 3600.0
    # One failure of its own: the project's 3 over 150 GPU-hours, for an 8-GPU job.
    project = failure_rate(own_failures=1, own_wall_s=7200.0, project_failures=3, project_gpu_hours=150.0, gpu_count=8)
    assert project.source == "project"
    assert project.mtbf_s == pytest.approx(3600.0 / (3 / 150 * 8))
    # Below both minimums: no rate, and the reason names what was missing.
    for kwargs in ({"project_failures": 2, "project_gpu_hours": 500.0}, {"project_failures": 5, "project_gpu_hours": 99.0}):
        none = failure_rate(own_failures=1, own_wall_s=7200.0, gpu_count=8, **kwargs)
        assert none.mtbf_s is None and none.source is None
        assert "too little evidence" in none.reason


def test_the_worked_example_of_the_docs():
    # docs/waste-model.md, section 13: 64 H100s at $4/GPU-h, 4 failures in 32 h, 120 s
    # synchronous saves every 30 min, 10 min to restart; the job lost $20,000 a month.
    rate = failure_rate(own_failures=4, own_wall_s=32 * 3600)
    assert rate.mtbf_s == 28_800
    cost = 64 * 4 / 3600
    advice = checkpoint_advice(
        checkpoint_s=120, interval_s=1800, restart_s=600, rate=rate, cost_usd_per_s=cost, lost_usd_per_month=20_000
    )
    assert round(advice.cost_usd_per_month, 2) == 186_880.00
    assert round(wall_per_work(1800, checkpoint_s=120, restart_s=600, mtbf_s=28_800), 5) == 1.12625
    a, i = advice.async_advice, advice.interval
    assert a is not None and i is not None
    assert (a.staged_s, round(a.blocking_share, 4), round(a.saving_usd_per_month, 2)) == (12.0, 0.0625, 10_845.94)
    assert (round(i.young_daly_s), round(i.optimum_s), round(i.wall_per_work_now, 5), round(i.wall_per_work_best, 5)) == (
        831, 823, 1.06088, 1.05110,
    )  # fmt: skip
    assert round(i.saving_usd_per_month, 2) == 1_622.68
    assert round(advice.saving_usd_per_month, 2) == 12_468.62
    # Were the saves already asynchronous (the same 120 s blocking): the interval alone.
    alone = checkpoint_advice(
        checkpoint_s=120, interval_s=1800, restart_s=600, rate=rate, cost_usd_per_s=cost, lost_usd_per_month=20_000,
        saves_async=True,
    )  # fmt: skip
    assert alone.interval is not None
    assert (round(alone.interval.young_daly_s), round(alone.interval.optimum_s)) == (2629, 2550)
    assert round(alone.interval.wall_per_work_best, 5) == 1.12023
    assert round(alone.saving_usd_per_month, 2) == 998.93

"""A job's lost work in the pure model (docs/waste-model.md, "Jobs: rework, restarts and
checkpoints"): rework steps, restarts and checkpoint phases are idle labels inside the exact
partition, priced from idle's cents, never credited FLOPs, and never claimed as the run's own
recoverable dollars. Pure: no database."""

from __future__ import annotations

import dataclasses
import random
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.model import Phase, PriceSegment, RunConfig, RunInputs, StepColumns, analysis_from, analyze
from phantomhub.waste.core.recommendations import claims_partition, recommend
from tests.examples import examples
from tests.waste.factories import S, exact_cost_usd, round_half_up_cents, steps
from tests.waste.strategies import runs
from tests.waste.test_waste_incremental import assert_same_analysis, feed_in_batches


def hand_run(**job: object) -> RunInputs:
    """One rank on one GPU at $36/GPU-h (one cent a second), allocated at 0 and released at 250 s.

    | 0-100 s   | start-up, with a restore phase at 90-95 s                      |
    | 100-200 s | steps 0..9 of 10 s: 4 s forward, 2 s backward, 4 s unmeasured   |
    |           | a checkpoint phase at 156-160 s, inside step 5's unmeasured tail |
    | 200-250 s | tear-down                                                      |

    Each step's 1.5 TFLOP take 3 s at 50% of a 1 TFLOP/s peak: 3 s useful, 3 s below target.
    """
    rows = steps(starts_ns=[(100 + 10 * i) * S for i in range(10)], dur_ns=10 * S, forward_ns=4 * S,
                 backward_ns=2 * S, flops=1.5e12)  # fmt: skip
    config = RunConfig(
        gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12,
        price_segments=(PriceSegment(0, 10**6 * S, Decimal(36)),),
        phases=(Phase("restore", 90 * S, 95 * S), Phase("checkpoint", 156 * S, 160 * S)),
        **job,  # type: ignore[arg-type]
    )  # fmt: skip
    return RunInputs(config=config, end_ns=250 * S, steps=[rows])


def idle_of(a):
    return {f.label: (f.gpu_seconds, f.usd_cents) for f in a.idle}


def test_rework_restart_and_checkpoint_by_hand():
    a = analyze(hand_run(rework_through_step=3, restart_before_first_step=True, restart_after_last_step=True))
    # Every second in one label: 40 s rework (steps 0-3), restart 95 s before (100 s less the
    # 5 s restore) + 50 s after, 5 s restore, 4 s checkpoint, 56 s of steps 4-9 (60 s less 4).
    assert idle_of(a) == {
        "gap": (0.0, 0),
        "rework": (40.0, 40),
        "restart": (145.0, 145),
        "phase:checkpoint": (4.0, 4),
        "phase:restore": (5.0, 5),
    }
    assert a.cost_cents == 250
    assert sum(c.usd_cents for c in a.categories) == 250
    assert {c.category: c.gpu_seconds for c in a.categories} == {
        "useful_compute": 18.0,  # 6 steps × 3 s
        "compute_inefficiency": 18.0,
        "data_stall": 0.0,
        "comm_exposed": 0.0,
        "host_overhead": 20.0,  # 6 × 4 s, less the 4 s checkpoint taken from step 5's tail
        "idle": 194.0,
    }
    lost = a.lost
    assert [(c.cause, c.gpu_seconds, c.usd_cents) for c in lost.causes] == [
        ("rework", 40.0, 40),
        ("restart", 145.0, 145),
        ("checkpoint", 9.0, 9),
    ]
    assert (lost.gpu_seconds, lost.usd_cents) == (194.0, 194)
    assert lost.restart_gpu_seconds == {"before": 95.0, "after": 50.0}
    assert lost.restart_cents == {"before": 95, "after": 50}
    assert a.ranks[0].lost_gpu_seconds == {"rework": 40.0, "restart": 145.0, "checkpoint": 9.0}
    assert a.ranks[0].lost_usd == pytest.approx({"rework": 0.40, "restart": 1.45, "checkpoint": 0.09})
    assert a.explain["lost_usd"].value == 1.94
    assert a.explain["lost.checkpoint.usd"].value == 0.09
    # FLOPs of the rework steps are not credited: 6 steps' worth, over 56 s of step time.
    assert a.ranks[0].flops == pytest.approx(6 * 1.5e12)
    assert a.mfu_step_time == pytest.approx(6 * 1.5e12 / (1e12 * 56))
    assert a.mfu == pytest.approx(6 * 1.5e12 / (1e12 * 250))
    assert a.windows.steps and sum(a.windows.steps) == pytest.approx(6)
    windows_flops = np.nansum(np.array(a.windows.mfu, dtype=float)) * a.windows.width_ns / 1e9 * 1e12
    assert windows_flops == pytest.approx(6 * 1.5e12, rel=1e-9)
    assert a.steps == 10
    # None of it is the run's own recoverable: the job's advice claims it (a dollar claimed once).
    idle_recoverable = {f.label: f.recoverable_cents for f in a.idle}
    assert idle_recoverable == dict.fromkeys(idle_recoverable, 0)
    assert "IDLE" not in claims_partition(a)
    idle_rec = next(r for r in recommend(a) if r.code == "IDLE")
    assert idle_rec.saving_usd is None


def test_without_a_job_the_same_run_keeps_its_old_labels():
    a = analyze(hand_run())
    assert idle_of(a) == {
        "startup": (95.0, 95),
        "gap": (0.0, 0),
        "teardown": (50.0, 50),
        "phase:checkpoint": (4.0, 4),
        "phase:restore": (5.0, 5),
    }
    # Only the checkpoint phases are lost work outside a job (they are the save's own cost).
    assert [(c.cause, c.usd_cents) for c in a.lost.causes] == [("rework", 0), ("restart", 0), ("checkpoint", 9)]
    assert a.ranks[0].flops == pytest.approx(10 * 1.5e12)


def test_an_attempt_without_steps_is_all_restart():
    run = hand_run(restart_after_last_step=True)
    a = analyze(dataclasses.replace(run, steps=[]))
    assert idle_of(a) == {"restart": (241.0, 241), "phase:checkpoint": (4.0, 4), "phase:restore": (5.0, 5)}


def test_the_fingerprint_carries_the_job_fields():
    base = hand_run().config
    for change in ({"rework_through_step": 3}, {"restart_before_first_step": True}, {"restart_after_last_step": True}):
        other = dataclasses.replace(base, **change)
        assert other.fingerprint() != base.fingerprint()
        assert RunConfig.from_fingerprint(other.fingerprint()) == other
    # A fingerprint stored before the fields existed reads as "no job".
    old = {k: v for k, v in base.fingerprint().items() if "rework" not in k and "restart" not in k}
    assert RunConfig.from_fingerprint(old) == base


def _label_seconds(a) -> dict[str, float]:
    return {f.label: f.gpu_seconds for f in a.idle}


def _without_flops_through(run: RunInputs, k: int) -> RunInputs:
    batches = []
    for b in run.steps:
        if b.flops is None:
            batches.append(b)
            continue
        cols = {c: getattr(b, c) for c in b.__dataclass_fields__ if c not in ("rank", "host")}
        cols["flops"] = np.where(b.step <= k, np.nan, b.flops)
        batches.append(StepColumns(rank=b.rank, host=b.host, **cols))
    return dataclasses.replace(run, steps=batches)


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(-1, 25), st.booleans(), st.booleans())
def test_rework_and_restart_move_time_between_labels_and_nothing_else(run, k, before, after):
    base = analyze(run)
    job = analyze(
        dataclasses.replace(
            run,
            config=dataclasses.replace(
                run.config, rework_through_step=k, restart_before_first_step=before, restart_after_last_step=after
            ),
        )
    )
    # The exact partition: billed time and the cost to the cent, categories and idle labels alike.
    assert job.billed_gpu_seconds == base.billed_gpu_seconds
    assert job.cost_cents == base.cost_cents == round_half_up_cents(exact_cost_usd(run.config, run.end_ns))
    assert sum(c.usd_cents for c in job.categories) == job.cost_cents
    assert sum(f.usd_cents for f in job.idle) == job.category("idle").usd_cents
    assert sum(c.gpu_seconds for c in job.categories) == pytest.approx(job.billed_gpu_seconds, rel=1e-9, abs=1e-6)
    # Rework takes the rework rows' step time out of the five step categories, nothing more.
    step_base = sum(c.gpu_seconds for c in base.categories if c.category != "idle")
    step_job = sum(c.gpu_seconds for c in job.categories if c.category != "idle")
    lb, lj = _label_seconds(base), _label_seconds(job)
    assert step_job + lj.get("rework", 0.0) == pytest.approx(step_base, rel=1e-9, abs=1e-6)
    for label in lb.keys() - {"startup", "teardown", "no_steps"}:
        assert lj.get(label, 0.0) == pytest.approx(lb[label], rel=1e-9, abs=1e-6), label
    restart = lb.get("startup", 0.0) * before + lb.get("teardown", 0.0) * after + lb.get("no_steps", 0.0) * (before or after)
    assert lj.get("restart", 0.0) == pytest.approx(restart, rel=1e-9, abs=1e-6)
    # The lost causes are their labels' share of idle's cents, exactly.
    idle_cents = {f.label: f.usd_cents for f in job.idle}
    assert job.lost.cause("rework").usd_cents == idle_cents.get("rework", 0)
    assert job.lost.cause("restart").usd_cents == idle_cents.get("restart", 0)
    assert job.lost.cause("checkpoint").usd_cents == 0  # the strategy's phases are p0, p1, ...
    assert job.lost.usd_cents <= job.category("idle").usd_cents
    assert sum(job.lost.restart_cents.values()) == job.lost.cause("restart").usd_cents
    assert sum(job.lost.restart_gpu_seconds.values()) == pytest.approx(lj.get("restart", 0.0), rel=1e-9, abs=1e-6)
    # FLOPs of the rework rows are not credited: as if they had reported none.
    blind = analyze(_without_flops_through(run, k))
    assert sum(r.flops for r in job.ranks) == pytest.approx(sum(r.flops for r in blind.ranks), rel=1e-9)
    assert job.category("useful_compute").gpu_seconds <= base.category("useful_compute").gpu_seconds + 1e-6
    # Nothing of the lost labels is the run's own recoverable.
    assert all(f.recoverable_cents == 0 for f in job.idle if f.label in ("rework", "restart"))


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 10), st.randoms(use_true_random=False), st.booleans())
def test_a_live_attempt_with_rework_ends_where_a_from_scratch_analysis_does(run, k, rnd, roundtrip):
    config = dataclasses.replace(run.config, rework_through_step=k, restart_before_first_step=True)
    last = max((int((b.t_start_ns + b.dur_ns).max()) for b in run.steps), default=run.end_ns)
    run = RunInputs(config=config, end_ns=max(run.end_ns, last) + S, steps=run.steps, samples=run.samples)
    full = analyze(run)
    live = analysis_from(feed_in_batches(run, random.Random(rnd.random()), roundtrip), end_ns=run.end_ns)
    assert [c.usd_cents for c in live.categories] == [c.usd_cents for c in full.categories]
    assert_same_analysis(full.to_json(), live.to_json())

"""Chart windows: at least a step wide, each step spread over the windows it overlaps, and an MFU
that never exceeds what the GPUs can do unless the reported FLOPs themselves claim more."""

from __future__ import annotations

import numpy as np
import pytest

from phantomhub.waste.core.model import (
    Phase,
    RunAccumulator,
    RunConfig,
    RunInputs,
    analysis_from,
    analyze,
)
from tests.waste import state_fixture
from tests.waste.factories import MS, S, steps
from tests.waste.test_waste_incremental import assert_same_analysis

H100_BF16 = 989.4e12
OVER_PEAK = "reported FLOPs exceed the GPU's dense peak"


def slow_steps_run(n: int = 300, mfu: float = 0.19, seed: int = 1) -> RunInputs:
    """The run the UI showed: ~41 s steps at 19% MFU on 2 GPUs, a minute of start-up and tear-down.
    About 12,400 s long, so the span alone would allow 8.192 s windows (2,000 x 8.192 s > 12,400 s)."""
    rng = np.random.default_rng(seed)
    dur = rng.integers(40_000 * MS, 42_000 * MS, n)
    starts = 60 * S + np.concatenate(([0], np.cumsum(dur)[:-1]))
    batches = [
        steps(
            rank=r,
            host=f"node-{r}",
            starts_ns=starts,
            dur_ns=dur,
            data_ns=dur // 10,
            forward_ns=dur * 3 // 10,
            backward_ns=dur * 4 // 10,
            comm_ns=dur // 10,
            flops=mfu * H100_BF16 * dur / 1e9,
            tokens=4096,
        )
        for r in range(2)
    ]
    config = RunConfig(gpu_count=2, world_size=2, allocation_start_ns=0, peak_flops_per_gpu=H100_BF16, dtype="bf16")
    return RunInputs(config=config, end_ns=int(starts[-1] + dur[-1] + 60 * S), steps=batches)


def window_lengths_s(a) -> np.ndarray:
    w = a.windows
    t0 = np.array(w.t_start_ns)
    return (np.minimum(t0 + w.width_ns, a.end_ns) - t0) / 1e9


def test_windows_are_at_least_as_wide_as_the_steps_and_show_the_runs_mfu():
    a = analyze(slow_steps_run())
    w = a.windows

    # 9 in 10 steps are <= 42 s: the smallest 1 ms x 2^k width that holds them is 65.536 s
    # (the span alone would give 8.192 s, and four windows in five without a step).
    assert w.width_ns == 65_536 * MS
    assert len(w) == 190 and len(w) <= 2000
    assert a.mfu_step_time == pytest.approx(0.19)
    inside = [i for i, t in enumerate(w.t_start_ns) if 60 * S + w.width_ns <= t and t + w.width_ns <= a.end_ns - 60 * S]
    assert len(inside) > 150
    for i in inside:  # every window wholly inside the training stretch
        assert w.steps[i] > 0.9
        assert w.mfu[i] == pytest.approx(0.19, rel=1e-9)
        assert w.step_ms[i] == pytest.approx(41_000, rel=0.03)
        assert w.data_ms[i] + w.forward_ms[i] + w.backward_ms[i] + w.comm_ms[i] + w.host_ms[i] == pytest.approx(w.step_ms[i])
        assert w.tokens_per_s[i] == pytest.approx(2 * 4096 / 41, rel=0.03)
    assert max(m for m in w.mfu if m is not None) <= 0.19 + 1e-12
    assert not any(OVER_PEAK in x for x in a.warnings)


def test_windows_add_up_to_the_runs_flops_tokens_and_step_time():
    a = analyze(slow_steps_run())
    w = a.windows
    length = window_lengths_s(a)

    flops = sum(m * s for m, s in zip(w.mfu, length, strict=True)) * H100_BF16 * 2
    assert flops == pytest.approx(sum(float(b.flops.sum()) for b in slow_steps_run().steps), rel=1e-9)
    assert sum(t * s for t, s in zip(w.tokens_per_s, length, strict=True) if t is not None) == pytest.approx(2 * 300 * 4096)
    step_ms = sum(m * n for m, n in zip(w.step_ms, w.steps, strict=True) if m is not None)
    assert step_ms / 1e3 == pytest.approx(a.explain["mfu_step_time"].inputs["step_seconds"], rel=1e-9)
    assert sum(w.step_starts) == 600 and sum(w.steps) == pytest.approx(600)


def test_a_step_longer_than_a_window_is_spread_over_every_window_it_covers():
    # 50 steps of 100 ms, one 10 s step (a long stall), 50 more: windows follow the 100 ms steps
    # (128 ms), so the long step covers 78 windows, none of which saw it start.
    starts = [i * 100 * MS for i in range(50)] + [5 * S] + [15 * S + i * 100 * MS for i in range(50)]
    durs = [100 * MS] * 50 + [10 * S] + [100 * MS] * 50
    run = RunInputs(
        config=RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12),
        end_ns=20 * S,
        steps=[steps(starts_ns=starts, dur_ns=durs, forward_ns=durs, flops=[0.5e12 * d / S for d in durs])],
    )

    w = analyze(run).windows

    assert w.width_ns == 128 * MS
    covered = [i for i, t in enumerate(w.t_start_ns) if t >= 5 * S and t + w.width_ns <= 15 * S]
    assert len(covered) == 77
    for i in covered:
        assert w.step_starts[i] == 0
        assert w.steps[i] == pytest.approx(0.128 / 10)
        assert w.step_ms[i] == pytest.approx(10_000)
        assert w.forward_ms[i] == pytest.approx(10_000)
        assert w.mfu[i] == pytest.approx(0.5)


def test_a_gap_between_steps_shows_as_windows_without_steps():
    run = RunInputs(
        config=RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12),
        end_ns=20 * S,
        steps=[steps(starts_ns=[0, S, 18 * S, 19 * S], dur_ns=S, forward_ns=S, flops=0.4e12)],
    )

    w = analyze(run).windows

    assert w.width_ns == 1024 * MS
    gap = [i for i, t in enumerate(w.t_start_ns) if t > 2 * S and t + w.width_ns < 18 * S]
    assert gap
    for i in gap:
        assert (w.steps[i], w.step_ms[i], w.mfu[i]) == (0, None, 0.0)


def test_window_mfu_exceeds_one_only_when_the_flops_claim_more_than_peak_and_that_is_flagged():
    honest = analyze(slow_steps_run(mfu=1.0))
    inflated = analyze(slow_steps_run(mfu=2.5))

    assert max(m for m in honest.windows.mfu if m is not None) <= 1 + 1e-9
    assert honest.mfu_step_time == pytest.approx(1.0)
    assert not any(OVER_PEAK in x for x in honest.warnings)
    # FLOPs at 2.5x peak: every figure says so, and so does a warning.
    assert inflated.mfu_step_time == pytest.approx(2.5)
    assert max(m for m in inflated.windows.mfu if m is not None) == pytest.approx(2.5)
    warning = next(x for x in inflated.warnings if OVER_PEAK in x)
    assert "600 of 600 step(s)" in warning and "check flops or dtype" in warning


def test_mfu_over_step_time_counts_only_the_flops_of_kept_step_time():
    # Peak 1e12. A 2 s step that began 1 s before the allocation (half its work is not billed),
    # a step wholly inside an eval phase, and an ordinary step: each does 80% of peak over its
    # own row, so no figure may claim more than 80%.
    config = RunConfig(
        gpu_count=1,
        world_size=1,
        allocation_start_ns=10 * S,
        peak_flops_per_gpu=1e12,
        phases=(Phase("eval", 11 * S, 12 * S),),
    )
    run = RunInputs(
        config=config,
        end_ns=13 * S,
        steps=[
            steps(
                starts_ns=[9 * S, 11 * S, 12 * S], dur_ns=[2 * S, S, S], forward_ns=[2 * S, S, S], flops=[1.6e12, 0.8e12, 0.8e12]
            )
        ],
    )

    a = analyze(run)

    assert a.mfu_step_time == pytest.approx(0.8)  # (0.8e12 + 0 + 0.8e12) FLOPs in 2 s of steps
    assert a.mfu == pytest.approx(1.6 / 3)
    assert max(m for m in a.windows.mfu if m is not None) <= 0.8 + 1e-12
    assert not any(OVER_PEAK in x for x in a.warnings)


def test_a_live_run_ends_with_the_same_windows_as_a_from_scratch_analysis():
    # Batches of 10 steps: early on the span allows 512 ms windows, so steps are spread over many
    # windows that are merged later, and the step-width rule only applies at the end.
    run = slow_steps_run(n=120)
    acc = RunAccumulator(run.config)
    for lo in range(0, 120, 10):
        for b in run.steps:
            acc.add_steps(b.take(np.arange(lo, lo + 10)))
        acc = state_fixture.reloaded(acc)

    full, live = analyze(run), analysis_from(acc, end_ns=run.end_ns)

    assert full.windows.width_ns == live.windows.width_ns == 65_536 * MS
    assert_same_analysis(full.to_json(), live.to_json())

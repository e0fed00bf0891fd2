"""Recoverable dollars are counterfactuals against demonstrated references, never fixed shares.

Each expected figure is computed here by hand from the run's known composition (the oracle), not
by the model's code: ``usd x (1 - reference / run_value)`` in whole cents, floored.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.evidence import STRETCH_MIN_STEPS, duration_text, percent_text
from phantomhub.waste.core.model import (
    Peer,
    PriceSegment,
    References,
    RunConfig,
    RunInputs,
    RunProfile,
    SystemSamples,
    analyze,
)
from phantomhub.waste.core.recommendations import recommend
from tests.examples import examples
from tests.waste.factories import MS, S, steps
from tests.waste.strategies import runs
from tests.waste.test_waste_explain import busy_run
from tests.waste.test_waste_model_exact import worked_example_peer, worked_example_refs, worked_example_run


def _floor_cents(usd_cents: int, fraction: float) -> int:
    return math.floor(usd_cents * fraction + 1e-9)


def test_a_run_with_nothing_to_compare_with_calls_nothing_recoverable():
    a = analyze(worked_example_run())  # uniform steps, no peers, no other project runs

    assert a.recoverable_usd == 0
    for fig in a.categories:
        assert fig.recoverable_cents == fig.recoverable_low_cents == 0
        # Only the configured target MFU reaches further, and only as the high end of the range.
        assert fig.recoverable_high_cents == (fig.usd_cents - 1 if fig.category == "compute_inefficiency" else 0)
        assert fig.evidence.kind in ("none", "own_stretch"), fig.category
        if fig.category != "useful_compute" and fig.usd_cents:
            assert "No" in fig.evidence.summary or "no better level" in fig.evidence.summary.lower()
    assert all(r.saving_usd in (None, 0.0) for r in recommend(a))


def test_worked_example_with_peers_prices_each_counterfactual():
    run = dataclasses.replace(worked_example_run(), refs=worked_example_refs())
    a = analyze(run)
    data, compute, idle = a.category("data_stall"), a.category("compute_inefficiency"), a.category("idle")

    # Data: run 100 ms/step; comparable peers 20 and 40 ms: better quartile 25, median 30, best 20.
    assert data.evidence.kind == "peers" and data.evidence.peer_run_ids == ("p-fast", "p-slow")
    assert data.evidence.reference_value == 25.0
    assert (data.recoverable_cents, data.recoverable_low_cents, data.recoverable_high_cents) == (
        _floor_cents(267, 0.75), _floor_cents(267, 0.70), _floor_cents(267, 0.80),
    )  # fmt: skip
    # Compute: run MFU over compute 1/3; peers 0.4 and 0.5 -> better quartile 0.475 (below the 0.5 target).
    assert compute.evidence.kind == "peers"
    assert compute.recoverable_cents == min(_floor_cents(1333 + 667, 1 - (1 / 3) / 0.475), 667)
    assert compute.recoverable_high_cents == min(_floor_cents(2000, 1 - (1 / 3) / 0.5), 667)
    # Idle: start-up 600 s vs the project's median 180 s; tear-down 300 s vs 60 s; the eval is work.
    startup = next(i for i in a.idle if i.label == "startup")
    teardown = next(i for i in a.idle if i.label == "teardown")
    assert startup.recoverable_cents == _floor_cents(533, 1 - 180 / 600)
    assert teardown.recoverable_cents == _floor_cents(267, 1 - 60 / 300)
    assert next(i for i in a.idle if i.label == "phase:eval").recoverable_cents == 0
    assert idle.recoverable_cents == startup.recoverable_cents + teardown.recoverable_cents
    # Comm and host overhead: the peers were no better, so nothing there.
    assert a.category("comm_exposed").recoverable_cents == 0
    assert a.category("host_overhead").recoverable_cents == 0
    assert a.recoverable_usd * 100 == sum(f.recoverable_cents for f in a.categories)


def test_the_run_s_own_best_stretch_is_evidence():
    # 1,000 one-second steps: the loader keeps up (5 ms) for the last 400, stalls (50 ms) before.
    n = 1000
    data = [50 * MS] * 600 + [5 * MS] * 400
    batch = steps(starts_ns=[i * S for i in range(n)], dur_ns=S, data_ns=data, forward_ns=900 * MS)
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, price_segments=(PriceSegment(0, 10**6 * S, 36),))
    a = analyze(RunInputs(config=config, end_ns=n * S, steps=[batch]))
    fig = a.category("data_stall")

    mean_ms = (600 * 50 + 400 * 5) / n
    assert fig.evidence.kind == "own_stretch"
    assert fig.evidence.run_value == mean_ms
    assert abs(fig.evidence.reference_value - 5.0) < 1e-9
    assert fig.recoverable_cents == _floor_cents(fig.usd_cents, 1 - 5 / mean_ms)
    window = fig.evidence.window
    assert window is not None and window.steps >= STRETCH_MIN_STEPS
    assert window.t_start_ns >= 600 * S - S and window.t_end_ns <= n * S
    # Low end: the better quartile of consecutive 200-step stretches (3 stalled, 2 clean): 5 ms too.
    assert fig.recoverable_low_cents <= fig.recoverable_cents <= fig.recoverable_high_cents


def test_peers_with_another_step_size_are_not_compared():
    peers = (Peer("twice-the-flops", worked_example_peer(data_ns_per_step=1e6, flops_per_step=0.5 * 989.4e12)),)
    run = dataclasses.replace(worked_example_run(), refs=References(peers=peers))
    a = analyze(run)
    assert a.category("data_stall").evidence.kind != "peers"  # only its own (uniform) stretches remain
    assert a.category("data_stall").recoverable_cents == 0


def test_an_organization_cap_cuts_the_evidence_and_says_so():
    peers = (Peer("p", worked_example_peer(data_ns_per_step=0.0)),)
    run = dataclasses.replace(worked_example_run(), refs=References(peers=peers), recoverability={"data_stall": 0.5})
    fig = analyze(run).category("data_stall")
    assert fig.recoverable_cents == _floor_cents(267, 0.5) and fig.evidence.capped
    assert "Capped at 50%" in fig.evidence.summary


def test_zero_flops_on_every_step_is_not_measured_and_says_so():
    batch = steps(starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=800 * MS, flops=0.0)
    config = RunConfig(gpu_count=1, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=1e12)
    a = analyze(RunInputs(config=config, end_ns=10 * S, steps=[batch]))
    assert a.mfu is None and not a.flops_known
    assert a.category("compute_inefficiency").gpu_seconds == 0
    assert any("reported as 0 on every step" in w for w in a.warnings)


def test_more_ranks_than_world_size_use_one_scaling_for_billing_and_mfu():
    # 8 ranks each driving 1 GPU exactly at the 50% target; the run says world_size 1, gpu_count 8.
    peak = 1e12
    batches = [steps(rank=r, starts_ns=[i * S for i in range(10)], dur_ns=S, forward_ns=S, flops=0.5 * peak) for r in range(8)]
    config = RunConfig(gpu_count=8, world_size=1, allocation_start_ns=0, peak_flops_per_gpu=peak)
    a = analyze(RunInputs(config=config, end_ns=10 * S, steps=batches))
    assert a.world_size == 8
    assert a.category("compute_inefficiency").gpu_seconds == 0
    assert a.mfu_compute == 0.5
    assert any("declared world_size 1" in w for w in a.warnings)


def _contended_busy_run() -> RunInputs:
    run = busy_run()
    t = np.arange(0, run.end_ns, S)
    hot = SystemSamples(host="node-0", t_ns=t, cpu_other_pct=np.full(len(t), 80.0))
    return dataclasses.replace(run, samples=(*run.samples, hot))


def _peers_better_everywhere(a_profile: RunProfile, k: float, ids: str = "p") -> References:
    def lower(name: str) -> float | None:
        v = getattr(a_profile, name)
        return None if v is None else v * k

    better = dataclasses.replace(
        a_profile,
        data_ns_per_step=lower("data_ns_per_step"), comm_ns_per_step=lower("comm_ns_per_step"),
        host_ns_per_step=lower("host_ns_per_step"), gap_ns_per_step=lower("gap_ns_per_step"),
        startup_s=lower("startup_s"), teardown_s=lower("teardown_s"),
        mfu_compute=None if a_profile.mfu_compute is None else min(a_profile.mfu_compute / max(k, 0.05), 1.0),
    )  # fmt: skip
    peer = Peer(ids, better)
    return References(peers=(peer,), project=(peer,))


def _assert_savings_partition(a) -> None:  # type: ignore[no-untyped-def]
    recs = recommend(a)
    claimed: dict[str, float] = {}
    for r in recs:
        for cat, usd in r.claims.items():
            claimed[cat] = claimed.get(cat, 0.0) + usd
        if r.saving_usd is not None:
            assert abs(r.saving_usd - sum(r.claims.values())) < 1e-9
    for fig in a.categories:
        assert claimed.get(fig.category, 0.0) <= fig.recoverable_usd + 1e-9, fig.category
    assert sum(r.saving_usd or 0.0 for r in recs) <= a.recoverable_usd + 1e-9


def test_savings_of_a_contended_host_with_a_straggler_do_not_overlap():
    first = analyze(_contended_busy_run())
    a = analyze(dataclasses.replace(_contended_busy_run(), refs=_peers_better_everywhere(first.profile, 0.2)))
    recs = {r.code: r for r in recommend(a)}
    assert {"HOST_CONTENTION", "STRAGGLER", "COMM_EXPOSED", "IDLE"} <= set(recs)
    # node-0's ranks wait no longer than the calm hosts' ranks: the contention is not shown to cost.
    assert recs["HOST_CONTENTION"].claims == {}
    assert a.recoverable_usd > 0
    _assert_savings_partition(a)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs(), k=st.sampled_from((0.0, 0.3, 0.9)), contended=st.booleans())
def test_recommendations_never_claim_more_than_is_recoverable(run: RunInputs, k: float, contended: bool) -> None:
    if contended:  # node-0 busy with other processes over enough samples to be called contended
        start, end = run.config.allocation_start_ns, max(run.end_ns, run.config.allocation_start_ns + 1)
        hot = SystemSamples(host="node-0", t_ns=np.linspace(start, end, 12).astype(np.int64), cpu_other_pct=np.full(12, 80.0))
        run = dataclasses.replace(run, samples=(*run.samples, hot))
    first = analyze(run)
    if first.profile is None or first.steps == 0:
        _assert_savings_partition(first)
        return
    a = analyze(dataclasses.replace(run, refs=_peers_better_everywhere(first.profile, k)))
    for fig in a.categories:
        assert 0 <= fig.recoverable_low_cents <= fig.recoverable_cents <= fig.recoverable_high_cents <= fig.usd_cents
    _assert_savings_partition(a)


def test_evidence_reads_in_plain_words_with_units():
    assert (duration_text(8_325_830_000), duration_text(2_100_000), duration_text(850_000)) == ("8.33 s", "2.10 ms", "850 µs")
    a = analyze(dataclasses.replace(worked_example_run(), refs=worked_example_refs()))
    summary = a.category("data_stall").evidence.summary
    assert summary == (
        "2 comparable finished runs of this project spent 25.00 ms per step on waiting for data (their better "
        "quartile); this run spent 100.00 ms."
    )
    assert "_" not in " ".join(f.evidence.summary for f in a.categories)  # no internal names


def test_small_shares_keep_their_digits():
    assert (percent_text(0.395), percent_text(0.000075), percent_text(0.0)) == ("39.5%", "0.0075%", "0.0%")

"""Project baselines (waste/baseline.py): the rolling median of comparable finished runs' step
composition, and the difference priced at the project's recent volume.

Oracles: per-step values drawn at random and bucketed into windows the way analyses store them
(the baseline must recover each run's mean per step from the windowed means), numpy medians over
the injected runs, and, end to end, steps of known composition through ingest and analysis priced
from the price book by hand.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste import sweeps
from phantomhub.waste.baseline import (
    BASELINE_RUNS,
    PARTS,
    baseline_for,
    composition_from_result,
    delta_usd_per_month,
    run_vs_baseline,
    summary_text,
)
from phantomhub.waste.core.evidence import RunProfile
from phantomhub.waste.models import RunAnalysis
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
S = 10**9
MS = 10**6
H100_BF16 = 989.4e12
NOW = datetime.now(UTC).replace(microsecond=0)


# -- windows as analyses store them ---------------------------------------------------------------


def windowed(rng: np.random.Generator, steps: int, means_ms: dict[str, float]) -> tuple[dict[str, Any], dict[str, float]]:
    """Per-step part times drawn around ``means_ms``, bucketed into windows of a random number of
    steps (some windows empty), stored as mean per step and steps per window. Returns the windows
    and the oracle: each figure's plain mean over the drawn steps."""
    per_step = {p: rng.gamma(4.0, means_ms[p] / 4.0, steps) for p in PARTS}
    per_step["step"] = sum(per_step[p] for p in PARTS)
    cuts = np.sort(rng.choice(np.arange(1, steps), size=min(steps - 1, 40), replace=False))
    bounds = [0, *cuts.tolist(), steps]
    win: dict[str, list[Any]] = {"steps": []} | {f"{k}_ms": [] for k in ("step", *PARTS)}
    for lo, hi in itertools.pairwise(bounds):
        if rng.random() < 0.2:  # an empty window between steps (an eval, a gap)
            win["steps"].append(0.0)
            for k in ("step", *PARTS):
                win[f"{k}_ms"].append(None)
        win["steps"].append(float(hi - lo))
        for k in ("step", *PARTS):
            win[f"{k}_ms"].append(float(per_step[k][lo:hi].mean()))
    return win, {k: float(per_step[k].mean()) for k in ("step", *PARTS)}


def profile(
    flops: float | None = 1e12, tokens: float | None = 4096.0, samples: float | None = 8.0, **shape: Any
) -> dict[str, Any]:
    p = RunProfile(
        live_steps=100, ranks=shape.pop("ranks", 1), flops_per_step=flops, tokens_per_step=tokens, samples_per_step=samples,
        data_ns_per_step=None, comm_ns_per_step=None, host_ns_per_step=None, gap_ns_per_step=None,
        mfu_compute=None, startup_s=None, teardown_s=None, **shape,
    )  # fmt: skip
    return dataclasses.asdict(p)


def inject(
    tenant: Tenant,
    *,
    started: datetime,
    windows: dict[str, Any] | None = None,
    mfu: float | None = 0.3,
    gpu_key: str = "H100-SXM",
    status: str = RunStatus.FINISHED,
    complete: bool = True,
    prof: dict[str, Any] | None = None,
    name: str = "r",
) -> Run:
    """A run with a stored analysis, as analysis leaves it (no raw rows at all)."""
    run = Run.objects.create(
        project=tenant.project, name=name, status=status, gpu_model=gpu_key, allocation_start=started,
        started_at=started, last_seen_at=started + timedelta(hours=1),
        finished_at=started + timedelta(hours=1) if status != RunStatus.RUNNING else None,
    )  # fmt: skip
    RunAnalysis.objects.create(
        run=run, project=tenant.project, team=tenant.project.team, analysed_at=started + timedelta(hours=1),
        complete=complete, started_at=started, gpu_key=gpu_key, profile=prof if prof is not None else profile(),
        result={"windows": windows or {"steps": []}, "mfu_step_time": mfu},
    )  # fmt: skip
    return run


MEANS = {"data": 20.0, "forward": 30.0, "backward": 55.0, "optimizer": 6.0, "comm": 4.0, "host": 3.0}


def test_a_runs_composition_is_recovered_from_its_windowed_means() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        win, oracle = windowed(rng, int(rng.integers(50, 400)), MEANS)
        comp = composition_from_result({"windows": win, "mfu_step_time": 0.25})
        assert comp is not None
        assert comp.step_ms == pytest.approx(oracle["step"], rel=1e-9)
        for p in PARTS:
            assert comp.parts_ms[p] == pytest.approx(oracle[p], rel=1e-9)
            assert comp.share(p) == pytest.approx(oracle[p] / oracle["step"], rel=1e-9)
        assert comp.mfu_step_time == 0.25


def test_no_step_means_no_composition() -> None:
    assert composition_from_result({"windows": {"steps": [0.0, 0.0], "step_ms": [None, None]}}) is None
    assert composition_from_result({}) is None


def test_the_baseline_is_the_median_of_the_comparable_finished_runs(owner: Tenant, outsider: Tenant) -> None:
    rng = np.random.default_rng(11)
    oracles: list[dict[str, float]] = []
    mfus: list[float] = []
    start = NOW - timedelta(days=5)
    for i in range(7):  # comparable: flops within ±10%, tokens and samples equal
        scale = float(rng.uniform(0.7, 1.4))
        win, oracle = windowed(rng, 200, {p: m * scale for p, m in MEANS.items()})
        mfu = float(rng.uniform(0.2, 0.4))
        inject(owner, started=start + timedelta(hours=i), windows=win, mfu=mfu, prof=profile(flops=1e12 * (0.93 + 0.02 * i)))
        oracles.append(oracle)
        mfus.append(mfu)
    odd, _ = windowed(rng, 200, {p: m * 50 for p, m in MEANS.items()})  # far slower: must not count
    later = start + timedelta(hours=20)
    inject(owner, started=start + timedelta(hours=8), windows=odd, prof=profile(flops=1.25e12))  # other work
    inject(owner, started=start + timedelta(hours=9), windows=odd, gpu_key="A100-80GB")  # other GPU
    inject(owner, started=start + timedelta(hours=10), windows=odd, status=RunStatus.CRASHED)
    inject(owner, started=start + timedelta(hours=11), windows=odd, status=RunStatus.RUNNING, complete=False)
    inject(outsider, started=start + timedelta(hours=12), windows=odd)  # another project
    inject(owner, started=later + timedelta(minutes=30), windows=odd)  # finished after the run
    inject(owner, started=start + timedelta(hours=13), windows=odd, prof=profile(ranks=2))  # another world size
    run_win, _ = windowed(rng, 200, MEANS)
    run = inject(owner, started=later, windows=run_win)

    baseline = baseline_for(run)
    assert baseline is not None
    assert len(baseline.runs) == 7 and baseline.candidates == 9  # the 7, the run of other work and the 2-rank one
    assert baseline.composition.step_ms == pytest.approx(np.median([o["step"] for o in oracles]), rel=1e-9)
    for p in PARTS:
        assert baseline.composition.parts_ms[p] == pytest.approx(np.median([o[p] for o in oracles]), rel=1e-9)
    assert baseline.composition.mfu_step_time == pytest.approx(np.median(mfus))


def test_only_the_most_recent_comparable_runs_count(owner: Tenant) -> None:
    rng = np.random.default_rng(3)
    start = NOW - timedelta(days=3)
    steps: list[float] = []
    for i in range(BASELINE_RUNS + 4):
        win, oracle = windowed(rng, 100, {p: m * (1 + i) for p, m in MEANS.items()})
        inject(owner, started=start + timedelta(hours=i), windows=win)
        steps.append(oracle["step"])
    run = inject(owner, started=NOW - timedelta(hours=1), windows=windowed(rng, 100, MEANS)[0], status=RunStatus.RUNNING)
    baseline = baseline_for(run)
    assert baseline is not None and len(baseline.runs) == BASELINE_RUNS
    assert baseline.composition.step_ms == pytest.approx(np.median(steps[-BASELINE_RUNS:]), rel=1e-9)


@pytest.mark.parametrize(
    ("theirs", "matches"),
    [
        (profile(flops=1.09e12), True),
        (profile(flops=0.91e12), True),
        (profile(flops=1.12e12), False),
        (profile(tokens=4096 * 1.2), False),
        (profile(flops=None, tokens=None, samples=8.0), True),  # compared on what both report
        (profile(flops=None, tokens=None, samples=None), False),
    ],
)
def test_signature_matching_is_the_peers_tolerance(owner: Tenant, theirs: dict[str, Any], matches: bool) -> None:
    rng = np.random.default_rng(5)
    inject(owner, started=NOW - timedelta(days=1), windows=windowed(rng, 50, MEANS)[0], prof=theirs)
    run = inject(owner, started=NOW - timedelta(hours=1), windows=windowed(rng, 50, MEANS)[0])
    assert (baseline_for(run) is not None) is matches
    view = run_vs_baseline(run)
    assert view["status"] == ("compared" if matches else "no_baseline")
    if not matches:
        assert "No comparable finished runs" in view["reason"] and "±10%" in view["reason"]
        assert view["metrics"] == [] and view["delta_usd_per_month"] is None


def test_a_peer_that_started_later_but_finished_first_counts(owner: Tenant) -> None:
    """A CI gate's run: a comparable peer started after it and finished before it did."""
    rng = np.random.default_rng(9)
    run = inject(owner, started=NOW - timedelta(hours=3), windows=windowed(rng, 50, MEANS)[0])
    run.finished_at = NOW - timedelta(minutes=30)
    run.save(update_fields=["finished_at"])
    peer = inject(owner, started=NOW - timedelta(hours=2), windows=windowed(rng, 50, MEANS)[0])  # finished 1 h ago
    baseline = baseline_for(run)
    assert baseline is not None and [r.run_id for r in baseline.runs] == [str(peer.pk)]


@pytest.mark.parametrize(
    ("theirs", "mine", "matches"),
    [
        ({"ranks": 1}, {"ranks": 2}, False),  # profiles stored before the shape: reporting ranks
        ({"world_size": 2, "ranks": 2}, {"world_size": 2, "ranks": 2}, True),
        ({"world_size": 4, "ranks": 4}, {"world_size": 2, "ranks": 2}, False),
        ({"world_size": 2, "gpu_count": 8}, {"world_size": 2, "gpu_count": 2}, False),
        ({"world_size": 2, "gpu_count": None}, {"world_size": 2, "gpu_count": 2}, True),  # unknown matches
        ({"dtype": "bf16"}, {"dtype": "BF16"}, True),
        ({"dtype": "fp32"}, {"dtype": "bf16"}, False),
    ],
)
def test_peers_share_the_runs_world_size_gpu_count_and_dtype(
    owner: Tenant, theirs: dict[str, Any], mine: dict[str, Any], matches: bool
) -> None:
    rng = np.random.default_rng(4)
    inject(owner, started=NOW - timedelta(days=1), windows=windowed(rng, 50, MEANS)[0], prof=profile(**theirs))
    run = inject(owner, started=NOW - timedelta(hours=2), windows=windowed(rng, 50, MEANS)[0], prof=profile(**mine))
    view = run_vs_baseline(run)
    assert view["status"] == ("compared" if matches else "no_baseline"), view
    if not matches:
        assert "none of this run's shape" in view["reason"], view["reason"]


def test_without_a_signature_or_an_analysis_it_says_why(owner: Tenant) -> None:
    rng = np.random.default_rng(1)
    inject(owner, started=NOW - timedelta(days=1), windows=windowed(rng, 50, MEANS)[0])
    blind = inject(owner, started=NOW - timedelta(hours=1), prof=profile(flops=None, tokens=None, samples=None))
    view = run_vs_baseline(blind)
    assert view["status"] == "no_baseline" and "no FLOPs, tokens or samples" in view["reason"]
    fresh = Run.objects.create(project=owner.project, allocation_start=NOW, started_at=NOW, last_seen_at=NOW)
    view = run_vs_baseline(fresh)
    assert view["status"] == "pending" and view["reason"] == "The run has not been analysed yet."
    lonely = inject(owner, started=NOW - timedelta(hours=2), gpu_key="L4")
    assert "no finished run on L4" in run_vs_baseline(lonely)["reason"]


def test_summary_reads_like_the_issue() -> None:
    assert summary_text(0.07, 4100.4) == "+7% step time ≈ +$4,100/month at this project's recent volume"
    assert summary_text(-0.2, -3.5) == "-20% step time ≈ −$3.50/month at this project's recent volume"


# -- end to end: steps through ingest and analysis ------------------------------------------------

PRICE = Decimal("36")  # USD per GPU-hour


@pytest.fixture
def price_36(db: None) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=PRICE, effective_from=datetime(2020, 1, 1, tzinfo=UTC))


def _real_run(tenant: Tenant, start: datetime, n: int, data_ms: int, gpu_count: int = 64) -> str:
    """n steps of data wait + 30 ms forward + 50 ms backward + 10 ms optimizer + 5 ms host, the
    run billed from 10 s before the first step to the end of the last."""
    run_id = tenant.create_run(
        name=f"data-{data_ms}", gpu_model="H100-SXM", gpu_count=gpu_count, dtype="bf16",
        allocation_start=(start - timedelta(seconds=10)).isoformat(), started_at=start.isoformat(),
    )  # fmt: skip
    dur = (data_ms + 30 + 50 + 10 + 5) * MS
    t0 = int(start.timestamp()) * S
    steps = {
        "step": list(range(n)),
        "t_start_ns": [t0 + i * dur for i in range(n)],
        "dur_ns": [dur] * n,
        "data_ns": [data_ms * MS] * n,
        "forward_ns": [30 * MS] * n,
        "backward_ns": [50 * MS] * n,
        "optimizer_ns": [10 * MS] * n,
        "flops": [0.2 * H100_BF16 * 0.09] * n,
        "tokens": [2048] * n,
    }
    assert tenant.post_steps(run_id, {"rank": 0, "steps": steps}).status_code == 200
    end = {"id": "end", "kind": "finish", "t_ns": t0 + n * dur, "status": "finished"}
    assert tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [end]}, format="json").status_code == 200
    sweeps.analysis_sweep(inline=True)
    return run_id


def test_a_slower_loader_is_priced_at_the_projects_monthly_volume(owner: Tenant, price_36: None) -> None:
    start = NOW - timedelta(days=2)
    base_data = [10, 14, 12]  # ms per step; median step = 12 + 95 = 107 ms
    n = 300
    for i, d in enumerate(base_data):
        _real_run(owner, start + timedelta(hours=i), n, d)
    slow = _real_run(owner, start + timedelta(hours=5), n, 40)
    view = run_vs_baseline(Run.objects.get(pk=slow))
    assert view["status"] == "compared" and view["complete"]
    metrics = {m["metric"]: m for m in view["metrics"]}
    base_step, run_step = 12 + 95, 40 + 95
    assert metrics["step_ms"]["baseline"] == pytest.approx(base_step, rel=1e-6)
    assert metrics["step_ms"]["run"] == pytest.approx(run_step, rel=1e-6)
    assert metrics["data_ms"]["baseline"] == pytest.approx(12, rel=1e-6)
    assert metrics["data_ms"]["run_share"] == pytest.approx(40 / run_step, rel=1e-6)
    for part, ms in (("forward", 30), ("backward", 50), ("optimizer", 10), ("host", 5), ("comm", 0)):
        assert metrics[f"{part}_ms"]["run"] == pytest.approx(ms, rel=1e-6, abs=1e-9), part
    # Every run billed 64 GPUs x (10 s + n steps) at $36/GPU-h, all inside the trailing 30 days.
    billed_h = [64 * (10 + n * (d + 95) / 1000) / 3600 for d in [*base_data, 40]]
    usd_30d = sum(float(PRICE) * h for h in billed_h)
    assert view["volume"]["project_gpu_hours_30d"] == pytest.approx(sum(billed_h), rel=1e-6)
    assert view["volume"]["project_usd_30d"] == pytest.approx(usd_30d, abs=0.01 * len(billed_h))
    expected = (run_step - base_step) / base_step * usd_30d
    assert view["delta_usd_per_month"] == pytest.approx(expected, rel=1e-3)
    assert metrics["data_ms"]["delta_usd_per_month"] == pytest.approx(expected, rel=1e-3)  # all of it is data wait
    assert metrics["forward_ms"]["delta_usd_per_month"] == pytest.approx(0, abs=1e-6)
    assert view["summary"].startswith(f"+{(run_step / base_step - 1):.0%} step time ≈ +$")
    assert {r["name"] for r in view["baseline_runs"]} == {"data-10", "data-14", "data-12"}
    assert delta_usd_per_month(
        run_ms=run_step, baseline_ms=base_step, baseline_step_ms=base_step, volume=_volume(view)
    ) == pytest.approx(view["delta_usd_per_month"])


def _volume(view: dict[str, Any]) -> Any:
    from phantomhub.waste.baseline import Volume

    vol = view["volume"]
    exact = vol["project_gpu_hours_30d"] * vol["usd_per_gpu_hour_30d"]  # the rate is from unrounded dollars
    return Volume(vol["project_gpu_hours_30d"], vol["project_usd_30d"], exact)


def test_the_run_page_api_carries_the_comparison(owner: Tenant, price_36: None) -> None:
    start = NOW - timedelta(days=1)
    _real_run(owner, start, 100, 10)
    run_id = _real_run(owner, start + timedelta(hours=1), 100, 20)
    body = owner.client.get(f"/api/v1/portal/runs/{run_id}").json()
    assert body["baseline"]["status"] == "compared"
    assert body["baseline"]["baseline_runs"][0]["name"] == "data-10"
    first = owner.client.get(f"/api/v1/portal/runs/{body['baseline']['baseline_runs'][0]['id']}").json()
    assert first["baseline"]["status"] == "no_baseline"
    assert first["baseline"]["reason"].startswith("No comparable finished runs")
    assert uuid.UUID(run_id)

"""A job of three attempts through ingest and the real analysis pass (docs/waste-model.md, "Jobs:
rework, restarts and checkpoints"): rework, restarts and checkpoints priced exactly against a hand
computation, the billing clamp, the neighbours' staleness, the day rows, job_figures and the
project's failure causes, and the pass's job context read in one statement pinned to the ORM's."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phantomhub.telemetry.bounds import ns_of
from phantomhub.telemetry.models import Job, Run, RunStatus
from phantomhub.waste import pass_io, services
from phantomhub.waste.jobs import job_figures, project_failure_causes
from phantomhub.waste.models import ProjectDay, RunAnalysis, RunDay
from phantomhub.waste.rollups import rollups_rebuild
from phantomhub.waste.selectors import rank_figures_of
from tests.conftest import Tenant
from tests.examples import examples
from tests.waste.test_analysis_service import T0, T0_NS, _iso, finish, known_steps, make_run, price_36  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
S = 10**9
KEY = "torchelastic/job-1"


def _events(tenant: Tenant, run_id: str, events: list[dict[str, Any]]) -> None:
    response = tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": events}, format="json")
    assert response.status_code == 200, response.content


def _phase(name: str, start_s: float, dur_s: float, **data: Any) -> dict[str, Any]:
    start = T0_NS + int(start_s * S)
    return {"id": f"{name}-{start}", "kind": "phase", "t_ns": start + int(dur_s * S), "name": name,
            "t_start_ns": start, "dur_ns": int(dur_s * S), "data": data}  # fmt: skip


def _end(tenant: Tenant, run_id: str, at_s: float, status: str, cause: str) -> None:
    at = T0_NS + int(at_s * S)
    _events(tenant, run_id, [{"id": f"finish-{at}", "kind": "finish", "t_ns": at, "status": status, "data": {"cause": cause}}])


def _steps(tenant: Tenant, run_id: str, first: int, n: int, at_s: float, host: str) -> None:
    """Steps first..first+n-1 of 1 s each (known_steps), the first starting at T0 + at_s."""
    body = known_steps(n, first=first, t0_ns=T0_NS + int(at_s * S) - first * S) | {"host": host}
    assert tenant.post_steps(run_id, body).status_code == 200


def three_attempts(owner: Tenant) -> list[str]:
    """Every time in seconds after T0; 1 GPU at $36/GPU-h: one cent a second.

    attempt 1: allocated -10, steps 0-9 at 0-10, a 2 s save, steps 10-19 at 12-22, a 2 s save,
               steps 20-29 at 24-34; OOM at 36.
    attempt 2: allocated 38 (after attempt 1's end: 36-38 billed by no one), started 40,
               restores step 19 at 40-42, steps 20-39 at 43-63 (20-29 redo attempt 1's work);
               collective timeout at 65.
    attempt 3: allocated -10 (the scheduler's allocation, given again: billed from attempt 2's end,
               65), started 70, restores step 35 at 70-71, steps 36-49 at 72-86; finished at 90.
    """
    a1 = make_run(owner, name="a1", job={"key": KEY, "attempt": 0, "source": "torchelastic"})
    _steps(owner, a1, 0, 10, 0, "node-a")
    _steps(owner, a1, 10, 10, 12, "node-a")
    _steps(owner, a1, 20, 10, 24, "node-a")
    _events(owner, a1, [_phase("checkpoint", 10, 2, step=9, bytes=1000), _phase("checkpoint", 22, 2, step=19, bytes=1000)])
    _end(owner, a1, 36, "failed", "oom")
    a2 = make_run(owner, name="a2", job={"key": KEY, "attempt": 1}, allocation_start=_iso(T0 + timedelta(seconds=38)),
                  started_at=_iso(T0 + timedelta(seconds=40)))  # fmt: skip
    _events(owner, a2, [_phase("restore", 40, 2, step=19)])
    _steps(owner, a2, 20, 20, 43, "node-b")
    _end(owner, a2, 65, "failed", "collective_timeout")
    a3 = make_run(owner, name="a3", job={"key": KEY, "attempt": 2}, allocation_start=_iso(T0 - timedelta(seconds=10)),
                  started_at=_iso(T0 + timedelta(seconds=70)))  # fmt: skip
    _events(owner, a3, [_phase("restore", 70, 1, step=35)])
    _steps(owner, a3, 36, 14, 72, "node-b")
    _end(owner, a3, 90, "finished", "finished")
    return [a1, a2, a3]


def _idle(row: RunAnalysis) -> dict[str, int]:
    return {f["label"]: f["usd_cents"] for f in row.result["idle"] if f["usd_cents"]}


def test_three_attempts_are_priced_by_hand(owner: Tenant, price_36: None) -> None:  # noqa: F811
    runs = three_attempts(owner)
    rows = [services.run_analyze(run_id=uuid.UUID(r)) for r in runs]
    assert all(r is not None for r in rows)
    a1, a2, a3 = (r for r in rows if r is not None)
    # Attempt 1: 46 s billed: 10 s start-up (the first attempt), 30 s of steps, 4 s of saves,
    # 2 s of tear-down after the OOM with an attempt after it (a restart).
    assert a1.cost_usd == Decimal("0.46")
    assert _idle(a1) == {"startup": 10, "phase:checkpoint": 4, "restart": 2}
    # Attempt 2: billed from its allocation at 38 (not 36: that gap is nobody's) to 65 = 27 s:
    # restart 38-43 less the 2 s restore = 3 s, rework steps 20-29 = 10 s, 10 s of new steps,
    # 2 s tear-down after the collective timeout.
    assert a2.cost_usd == Decimal("0.27")
    assert _idle(a2) == {"restart": 5, "phase:restore": 2, "rework": 10}
    # Attempt 3: its allocation start (-10) is clamped to attempt 2's end (65): 25 s, not 100.
    # restart 65-72 less the 1 s restore = 6 s, rework 36-39 = 4 s, 10 s of steps, 4 s tear-down
    # (finished, nothing after it: an ordinary tear-down).
    assert a3.cost_usd == Decimal("0.25")
    assert _idle(a3) == {"restart": 6, "phase:restore": 1, "rework": 4, "teardown": 4}
    assert a3.result["allocation_start_ns"] == T0_NS + 65 * S
    lost = {r.run_id: r.lost for r in (a1, a2, a3)}
    assert [lost[r.run_id]["usd"] for r in (a1, a2, a3)] == [0.06, 0.17, 0.11]
    assert lost[a2.run_id]["causes"] == {
        "rework": {"usd": 0.10, "gpu_seconds": 10.0},
        "restart": {"usd": 0.05, "gpu_seconds": 5.0},
        "checkpoint": {"usd": 0.02, "gpu_seconds": 2.0},
    }
    assert lost[a2.run_id]["restart_sides"] == {
        "before": {"usd": 0.03, "gpu_seconds": 3.0},
        "after": {"usd": 0.02, "gpu_seconds": 2.0},
    }
    # FLOPs of the rework steps are not credited: attempt 2's MFU is over its 10 new steps.
    assert a2.result["steps"] == 20
    (rank,) = rank_figures_of(RunAnalysis.objects.get(run_id=a2.run_id))
    assert rank["flops"] == pytest.approx(10 * 0.5 * 989.4e12 * 0.35)
    assert rank["lost_gpu_seconds"] == {"rework": 10.0, "restart": 5.0, "checkpoint": 2.0}
    assert a2.mfu == pytest.approx(0.5 * 0.35 * 10 / 27)
    # The lost dollars are none of the runs' own recoverable dollars.
    for row in (a1, a2, a3):
        parts = {f["label"]: f["recoverable_cents"] for f in row.result["idle"]}
        assert all(parts.get(label, 0) == 0 for label in ("rework", "restart", "phase:checkpoint", "phase:restore"))
    # Per day: the lost cents follow the run's dollars, and the rollup sums them.
    assert sum(d.lost_usd for d in RunDay.objects.filter(run_id__in=runs)) == Decimal("0.34")
    rollups_rebuild(days=[T0.date()])
    assert ProjectDay.objects.get(day=T0.date()).lost_usd == Decimal("0.34")

    figures = job_figures(Job.objects.get(key=KEY))
    assert [a["name"] for a in figures["attempts"]] == ["a1", "a2", "a3"]
    assert [a["end_cause"] for a in figures["attempts"]] == ["oom", "collective_timeout", "finished"]
    assert [a["billed_start"] for a in figures["attempts"]] == [(T0 + timedelta(seconds=s)).isoformat() for s in (-10, 38, 65)]
    assert [a["lost_usd"] for a in figures["attempts"]] == [0.06, 0.17, 0.11]
    assert [a["restored_steps"] for a in figures["attempts"]] == [[], [19], [35]]
    assert [a["rework_steps"] for a in figures["attempts"]] == [
        None, {"from": 20, "through": 29, "count": 10}, {"from": 36, "through": 39, "count": 4},
    ]  # fmt: skip
    assert figures["attempts"][0]["checkpoints"] == {
        "count": 2, "blocking_s_total": 4.0, "blocking_s_mean": 2.0, "bytes_total": 2000, "async_count": 0, "interval_s": 10.0,
    }  # fmt: skip
    totals = figures["totals"]
    assert totals["cost_usd"] == 0.98 and totals["lost_usd"] == 0.34 and totals["failures"] == 2
    assert totals["lost"]["rework"]["usd"] == pytest.approx(0.14)
    assert totals["lost"]["restart"]["usd"] == pytest.approx(0.13)
    assert totals["lost"]["checkpoint"]["usd"] == pytest.approx(0.07)
    assert totals["wall_s"] == pytest.approx(98.0)
    # Two failures of its own over 98 s: the job's own rate; saves block 2 s of every 12 s,
    # synchronously: asynchronous saves advised, then the interval at the staging cost.
    assert figures["failure_rate"]["source"] == "own" and figures["failure_rate"]["mtbf_s"] == pytest.approx(49.0)
    assert figures["inputs"]["checkpoint_s"] == 2.0 and figures["inputs"]["interval_s"] == 10.0
    assert figures["inputs"]["restart_s"] == pytest.approx((2 + 5 + 6) / 2)
    advice = figures["advice"]
    assert advice["async"] is not None and advice["interval"] is not None
    assert advice["saving_usd_per_month"] <= advice["lost_usd_per_month"] + 1e-9
    assert advice["lost_usd_per_month"] == pytest.approx(0.34 / 98 * 730 * 3600)
    assert advice["interval"]["curve"]
    assert figures["warnings"] == []

    causes = project_failure_causes([owner.project.pk], T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    by_cause = {c["cause"]: c for c in causes}
    # The OOM carried attempt 1's tear-down (2) and attempt 2's restart (3) and rework (10).
    assert by_cause["oom"]["cost_usd"] == 0.15 and by_cause["oom"]["hosts"] == [{"host": "node-a", "attempts": 1}]
    assert (by_cause["oom"]["rework_usd"], by_cause["oom"]["restart_usd"]) == (0.10, 0.05)
    # The collective timeout: attempt 2's tear-down (2), attempt 3's restart (6) and rework (4).
    assert by_cause["collective_timeout"]["cost_usd"] == 0.12
    assert by_cause["finished"]["cost_usd"] == 0 and not by_cause["finished"]["failure"]
    assert [c["cause"] for c in causes] == ["oom", "collective_timeout", "finished"]


def test_a_new_attempt_marks_the_one_before_stale_and_its_tear_down_becomes_a_restart(
    owner: Tenant,
    price_36: None,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    a1 = make_run(owner, name="a1", job={"key": KEY})
    _steps(owner, a1, 0, 10, 0, "node-a")
    _end(owner, a1, 15, "crashed", "sigkill")
    first = services.run_analyze(run_id=uuid.UUID(a1))
    assert first is not None and _idle(first) == {"startup": 10, "teardown": 5}
    a2 = make_run(owner, name="a2", job={"key": KEY}, allocation_start=_iso(T0 + timedelta(seconds=15)),
                  started_at=_iso(T0 + timedelta(seconds=20)))  # fmt: skip
    _steps(owner, a2, 5, 10, 20, "node-a")
    _end(owner, a2, 31, "finished", "finished")
    with django_capture_on_commit_callbacks(execute=True):
        services.run_analyze(run_id=uuid.UUID(a2))
    # The new attempt's pass marked attempt 1 stale (the sweep redoes it) ...
    assert RunAnalysis.objects.get(run_id=a1).analysed_seq == -1
    again = services.run_analyze(run_id=uuid.UUID(a1))
    # ... and now its tear-down after the crash is a restart's, with the same cost.
    assert again is not None and _idle(again) == {"startup": 10, "restart": 5}
    assert again.cost_usd == first.cost_usd
    # A pass with nothing new changes no facts: no more marks.
    with django_capture_on_commit_callbacks(execute=True):
        services.run_analyze(run_id=uuid.UUID(a2))
    assert RunAnalysis.objects.get(run_id=a1).analysed_seq >= 0
    a2_row = RunAnalysis.objects.get(run_id=a2)
    assert a2_row.lost["causes"]["rework"] == {"usd": 0.05, "gpu_seconds": 5.0}  # steps 5-9 again


def test_a_run_without_a_job_is_analysed_as_before(owner: Tenant, price_36: None) -> None:  # noqa: F811
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(100))
    finish(owner, run_id, T0_NS + 105 * S)
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None and row.lost["usd"] == 0 and _idle(row) == {"startup": 10, "teardown": 5}
    assert Run.objects.get(pk=run_id).job_id is None


def test_the_job_context_read_in_one_statement_is_the_orms(owner: Tenant, price_36: None) -> None:  # noqa: F811
    runs = three_attempts(owner)
    extra = make_run(owner, name="alone")
    for run_id in [*runs, extra]:
        pg = pass_io.pass_inputs_read(uuid.UUID(run_id), 5)
        run = Run.objects.get(pk=run_id)
        assert pg is not None
        assert pg.job == pass_io.job_context_orm(run)
    ctx = [pass_io.job_context_orm(Run.objects.get(pk=r)) for r in runs]
    assert [(c.previous, c.previous_last_step, c.has_next) for c in ctx if c] == [(0, None, True), (1, 29, True), (2, 39, False)]
    assert ctx[2] is not None and ctx[2].previous_end == T0 + timedelta(seconds=65)
    assert Run.objects.get(pk=runs[1]).status == RunStatus.FAILED


def test_job_figures_warn_about_odd_attempts_and_cap_the_list(
    owner: Tenant,
    price_36: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = []
    for i, number in enumerate((2, 1, 0)):  # the launcher's count runs backwards
        start = 40 * i
        at = _iso(T0 + timedelta(seconds=start))
        run_id = make_run(owner, name=f"a{i}", job={"key": KEY, "attempt": number}, allocation_start=at, started_at=at)
        if i == 2:
            _events(owner, run_id, [_phase("restore", start, 1, step=100)])  # a step nobody reached
        _steps(owner, run_id, 0, 10, start + 2, "node-a")
        _end(owner, run_id, start + 15, "failed" if i < 2 else "finished", "exception" if i < 2 else "finished")
        runs.append(run_id)
    for run_id in runs:
        services.run_analyze(run_id=uuid.UUID(run_id))
    monkeypatch.setattr("phantomhub.waste.jobs.ATTEMPTS_LISTED", 2)
    figures = job_figures(Job.objects.get(key=KEY))
    assert [a["name"] for a in figures["attempts"]] == ["a0", "a1"]
    assert figures["totals"]["attempts"] == 3 and figures["totals"]["failures"] == 2
    assert figures["totals"]["cost_usd"] == pytest.approx(0.45)  # 3 × 15 s, the third listed or not
    warnings = " | ".join(figures["warnings"])
    assert "restored step 100, which no earlier attempt reached" in warnings
    assert "out of order" in warnings
    assert "3 attempts: the list shows the first 2" in warnings
    # Two failures of its own: the job's rate; no saves, so no advice, and the notes say why.
    assert figures["failure_rate"]["source"] == "own"
    assert figures["advice"]["async"] is None and figures["advice"]["interval"] is None
    assert figures["advice"]["notes"] == ["no checkpoint advice: the job reported no checkpoint saves"]


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 500), st.integers(1, 500)), min_size=1, max_size=8))
def test_the_billing_clamp_never_bills_a_second_twice(attempts: list[tuple[int, int, int]]) -> None:
    """Attempts one after another (each starts after the one before ended), each given any
    allocation start at or before its start (the whole allocation's, or its own): their billed
    spans never overlap, and none starts later than its own allocation would have it."""
    job_id, now, previous_end = uuid.uuid4(), T0, None
    spans = []
    for i, (pause_s, early_s, length_s) in enumerate(attempts):
        started = now + timedelta(seconds=pause_s)
        run = SimpleNamespace(allocation_start=started - timedelta(seconds=early_s), started_at=started)
        ctx = pass_io.JobContext(job_id, i, previous_end, None, False) if i else None
        start_ns = services.billed_from_ns(run, ctx)  # type: ignore[arg-type]
        end = started + timedelta(seconds=length_s)
        spans.append((start_ns, T0_NS + int((end - T0).total_seconds()) * S))
        assert ns_of(run.allocation_start) <= start_ns <= ns_of(started)
        previous_end, now = end, end
    for (_, end_a), (start_b, _) in itertools.pairwise(spans):
        assert start_b >= end_a


def test_too_few_failures_of_its_own_borrow_the_projects_rate_on_the_same_gpu(owner: Tenant, price_36: None) -> None:  # noqa: F811
    # Another job of the project on H100s: 3 failed attempts of 40 GPUs for an hour (120 GPU-h).
    for i in range(3):
        at = T0 + timedelta(hours=2 * i)
        other = make_run(owner, name=f"o{i}", gpu_count=40, world_size=40, job={"key": "other"},
                         allocation_start=_iso(at), started_at=_iso(at))  # fmt: skip
        finish(owner, other, T0_NS + (2 * i + 1) * 3600 * S, status="failed")
        services.run_analyze(run_id=uuid.UUID(other))
    # This job: one failure of its own, then a finished attempt.
    a1 = make_run(owner, name="a1", job={"key": KEY})
    _steps(owner, a1, 0, 10, 0, "node-a")
    _end(owner, a1, 12, "failed", "exception")
    a2 = make_run(owner, name="a2", job={"key": KEY}, allocation_start=_iso(T0 + timedelta(seconds=12)),
                  started_at=_iso(T0 + timedelta(seconds=13)))  # fmt: skip
    _steps(owner, a2, 10, 10, 14, "node-a")
    _end(owner, a2, 25, "finished", "finished")
    for run_id in (a1, a2):
        services.run_analyze(run_id=uuid.UUID(run_id))
    rate = job_figures(Job.objects.get(key=KEY))["failure_rate"]
    assert rate["source"] == "project" and rate["failures"] == 3
    assert rate["exposure"] == pytest.approx(120.0) and rate["exposure_unit"] == "GPU-h"
    assert rate["mtbf_s"] == pytest.approx(3600 / (3 / 120 * 1))  # per GPU-hour, times this job's 1 GPU
    # The other job's own figures: 3 failures of its own, its own rate.
    other_rate = job_figures(Job.objects.get(key="other"))["failure_rate"]
    assert other_rate["source"] == "own" and other_rate["failures"] == 3

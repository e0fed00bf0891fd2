"""One run's bad data never stops the analysis of the others: a failing analysis is recorded on
the run (its page and /metrics show it), retried with backoff a bounded number of times, and new
telemetry gives it a fresh start."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import F, Q
from django.utils import timezone

from phantomhub.telemetry.models import Run
from phantomhub.waste import services, sweeps
from phantomhub.waste.models import RunAnalysis
from tests.conftest import Tenant
from tests.waste.test_analysis_service import T0, T0_NS, S, finish, known_steps, make_run, price_36  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.backends, pytest.mark.usefixtures("price_36")]


def _poisoned(owner: Tenant) -> uuid.UUID:
    """A run stored with an allocation start in year 1 (as an older server accepted it)."""
    run_id = uuid.UUID(make_run(owner, name="year-one"))
    Run.objects.filter(pk=run_id).update(allocation_start=datetime(1, 1, 1, tzinfo=UTC), ingest_seq=1)
    return run_id


def test_a_run_that_cannot_be_analysed_does_not_stop_the_sweep(owner: Tenant) -> None:
    bad = _poisoned(owner)
    good = make_run(owner, name="good")
    owner.post_steps(good, known_steps(20))
    finish(owner, good, T0_NS + 25 * S)

    result = sweeps.analysis_sweep(inline=True)

    assert result.analysed == 1
    assert RunAnalysis.objects.get(run_id=good).analysed_at is not None
    failed = RunAnalysis.objects.get(run_id=bad)
    assert failed.analysed_at is None and failed.failures == 1
    assert "allocation_start 0001-01-01" in failed.error and "outside 2000-01-01..2100-01-01" in failed.error
    # Its page says so instead of "pending" for ever.
    body = owner.client.get(f"/api/v1/runs/{bad}/analysis").json()
    assert body["status"] == "failed" and "allocation_start" in body["error"]["message"]
    assert body["error"]["failures"] == 1 and body["error"]["retry_at"]
    # And /metrics counts it, so an operator's alert sees it.
    from phantomhub.portal.metrics import metrics_text

    assert "phantomhub_analysis_failed_runs 1" in metrics_text()


def test_failures_back_off_stop_after_a_few_and_start_over_with_new_telemetry(owner: Tenant) -> None:
    bad = _poisoned(owner)
    sweeps.analysis_sweep(inline=True)
    assert bad not in sweeps.runs_dirty()  # waiting for its retry time
    delays = []
    for _ in range(services.MAX_ANALYSIS_FAILURES - 1):
        row = RunAnalysis.objects.get(run_id=bad)
        delays.append(row.retry_at - timezone.now())
        RunAnalysis.objects.filter(run_id=bad).update(retry_at=timezone.now() - timedelta(seconds=1))
        assert bad in sweeps.runs_dirty()
        sweeps.analysis_sweep(inline=True)
    assert [round(d.total_seconds() / 30) for d in delays] == [1, 2, 4, 8]  # 30 s doubling
    row = RunAnalysis.objects.get(run_id=bad)
    assert row.failures == services.MAX_ANALYSIS_FAILURES
    RunAnalysis.objects.filter(run_id=bad).update(retry_at=timezone.now() - timedelta(seconds=1))
    assert bad not in sweeps.runs_dirty()  # given up until something changes
    Run.objects.filter(pk=bad).update(allocation_start=T0 - timedelta(seconds=10), ingest_seq=2)  # fixed data
    assert bad in sweeps.runs_dirty()
    sweeps.analysis_sweep(inline=True)
    fixed = RunAnalysis.objects.get(run_id=bad)
    assert fixed.analysed_at is not None and fixed.error == "" and fixed.failures == 0


def test_telemetry_centuries_after_the_allocation_is_refused_not_looped_over(owner: Tenant) -> None:
    run_id = uuid.UUID(make_run(owner))
    owner.post_steps(str(run_id), known_steps(2))
    Run.objects.filter(pk=run_id).update(finished_at=datetime(2099, 12, 31, tzinfo=UTC), status="finished")
    assert services.run_analyze_isolated(run_id=run_id) is None
    assert "spans more than 400 days" in RunAnalysis.objects.get(run_id=run_id).error


def runs_dirty_orm(limit: int = 500) -> list[uuid.UUID]:
    """sweeps.runs_dirty's question through the ORM: the oracle its SQL is held to."""
    never = Run.objects.filter(analysis__isnull=True).values_list("id", "allocation_start")
    # A run whose analysis failed at its current telemetry waits for its retry time, and after
    # MAX_ANALYSIS_FAILURES for new telemetry.
    held = Q(analysis__failed_seq=F("ingest_seq")) & (
        Q(analysis__failures__gte=services.MAX_ANALYSIS_FAILURES) | Q(analysis__retry_at__gt=timezone.now())
    )
    stale = Run.objects.filter(analysis__analysed_seq__lt=F("ingest_seq")).exclude(held).values_list("id", "allocation_start")
    return [run_id for run_id, _ in never.union(stale).order_by("allocation_start")[:limit]]


def test_the_sweeps_dirty_run_query_picks_what_the_orm_query_picks(owner: Tenant) -> None:
    # The SQL the sweep runs (on both backends) against its oracle, the ORM query it replaced,
    # over runs in every state an analysis can be in (and the same order, oldest allocation first).
    now = timezone.now()
    states = {
        "never analysed": None,
        "up to date": {"analysed_seq": 3},
        "stale": {"analysed_seq": 2},
        "failed, retry due later": {"analysed_seq": -1, "failed_seq": 3, "failures": 2, "retry_at": now + timedelta(hours=1)},
        "failed, retry due": {"analysed_seq": -1, "failed_seq": 3, "failures": 2, "retry_at": now - timedelta(seconds=1)},
        "failed, no retry time": {"analysed_seq": -1, "failed_seq": 3, "failures": 1, "retry_at": None},
        "failed too often": {"analysed_seq": -1, "failed_seq": 3, "failures": services.MAX_ANALYSIS_FAILURES, "retry_at": None},
        "failed at older telemetry": {"analysed_seq": 1, "failed_seq": 2, "failures": 9, "retry_at": now + timedelta(hours=1)},
    }
    ids = {}
    for i, (name, fields) in enumerate(states.items()):
        run_id = uuid.UUID(make_run(owner, name=name))
        Run.objects.filter(pk=run_id).update(ingest_seq=3, allocation_start=T0 - timedelta(minutes=10 * (len(states) - i)))
        if fields is not None:
            run = Run.objects.select_related("project").get(pk=run_id)
            RunAnalysis.objects.update_or_create(
                run=run, defaults={"project_id": run.project_id, "team_id": run.project.team_id, **fields}
            )
        ids[run_id] = name

    picked = sweeps.runs_dirty()

    assert picked == runs_dirty_orm()
    assert [ids[r] for r in picked] == ["never analysed", "stale", "failed, retry due", "failed, no retry time",
                                        "failed at older telemetry"]  # fmt: skip
    assert sweeps.runs_dirty(limit=2) == runs_dirty_orm(limit=2) == picked[:2]

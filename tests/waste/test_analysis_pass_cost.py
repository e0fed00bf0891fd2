"""What an incremental analysis pass reads: nothing it can know without reading (the run's days,
its project's settings, phase events it does not have), and still the same figures as a
from-scratch analysis."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_update
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.services import samples_ingest
from phantomhub.waste import rollups, scheduling, services
from phantomhub.waste.models import ProjectDay, RunAnalysisState, RunDay
from tests.conftest import Tenant
from tests.waste.test_analysis_service import (
    S,
    _figures,
    _full_reanalysis,
    _iso,
    finish,
    known_steps,
    make_run,
    price_36,  # noqa: F401 (fixture)
)

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _statements(run_id: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert services.run_analyze(run_id=uuid.UUID(run_id)) is not None
    return [q["sql"] for q in captured.captured_queries]


def test_an_incremental_pass_does_not_read_what_it_already_knows(owner: Tenant, price_36: None) -> None:  # noqa: F811
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(40))
    first = _statements(run_id)  # from scratch: the run's days are read from the table
    assert any('FROM "waste_runday"' in sql and sql.lstrip().upper().startswith("SELECT") for sql in first)
    owner.post_steps(run_id, known_steps(30, first=40))
    sql = _statements(run_id)
    selects = [s for s in sql if s.lstrip().upper().startswith("SELECT")]
    assert not [s for s in selects if 'FROM "waste_runday"' in s]  # the days come from the stored state
    assert not [s for s in selects if 'FROM "waste_projectsettings"' in s]  # joined into the run's read
    # One aggregate over the events (PostgreSQL: inside the pass's one read); no phases to read.
    assert len([s for s in selects if "telemetry_runevent" in s.replace('"', "")]) == 1
    live = RunDay.objects.get(run_id=run_id)
    assert _figures(services.run_analyze(run_id=uuid.UUID(run_id))) == _figures(_full_reanalysis(run_id))
    assert RunDay.objects.get(run_id=run_id).cost_usd == live.cost_usd


def test_a_pass_whose_billed_span_shrinks_deletes_the_day_it_no_longer_covers(owner: Tenant, price_36: None) -> None:  # noqa: F811
    midnight = datetime(2026, 9, 22, tzinfo=UTC)
    start = midnight - timedelta(seconds=40)
    start_ns = int(start.timestamp()) * S
    run_id = make_run(owner, allocation_start=_iso(start), started_at=_iso(start))
    owner.post_steps(run_id, known_steps(30, t0_ns=start_ns))  # steps end 10 s before midnight
    services.run_analyze(run_id=uuid.UUID(run_id))
    run = Run.objects.get(pk=run_id)
    samples_ingest(run=run, rank=0, host="node-0", samples={"t_ns": [start_ns + 60 * S], "cpu_other_pct": [3.0]})
    services.run_analyze(run_id=uuid.UUID(run_id))  # a sign of life past midnight: billed into the next day
    assert RunAnalysisState.objects.filter(run_id=run_id).exists()
    assert sorted(d.isoformat() for d in RunDay.objects.filter(run_id=run_id).values_list("day", flat=True)) == [
        "2026-09-21",
        "2026-09-22",
    ]
    finish(owner, run_id, start_ns + 35 * S)  # it finished before midnight after all
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None
    days = {d.day.isoformat(): d.cost_usd for d in RunDay.objects.filter(run_id=run_id)}
    assert list(days) == ["2026-09-21"] and days["2026-09-21"] == row.cost_usd
    rollups.rollups_rebuild()
    assert not ProjectDay.objects.filter(day=midnight.date()).exists()
    assert _figures(row) == _figures(_full_reanalysis(run_id))


def test_a_price_edited_in_place_reprices_the_next_pass_of_the_same_worker(owner: Tenant, price_36: None) -> None:  # noqa: F811
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(40))
    before = services.run_analyze(run_id=uuid.UUID(run_id))
    assert before is not None and before.cost_usd > 0
    # The same entry edited (no entry added or removed): the price book's version still moves.
    entry = PriceEntry.objects.get()
    price_update(entry=entry, changes={"usd_per_gpu_hour": Decimal("72")})
    scheduling.analyses_invalidate()
    owner.post_steps(run_id, known_steps(1, first=40))
    after = services.run_analyze(run_id=uuid.UUID(run_id))
    assert after is not None
    assert after.cost_usd == _full_reanalysis(run_id).cost_usd  # the new price, to the cent
    assert after.cost_usd > before.cost_usd * Decimal("1.9")  # twice the rate, one more step


def test_the_pass_reads_the_run_as_the_orm_reads_it(owner: Tenant) -> None:
    from phantomhub.waste.pass_io import pass_inputs_read

    run_id = make_run(owner)
    Run.objects.filter(pk=run_id).update(
        tags={"team": "nlp", "n": [1, 2.5, None]}, config={"lr": 3e-4, "nested": {"a": "é"}}, environment={},
        price_override_usd_per_gpu_hour=Decimal("2.125"), finished_at=datetime(2026, 9, 22, 1, 2, 3, 456789, tzinfo=UTC),
    )  # fmt: skip
    expected = Run.objects.get(pk=run_id)

    inputs = pass_inputs_read(uuid.UUID(run_id), 4)

    assert inputs is not None
    for field in Run._meta.concrete_fields:
        got, want = getattr(inputs.run, field.attname), getattr(expected, field.attname)
        assert (type(got), got) == (type(want), want), field.attname
    assert not inputs.run._state.adding and inputs.run._state.db == "default"
    assert inputs.team_id == expected.project.team_id

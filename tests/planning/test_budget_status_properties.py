"""A budget's status (planning/selectors.py budget_status) against an independent computation on
generated months: daily rows of the budget's projects and of others, of several GPU models, in the
month and around it, and live runs burning; the oracle sums the generated rows in Python and
forecasts with numpy (tests/planning/test_forecast_properties.py oracle)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.accounts.models import Project, Team
from phantomhub.periods import month_period
from phantomhub.planning import selectors
from phantomhub.planning.forecast import ForecastInput
from phantomhub.planning.models import Budget
from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste.models import ProjectDay, RunAnalysis, RunDay
from tests.examples import examples
from tests.planning.test_forecast_properties import oracle

pytestmark = [pytest.mark.django_db, pytest.mark.backends]  # sums and JSON keys on SQLite too (make run)
MONTH = month_period("2026-03")  # 31 days
GPUS = ("H100-SXM", "A100-SXM4-80GB")
PROJECTS = ("p1", "p2", "q1")  # p1, p2 of team "a"; q1 of team "b"


@dataclass(frozen=True)
class Row:
    project: str
    gpu: str
    day: date
    cost: Decimal
    recoverable: Decimal


CENTS = st.integers(0, 5_000_00).map(lambda c: Decimal(c) / 100)


@st.composite
def rows(draw: st.DrawFn) -> list[Row]:
    days = st.integers(-5, 35).map(lambda i: MONTH.start + timedelta(days=i))  # and a few days around the month
    out: dict[tuple[str, str, date], Row] = {}
    for _ in range(draw(st.integers(0, 40))):
        project, gpu, day, cost = draw(st.sampled_from(PROJECTS)), draw(st.sampled_from(GPUS)), draw(days), draw(CENTS)
        share = draw(st.integers(0, 100))
        out[(project, gpu, day)] = Row(project, gpu, day, cost, (cost * share / 100).quantize(Decimal("0.01")))
    return list(out.values())


@pytest.fixture
def world(db: None) -> dict[str, Project]:
    a, b = Team.objects.create(slug="a", name="A"), Team.objects.create(slug="b", name="B")
    teams = {"p1": a, "p2": a, "q1": b}
    return {slug: Project.objects.create(slug=slug, name=slug, team=teams[slug]) for slug in PROJECTS}


def _store(world: dict[str, Project], generated: list[Row], burning: list[tuple[str, str, float, float]]) -> None:
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    runs = {}
    for slug, project in world.items():
        for gpu in GPUS:
            runs[(slug, gpu)] = Run.objects.create(
                project=project, gpu_model=gpu, status=RunStatus.FINISHED, allocation_start=t0, started_at=t0, last_seen_at=t0
            )
    per_project: dict[tuple[str, date], list[Row]] = {}
    for row in generated:
        project = world[row.project]
        RunDay.objects.create(
            run=runs[(row.project, row.gpu)], day=row.day, project=project, team=project.team, gpu_key=row.gpu,
            cost_usd=row.cost, recoverable_usd=row.recoverable,
        )  # fmt: skip
        per_project.setdefault((row.project, row.day), []).append(row)
    for (slug, day), group in per_project.items():
        project = world[slug]
        ProjectDay.objects.create(
            day=day, project=project, team=project.team, cost_usd=sum(r.cost for r in group),
            recoverable_usd=sum(r.recoverable for r in group),
        )  # fmt: skip
    for slug, gpu, hours, cost in burning:
        project = world[slug]
        run = Run.objects.create(
            project=project, gpu_model=gpu, status=RunStatus.RUNNING, allocation_start=t0, started_at=t0, last_seen_at=t0
        )
        RunAnalysis.objects.create(
            run=run, project=project, team=project.team, gpu_key=gpu, analysed_at=t0,
            result={"run_hours": hours, "cost_usd": cost, "gpu_count": 1},
        )  # fmt: skip


def _expected(generated: list[Row], burning: list[tuple[str, str, float, float]], projects: set[str], gpu: str, now: datetime):
    today = now.date()
    mine = [r for r in generated if r.project in projects and (not gpu or r.gpu == gpu) and MONTH.start <= r.day <= today]
    by_day = {d: float(sum(r.cost for r in mine if r.day == d)) for d in MONTH.each_day()}
    closed = [by_day[d] for d in MONTH.each_day() if d < today]
    burn = sum(cost / hours for slug, g, hours, cost in burning if slug in projects and (not gpu or g == gpu))
    hours_left = (datetime.combine(today + timedelta(days=1), datetime.min.time(), tzinfo=UTC) - now).total_seconds() / 3600
    given_ = ForecastInput(closed, by_day[today], burn, hours_left, (MONTH.end - today).days)
    spent = float(sum(r.cost for r in mine))
    recoverable = float(sum(r.recoverable for r in mine))
    return spent, recoverable, burn, oracle(given_)


BURNING = st.lists(
    st.tuples(st.sampled_from(PROJECTS), st.sampled_from(GPUS), st.floats(0.5, 100), st.floats(0, 10_000)), max_size=3
)


@pytest.mark.slow
@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(rows(), BURNING, st.integers(1, 31), st.integers(0, 86_399), st.integers(0, 200_000))
def test_status_matches_an_independent_computation(
    world: dict[str, Project], generated: list[Row], burning: list, day: int, second: int, amount: int
) -> None:
    now = datetime(2026, 3, day, tzinfo=UTC) + timedelta(seconds=second)
    with transaction.atomic():
        _store(world, generated, burning)
        budgets = [
            (
                Budget.objects.create(scope="team", team=world["p1"].team, amount_usd=amount, effective_from=MONTH.start),
                {"p1", "p2"},
                "",
            ),
            (
                Budget.objects.create(
                    scope="project", project=world["p1"], gpu_key="H100-SXM", amount_usd=amount, effective_from=date(2026, 1, 1)
                ),
                {"p1"},
                "H100-SXM",
            ),
        ]
        for budget, projects, gpu in budgets:
            got = selectors.budget_status(budget=budget, month=MONTH, now=now)
            spent, recoverable, burn, (point, p10, p90) = _expected(generated, burning, projects, gpu, now)
            assert got.forecast is not None
            assert got.spent_usd == pytest.approx(spent, abs=1e-6)
            assert got.recoverable_usd == pytest.approx(recoverable, abs=1e-6)
            assert got.burn_usd_per_hour == pytest.approx(burn)
            assert got.forecast.point_usd == pytest.approx(point, rel=1e-9, abs=1e-6)
            assert got.forecast.p10_usd == pytest.approx(p10, rel=1e-9, abs=1e-6)
            assert got.forecast.p90_usd == pytest.approx(p90, rel=1e-9, abs=1e-6)
            assert got.over_by_usd == pytest.approx(max(point - amount, 0), rel=1e-9, abs=1e-6)
            ahead = (point - spent) * min(recoverable / spent, 1) if spent > 0 else 0.0
            assert got.cut_usd == pytest.approx(min(max(point - amount, 0), ahead), rel=1e-9, abs=1e-6)
        transaction.set_rollback(True)


def test_a_past_month_is_its_total_and_a_future_month_has_no_forecast(world: dict[str, Project]) -> None:
    _store(world, [Row("p1", GPUS[0], MONTH.start + timedelta(days=i), Decimal(10), Decimal(2)) for i in range(31)], [])
    budget = Budget.objects.create(scope="project", project=world["p1"], amount_usd=250, effective_from=MONTH.start)
    later = datetime(2026, 4, 3, 12, tzinfo=UTC)
    past = selectors.budget_status(budget=budget, month=MONTH, now=later)
    assert past.state == "closed" and past.forecast is not None
    assert past.forecast.point_usd == past.forecast.p10_usd == past.forecast.p90_usd == pytest.approx(310)
    assert past.over_by_usd == pytest.approx(60) and past.cut_usd == 0  # nothing of a closed month is ahead
    ahead = selectors.budget_status(budget=budget, month=month_period("2026-05"), now=later)
    assert ahead.state == "ahead" and ahead.forecast is None and ahead.over_by_usd == 0


def test_only_the_budgets_in_force_in_the_month_are_reported(world: dict[str, Project]) -> None:
    p1 = world["p1"]
    Budget.objects.create(
        scope="project", project=p1, amount_usd=1, effective_from=date(2026, 1, 1), effective_to=date(2026, 2, 1)
    )
    current = Budget.objects.create(scope="project", project=p1, amount_usd=2, effective_from=date(2026, 3, 1))
    got = selectors.budgets_status(budgets=Budget.objects.all(), month=MONTH, now=timezone.now())
    assert [s.budget.pk for s in got] == [current.pk]

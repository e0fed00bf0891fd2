"""The leaderboards read each period's figures, the previous period's and the first billed day in
a few statements: their figures are checked against a plain Python sum over the stored run-days
and daily rollups, for people who see everything and for people who see one team, and the number
of statements a page takes is held down."""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Project, Role
from phantomhub.accounts.services import project_get_or_create, team_get_or_create
from phantomhub.periods import period_parse
from phantomhub.portal.selectors import leaderboard
from phantomhub.telemetry.models import Run
from phantomhub.waste.core.model import CATEGORIES
from phantomhub.waste.models import ProjectDay, RunDay
from phantomhub.waste.rollups import rollups_rebuild


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def stored(db: None) -> dict[str, Any]:
    """Three teams, five projects, 24 runs with run-days spread over the last 75 days (so over this
    30-day period, the previous one and before), rolled up as analysis rolls them up."""
    rng = random.Random(5)
    projects: list[Project] = []
    for team_slug, slugs in (("nlp", ["llm", "asr"]), ("vision", ["det", "seg"]), ("rl", ["agents"])):
        team = team_get_or_create(slug=team_slug)
        projects += [project_get_or_create(team=team, slug=slug) for slug in slugs]
    today = timezone.now().date()
    days: list[RunDay] = []
    for i in range(24):
        project = projects[i % len(projects)]
        start = datetime.combine(today - timedelta(days=rng.randint(0, 75)), datetime.min.time(), tzinfo=UTC)
        run = Run.objects.create(
            id=uuid.uuid4(), project=project, name=f"r{i:02d}", status="finished", gpu_model="H100-SXM", gpu_count=8,
            allocation_start=start, started_at=start, last_seen_at=start, finished_at=start + timedelta(hours=30),
        )  # fmt: skip
        for k in range(rng.randint(1, 3)):  # a run over one to three UTC days
            cats = {name: round(rng.uniform(0, 40), 2) for name in CATEGORIES}
            cost = sum((Decimal(str(v)) for v in cats.values()), Decimal(0))
            gpu_seconds = rng.uniform(1_000, 200_000)
            mfu_known = gpu_seconds if rng.random() < 0.8 else 0.0
            days.append(
                RunDay(
                    run=run, day=start.date() + timedelta(days=k), project=project, team_id=project.team_id,
                    gpu_key="H100-SXM", gpu_seconds=gpu_seconds, cost_usd=cost, categories_usd=cats,
                    waste_usd=cost - Decimal(str(cats["useful_compute"])),
                    recoverable_usd=Decimal(str(round(rng.uniform(0, float(cost)), 2))),
                    lost_usd=(Decimal(str(cats["idle"])) * (i % 3) / 2).quantize(Decimal("0.01")),  # part of idle
                    mfu_gpu_seconds=mfu_known * rng.uniform(0.1, 0.6), mfu_known_gpu_seconds=mfu_known,
                )
            )  # fmt: skip
    RunDay.objects.bulk_create(days)
    rollups_rebuild(days={d.day for d in days})
    users = {name: User.objects.create_user(name, password="pw") for name in ("fin", "member")}
    Profile.objects.create(user=users["fin"], is_finance=True)
    Membership.objects.create(user=users["member"], team=projects[0].team, role=Role.MEMBER)
    return {"users": users, "projects": projects}


def _expected(rows: list[Any], key: str | None, start: date, end: date, runs_from: list[RunDay]) -> dict[Any, dict[str, Any]]:
    """Each group's figures over [start, end] (one group, None, when `key` is None), summed row by
    row in Python."""
    sums: dict[Any, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        if start <= row.day <= end:
            group = sums[getattr(row, key) if key else None]
            group["gpu_seconds"] += row.gpu_seconds
            group["cost"] += float(row.cost_usd)
            group["waste"] += float(row.waste_usd)
            group["recoverable"] += float(row.recoverable_usd)
            group["lost"] += float(row.lost_usd)
            group["mfu_gs"] += row.mfu_gpu_seconds
            group["mfu_known"] += row.mfu_known_gpu_seconds
    runs: dict[Any, set[Any]] = defaultdict(set)
    for row in runs_from:
        if start <= row.day <= end:
            runs[getattr(row, key) if key else None].add(row.run_id)
    out = {}
    for group, s in sums.items():
        out[group] = {
            "runs": len(runs[group]),
            "gpu_hours": round(s["gpu_seconds"] / 3600, 3),
            "cost_usd": round(s["cost"], 2),
            "waste_usd": round(s["waste"], 2),
            "recoverable_usd": round(s["recoverable"], 2),
            "lost_usd": round(s["lost"], 2),
            "waste_share": round(s["waste"] / s["cost"], 4) if s["cost"] else None,
            "mfu": round(s["mfu_gs"] / s["mfu_known"], 4) if s["mfu_known"] else None,
        }
    return out


def _close(got: dict[str, Any], want: dict[str, Any]) -> None:
    for name, value in want.items():
        if value is None or isinstance(value, int):
            assert got[name] == value, name
        else:
            assert got[name] == pytest.approx(value, abs=0.0101 if name.endswith("_usd") else 1e-3), name


@pytest.mark.django_db
@pytest.mark.backends
@pytest.mark.parametrize("who", ["fin", "member"])
@pytest.mark.parametrize("kind", ["teams", "projects"])
def test_group_boards_match_a_python_sum_over_the_rollups_for_both_periods(stored: dict[str, Any], who: str, kind: str) -> None:
    user = stored["users"][who]
    visible = {p.pk for p in stored["projects"]} if who == "fin" else {stored["projects"][0].pk, stored["projects"][1].pk}
    rollups = [d for d in ProjectDay.objects.all() if d.project_id in visible]
    run_days = [d for d in RunDay.objects.all() if d.project_id in visible]
    key = "team_id" if kind == "teams" else "project_id"
    period = period_parse("30d")
    previous = period.previous()
    now = _expected(rollups, key, period.start, period.end, run_days)
    before = _expected(rollups, key, previous.start, previous.end, run_days)
    first: dict[Any, date] = {}
    for d in rollups:
        first[getattr(d, key)] = min(first.get(getattr(d, key), d.day), d.day)
    slugs = (
        {p.pk: p.slug for p in stored["projects"]} if kind == "projects" else {p.team_id: p.team.slug for p in stored["projects"]}
    )

    board = _client(user).get(f"/api/v1/portal/leaderboards/{kind}", {"period": "30d"}).json()

    assert sorted(row["key"] for row in board["rows"]) == sorted(slugs[g] for g in now)
    by_key = {row["key"]: row for row in board["rows"]}
    for group, figures in now.items():
        row = by_key[slugs[group]]
        _close(row, figures)
        assert row["data_from"] == first[group].isoformat()
        if first[group] <= previous.start:
            _close(row["previous"], before.get(group) or dict.fromkeys(figures, 0) | {"waste_share": None, "mfu": None})
        else:
            assert row["previous"] is None and row["change"] is None
    recoverable = [row["recoverable_usd"] for row in board["rows"]]
    assert recoverable == sorted(recoverable, reverse=True)


@pytest.mark.django_db
@pytest.mark.backends
def test_run_board_matches_a_python_sum_over_the_run_days_for_both_periods(stored: dict[str, Any]) -> None:
    run_days = list(RunDay.objects.all())
    period = period_parse("30d")
    previous = period.previous()
    now = _expected(run_days, "run_id", period.start, period.end, run_days)
    before = _expected(run_days, "run_id", previous.start, previous.end, run_days)
    first: dict[Any, date] = {}
    for d in run_days:
        first[d.run_id] = min(first.get(d.run_id, d.day), d.day)

    board = _client(stored["users"]["fin"]).get("/api/v1/portal/leaderboards/runs", {"period": "30d"}).json()

    assert {row["key"] for row in board["rows"]} == {str(r) for r in now}
    for row in board["rows"]:
        run_id = uuid.UUID(row["key"])
        _close(row, now[run_id] | {"runs": 1})
        assert row["data_from"] == first[run_id].isoformat()
        if first[run_id] <= previous.start:
            assert row["previous"] is not None
            _close(row["previous"], (before[run_id] | {"runs": 1}) if run_id in before else {"cost_usd": 0, "runs": 0})
        else:
            assert row["previous"] is None
        assert row["name"] == Run.objects.get(pk=run_id).name


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "most"),
    [
        ("/api/v1/portal/leaderboards/teams", 8),
        ("/api/v1/portal/leaderboards/projects", 8),
        ("/api/v1/portal/leaderboards/runs", 6),  # 5, and the board's totals (every row, not the page)
        ("/api/v1/portal/overview", 15),
    ],
)
def test_pages_take_a_bounded_number_of_statements(
    stored: dict[str, Any], path: str, most: int, django_assert_max_num_queries: Any
) -> None:
    client = _client(stored["users"]["member"])
    with django_assert_max_num_queries(most):
        assert client.get(path).status_code == 200


def _overall(rows: list[Any], start: date, end: date, run_days: list[RunDay]) -> dict[str, Any]:
    return _expected(rows, None, start, end, run_days).get(None) or {}


@pytest.mark.django_db
@pytest.mark.backends
@pytest.mark.parametrize("who", ["fin", "member"])
def test_overview_matches_a_python_sum_over_the_rollups(stored: dict[str, Any], who: str) -> None:
    visible = {p.pk for p in stored["projects"]} if who == "fin" else {stored["projects"][0].pk, stored["projects"][1].pk}
    rollups = [d for d in ProjectDay.objects.all() if d.project_id in visible]
    run_days = [d for d in RunDay.objects.all() if d.project_id in visible]
    period = period_parse("30d")
    previous = period.previous()

    page = _client(stored["users"][who]).get("/api/v1/portal/overview", {"period": "30d"}).json()

    _close(page["totals"], _overall(rollups, period.start, period.end, run_days))
    first = min(d.day for d in rollups)
    assert page["data_from"] == first.isoformat()
    if first <= previous.start:
        _close(page["previous_totals"], _overall(rollups, previous.start, previous.end, run_days))
    else:
        assert page["previous_totals"] is None
    assert [d["day"] for d in page["by_day"]] == [day.isoformat() for day in period.each_day()]
    for drawn in page["by_day"]:
        day = date.fromisoformat(drawn["day"])
        want = _overall(rollups, day, day, run_days) or {"runs": 0, "cost_usd": 0.0, "gpu_hours": 0.0}
        _close(drawn, {k: want[k] for k in ("runs", "cost_usd", "gpu_hours", "recoverable_usd", "lost_usd") if k in want})
        for name in CATEGORIES:
            cats = sum(float(d.categories_usd.get(name, 0)) for d in rollups if d.day == day)
            assert drawn["categories_usd"][name] == pytest.approx(cats, abs=0.0101)
    for name in CATEGORIES:
        cats = sum(float(d.categories_usd.get(name, 0)) for d in rollups if period.start <= d.day <= period.end)
        assert page["by_category"][name] == pytest.approx(cats, abs=0.0101)
    in_period = [d for d in run_days if period.start <= d.day <= period.end]
    assert {g["gpu"] for g in page["by_gpu"]} == ({"H100-SXM"} if in_period else set())
    for g in page["by_gpu"]:
        assert g["cost_usd"] == pytest.approx(sum(float(d.cost_usd) for d in in_period), abs=0.0101)


@pytest.mark.django_db
@pytest.mark.backends
def test_a_team_page_sums_only_its_team(stored: dict[str, Any]) -> None:
    team = stored["projects"][2].team
    rollups = [d for d in ProjectDay.objects.all() if d.team_id == team.pk]
    run_days = [d for d in RunDay.objects.all() if d.team_id == team.pk]
    period = period_parse("90d")

    page = _client(stored["users"]["fin"]).get(f"/api/v1/portal/teams/{team.slug}", {"period": "90d"}).json()

    _close(page["totals"], _overall(rollups, period.start, period.end, run_days))
    assert page["data_from"] == min(d.day for d in rollups).isoformat()
    assert page["previous_totals"] is None  # nothing was billed 90 days before the period


@pytest.mark.django_db
@pytest.mark.backends
@pytest.mark.parametrize(
    "field", ["recoverable_usd", "lost_usd", "cost_usd", "waste_usd", "gpu_hours", "waste_share", "mfu", "started_at"]
)
@pytest.mark.parametrize("desc", [True, False])
def test_the_run_board_cut_is_the_top_of_a_python_sort(stored: dict[str, Any], field: str, desc: bool) -> None:
    period = period_parse("90d")
    sums: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for d in RunDay.objects.filter(day__gte=period.start, day__lte=period.end):
        s = sums[d.run_id]
        s["recoverable_usd"] += float(d.recoverable_usd)
        s["lost_usd"] += float(d.lost_usd)
        s["cost_usd"] += float(d.cost_usd)
        s["waste_usd"] += float(d.waste_usd)
        s["gpu_hours"] += d.gpu_seconds
        s["mfu_gs"] += d.mfu_gpu_seconds
        s["mfu_known"] += d.mfu_known_gpu_seconds
    starts = dict(Run.objects.values_list("id", "allocation_start"))

    def key(run_id: Any) -> Any:
        s = sums[run_id]
        if field == "waste_share":
            return s["waste_usd"] / s["cost_usd"] if s["cost_usd"] else None
        if field == "mfu":
            return s["mfu_gs"] / s["mfu_known"] if s["mfu_known"] else None
        return starts[run_id].timestamp() if field == "started_at" else s[field]

    known = [r for r in sums if key(r) is not None]
    ordered = sorted(sorted(known, key=str), key=key, reverse=desc) + sorted((r for r in sums if key(r) is None), key=str)
    user = stored["users"]["fin"]
    board = leaderboard(principal=user, kind="runs", period=period, sort=("-" if desc else "") + field, limit=5)

    assert [row["key"] for row in board["rows"]] == [str(r) for r in ordered[:5]]

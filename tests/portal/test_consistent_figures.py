"""Figures that must not change under the reader: one definition of a run's time, tables that foot
to the cent, no previous-period comparison without a complete previous period, every day of a
period drawn, custom ranges of days, price entries by visibility, CSV exports, display names."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.errors import ApiError
from phantomhub.periods import period_parse
from phantomhub.portal import finance
from phantomhub.portal.footing import largest_remainder
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.telemetry.models import Run
from phantomhub.waste import sweeps
from phantomhub.waste.models import RunAnalysis
from tests.conftest import Tenant

S = 10**9
TODAY = date(2026, 11, 20)


# -- pure: rounding that foots, periods ------------------------------------------------------


def test_largest_remainder_foots_where_rounding_each_figure_does_not() -> None:
    values = [7.485, 7.485, 7.485]  # each rounds to 7.49 (or 7.48): 22.47 or 22.44, never 22.455's 22.46
    footed = largest_remainder(values, sum(values), 2)
    assert round(sum(footed), 2) == round(sum(values), 2)
    assert all(abs(a - b) < 0.01 for a, b in zip(footed, values, strict=True))


@given(st.lists(st.decimals(min_value=0, max_value=10**6, places=4), min_size=1, max_size=30), st.integers(0, 3))
def test_largest_remainder_always_foots_and_moves_no_figure_by_a_unit_or_more(values: list[Decimal], digits: int) -> None:
    total = sum(values, Decimal(0))
    footed = largest_remainder(values, total, digits)
    unit = Decimal(1).scaleb(-digits)
    assert sum(Decimal(str(v)) for v in footed) == total.quantize(unit, rounding="ROUND_HALF_UP")
    assert all(abs(Decimal(str(f)) - v) < unit for f, v in zip(footed, values, strict=True))


def test_a_range_of_days_is_a_period_and_its_previous_is_as_long() -> None:
    period = period_parse("2026-11-03..2026-11-17", today=TODAY)
    assert (period.start, period.end, period.days) == (date(2026, 11, 3), date(2026, 11, 17), 15)
    previous = period.previous()
    assert (previous.start, previous.end, previous.label) == (date(2026, 10, 19), date(2026, 11, 2), "2026-10-19..2026-11-02")
    assert len(period.each_day()) == 15


@pytest.mark.parametrize(
    "text", ["2026-11-17..2026-11-03", "2026-02-30..2026-03-01", "1999-12-01..2000-01-05", "2026-01-01..2027-06-01", "bogus"]
)
def test_a_bad_period_is_refused_with_the_field_named(text: str) -> None:
    with pytest.raises(ApiError) as refused:
        period_parse(text, today=TODAY)
    assert "period" in refused.value.fields


# -- against the database --------------------------------------------------------------------


def _run(tenant: Tenant, name: str, start: datetime, seconds: int, *, gpu: str = "H100-SXM", register_now: bool = False) -> str:
    """A finished one-GPU run billed from `start`. With `register_now` the agent sends no started_at,
    so the server's own started_at is the time it first heard of the run, not the billed start."""
    fields: dict[str, Any] = {"name": name, "gpu_model": gpu, "gpu_count": 1, "dtype": "bf16"}
    fields["allocation_start"] = start.isoformat()
    if not register_now:
        fields["started_at"] = start.isoformat()
    run_id = tenant.create_run(**fields)
    t0 = int(start.timestamp()) * S
    steps = {
        "step": list(range(seconds)),
        "t_start_ns": [t0 + i * S for i in range(seconds)],
        "dur_ns": [S] * seconds,
        "data_ns": [S // 5] * seconds,
        "forward_ns": [S // 4] * seconds,
        "backward_ns": [S // 2] * seconds,
        "flops": [0.15 * 989.4e12] * seconds,
    }
    assert tenant.post_steps(run_id, {"rank": 0, "steps": steps}).status_code == 200
    event = {"id": "end", "kind": "finish", "t_ns": t0 + seconds * S, "status": "finished"}
    tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")
    return run_id


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def fleet(owner: Tenant, outsider: Tenant) -> dict[str, Any]:
    """nlp: a run 62 days ago, one across last midnight, one registered late (billed 3 days ago);
    vision: one A100 run 2 days ago. Prices: H100 $36, A100 $1.50 per GPU-hour."""
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    price_set(gpu="A100-80GB", usd_per_gpu_hour=Decimal("1.5"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    runs = {
        "old": _run(owner, "old", midnight - timedelta(days=62, hours=-3), 900),
        "midnight": _run(owner, "midnight", midnight - timedelta(minutes=5), 600),
        "late": _run(owner, "late", midnight - timedelta(days=3, hours=-2), 700, register_now=True),
        "a100": _run(outsider, "a100", midnight - timedelta(days=2, hours=-4), 500, gpu="A100-80GB"),
    }
    sweeps.analysis_sweep(inline=True)
    users = {name: User.objects.create_user(name, password="pw") for name in ("lead", "member", "root", "fin")}
    Membership.objects.create(user=users["lead"], team=owner.project.team, role=Role.ADMIN)
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.MEMBER)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Profile.objects.create(user=users["fin"], is_finance=True)
    return {"runs": runs, "users": users, "midnight": midnight, "owner": owner, "outsider": outsider}


@pytest.mark.django_db
@pytest.mark.backends
def test_a_run_is_dated_by_its_billed_time_not_by_when_the_server_heard_of_it(fleet: dict[str, Any]) -> None:
    root = _client(fleet["users"]["root"])
    late = Run.objects.get(pk=fleet["runs"]["late"])
    assert late.started_at.date() == timezone.now().date() != late.allocation_start.date()
    three_days_ago = (fleet["midnight"] - timedelta(days=3)).date().isoformat()
    rows = root.get("/api/v1/portal/runs", {"from": three_days_ago, "to": three_days_ago}).json()["results"]
    assert [r["name"] for r in rows] == ["late"]
    assert rows[0]["started_at"] == late.allocation_start.isoformat()
    page = root.get(f"/api/v1/portal/runs/{late.pk}").json()["run"]
    assert page["billed_from"] == late.allocation_start.isoformat()
    assert datetime.fromisoformat(page["billed_to"]) - late.allocation_start == timedelta(seconds=700)


@pytest.mark.django_db
@pytest.mark.backends
def test_the_runs_time_filter_counts_the_runs_finance_counts_for_a_month(fleet: dict[str, Any]) -> None:
    root = _client(fleet["users"]["root"])
    for day in {(fleet["midnight"] - timedelta(days=d)).date() for d in (0, 3, 62)}:
        month = f"{day:%Y-%m}"
        first = date(day.year, day.month, 1)
        last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
        listed = root.get("/api/v1/portal/runs", {"from": first.isoformat(), "to": last.isoformat()}).json()
        review = root.get(f"/api/v1/portal/finance/{month}").json()
        assert listed["count"] == review["totals"]["runs"] > 0
    # The run across midnight is billed on both days: each day's list has it.
    for day in (fleet["midnight"] - timedelta(days=1), fleet["midnight"]):
        one_day = {"from": f"{day:%Y-%m-%d}", "to": f"{day:%Y-%m-%d}"}
        assert "midnight" in [r["name"] for r in root.get("/api/v1/portal/runs", one_day).json()["results"]]
    assert root.get("/api/v1/portal/runs", {"from": "2026-11-20", "to": "2026-11-19"}).status_code == 400


@pytest.mark.django_db
@pytest.mark.backends
def test_the_previous_period_is_compared_only_where_it_is_complete(fleet: dict[str, Any]) -> None:
    root = _client(fleet["users"]["root"])
    # nlp has data from 62 days ago: its previous 7 days are complete (and cost nothing).
    nlp = root.get("/api/v1/portal/teams/nlp", {"period": "7d"}).json()
    assert nlp["previous_totals"] == {**nlp["previous_totals"], "cost_usd": 0, "runs": 0}
    # vision's data starts 2 days ago: no previous period to compare with, anywhere it shows.
    vision = root.get("/api/v1/portal/teams/vision", {"period": "7d"}).json()
    assert vision["previous_totals"] is None and vision["data_from"] is not None
    board = {r["key"]: r for r in root.get("/api/v1/portal/leaderboards/teams", {"period": "7d"}).json()["rows"]}
    assert board["vision"]["change"] is None and board["nlp"]["change"]["cost_usd"] == board["nlp"]["cost_usd"]
    # The organization's data starts 62 days ago: its previous 30 days are complete, its previous 90 are not.
    assert root.get("/api/v1/portal/overview", {"period": "30d"}).json()["previous_totals"] is not None
    assert root.get("/api/v1/portal/overview", {"period": "90d"}).json()["previous_totals"] is None


@pytest.mark.django_db
@pytest.mark.backends
def test_every_day_of_a_period_is_in_its_daily_figures(fleet: dict[str, Any]) -> None:
    root = _client(fleet["users"]["root"])
    days = root.get("/api/v1/portal/teams/nlp", {"period": "30d"}).json()["by_day"]
    assert len(days) == 30
    assert [d["day"] for d in days] == sorted(d["day"] for d in days)
    assert sum(1 for d in days if d["cost_usd"] > 0) == 3  # 3 days ago, yesterday and today (across midnight)
    assert all(d["cost_usd"] == 0 and d["runs"] == 0 for d in days if d["cost_usd"] == 0)
    start = (fleet["midnight"] - timedelta(days=67)).date()
    end = (fleet["midnight"] - timedelta(days=57)).date()
    custom = root.get("/api/v1/portal/overview", {"period": f"{start}..{end}"}).json()
    assert len(custom["by_day"]) == 11 and custom["totals"]["runs"] == 1
    assert custom["period"]["label"] == f"{start}..{end}"


@pytest.mark.django_db
@pytest.mark.backends
def test_finance_foots_to_the_cent_and_members_see_only_their_prices(fleet: dict[str, Any], monkeypatch: Any) -> None:
    monkeypatch.setattr(finance, "today_utc", lambda: timezone.now().date() + timedelta(days=40))  # the month has ended
    month = f"{fleet['midnight'] - timedelta(days=2):%Y-%m}"
    review = _client(fleet["users"]["fin"]).get(f"/api/v1/portal/finance/{month}").json()
    totals, rows = review["totals"], review["rows"]
    for key in ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd"):
        assert round(sum(Decimal(str(r[key])) for r in rows), 2) == Decimal(str(totals[key]))
    assert round(sum(Decimal(str(r["gpu_hours"])) for r in rows), 3) == Decimal(str(totals["gpu_hours"]))
    for category, total in totals["categories_usd"].items():
        assert round(sum(Decimal(str(r["categories_usd"][category])) for r in rows), 2) == Decimal(str(total))
    assert {e["gpu"] for e in review["price_entries"]} >= {"A100-80GB"}
    member = _client(fleet["users"]["member"]).get(f"/api/v1/portal/finance/{month}").json()
    assert {r["team"] for r in member["rows"]} == {"nlp"}
    assert {e["gpu"] for e in member["price_entries"]} == {"H100-SXM"}
    # A closed month's snapshot is filtered the same way.
    assert _client(fleet["users"]["fin"]).post(f"/api/v1/portal/finance/{month}/close").status_code == 200
    frozen = _client(fleet["users"]["member"]).get(f"/api/v1/portal/finance/{month}").json()
    assert {e["gpu"] for e in frozen["price_entries"]} == {"H100-SXM"}


@pytest.mark.django_db
@pytest.mark.backends
def test_the_runs_list_and_every_leaderboard_export_all_their_rows_as_csv(fleet: dict[str, Any]) -> None:
    root = _client(fleet["users"]["root"])
    response = root.get("/api/v1/portal/runs.csv", {"team": "nlp", "sort": "started_at"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["name"] for r in rows] == ["old", "late", "midnight"]
    listed = root.get("/api/v1/portal/runs", {"team": "nlp", "sort": "started_at"}).json()["results"]
    assert [r["cost_usd"] for r in rows] == [str(r["cost_usd"]) for r in listed]
    for kind in ("teams", "projects", "runs"):
        response = root.get(f"/api/v1/portal/leaderboards/{kind}.csv", {"period": "90d"})
        assert response.status_code == 200
        lines = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
        board = root.get(f"/api/v1/portal/leaderboards/{kind}", {"period": "90d"}).json()["rows"]
        assert len(lines) == len(board) and [float(r["cost_usd"]) for r in lines] == [r["cost_usd"] for r in board]
    assert _client(fleet["users"]["member"]).get("/api/v1/portal/leaderboards/bogus.csv").status_code == 404


@pytest.mark.django_db
@pytest.mark.backends
def test_a_run_name_a_spreadsheet_would_run_as_a_formula_is_exported_as_text(fleet: dict[str, Any]) -> None:
    Run.objects.filter(pk=fleet["runs"]["old"]).update(name="=HYPERLINK(1)")
    body = b"".join(_client(fleet["users"]["root"]).get("/api/v1/portal/runs.csv").streaming_content).decode()
    assert "'=HYPERLINK(1)" in body


@pytest.mark.django_db
@pytest.mark.backends
def test_display_names_are_set_by_admins_and_shown_everywhere_instead_of_the_slug(fleet: dict[str, Any]) -> None:
    lead, member, root = (_client(fleet["users"][n]) for n in ("lead", "member", "root"))
    assert root.get("/api/v1/portal/teams").json()[0]["name"] == "nlp"  # the slug until someone names it
    assert member.patch("/api/v1/portal/teams/nlp", {"display_name": "NLP"}, format="json").status_code == 403
    assert lead.patch("/api/v1/portal/teams/vision", {"display_name": "CV"}, format="json").status_code == 404
    assert lead.patch("/api/v1/portal/teams/nlp", {"display_name": "  NLP  "}, format="json").json()["name"] == "NLP"
    assert root.patch("/api/v1/portal/projects/detector", {"display_name": "Object detection"}, format="json").status_code == 200
    assert member.get("/api/v1/portal/session").json()["user"]["teams"][0]["name"] == "NLP"
    board = root.get("/api/v1/portal/leaderboards/projects", {"period": "90d"}).json()["rows"]
    assert {r["key"]: (r["name"], r["team_name"]) for r in board}["detector"] == ("Object detection", "vision")
    assert root.patch("/api/v1/portal/teams/nlp", {"display_name": ""}, format="json").json()["name"] == "nlp"
    too_long = root.patch("/api/v1/portal/teams/nlp", {"display_name": "x" * 101}, format="json")
    assert too_long.status_code == 400 and "display_name" in too_long.json()["error"]["fields"]


@pytest.mark.django_db
@pytest.mark.backends
def test_the_run_page_says_when_the_analysis_failed(fleet: dict[str, Any]) -> None:
    root = _client(fleet["users"]["root"])
    run = Run.objects.get(pk=fleet["runs"]["a100"])
    retry = timezone.now() + timedelta(minutes=2)
    RunAnalysis.objects.filter(run=run).update(error="boom", failures=2, failed_seq=run.ingest_seq, retry_at=retry)
    page = root.get(f"/api/v1/portal/runs/{run.pk}").json()
    assert page["analysis_status"] == "analysed" and page["analysis"] is not None  # older figures, beside the error
    assert page["analysis_error"] == {"message": "boom", "failures": 2, "retry_at": retry.isoformat()}
    RunAnalysis.objects.filter(run=run).update(analysed_at=None)
    page = root.get(f"/api/v1/portal/runs/{run.pk}").json()
    assert page["analysis_status"] == "failed" and page["analysis"] is None
    assert page["analysis_error"]["message"] == "boom"
    other = Run.objects.get(pk=fleet["runs"]["old"])
    RunAnalysis.objects.filter(run=other).delete()
    assert root.get(f"/api/v1/portal/runs/{other.pk}").json()["analysis_status"] == "pending"
    assert uuid.UUID(page["run"]["id"]) == run.pk

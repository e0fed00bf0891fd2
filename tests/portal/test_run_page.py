"""The run page reads the run with its analysis in one statement and, on PostgreSQL, passes the
chart windows through as stored: its answer is checked against the analysis API's own reads
(waste.selectors) of the same stored row, for an analysed, a pending and a missing run."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.telemetry.models import Run
from phantomhub.waste import services
from phantomhub.waste.baseline import run_vs_baseline
from phantomhub.waste.models import RunAnalysis
from phantomhub.waste.selectors import analysis_failure, analysis_row, analysis_series, analysis_view
from tests.conftest import T0_NS, Tenant, steps_body


@pytest.fixture
def reader(db: None) -> APIClient:
    user = User.objects.create_user("fin", password="pw")
    Profile.objects.create(user=user, is_finance=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def _analysed(owner: Tenant, ranks: int = 4) -> str:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    start = datetime.fromtimestamp(T0_NS / 10**9, tz=UTC)
    run_id = owner.create_run(
        name="windows", gpu_model="H100-SXM", gpu_count=ranks, world_size=ranks, dtype="bf16",
        allocation_start=(start - timedelta(seconds=5)).isoformat(), started_at=start.isoformat(),
    )  # fmt: skip
    for rank in range(ranks):
        assert owner.post_steps(run_id, steps_body(300, rank=rank)).status_code == 200
    services.run_analyze(run_id=uuid.UUID(run_id))
    return run_id


@pytest.mark.django_db
@pytest.mark.backends
def test_an_analysed_run_page_says_what_the_analysis_reads_of_the_stored_row(owner: Tenant, reader: APIClient) -> None:
    run_id = _analysed(owner)
    response = reader.get(f"/api/v1/portal/runs/{run_id}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    page = json.loads(response.content)

    run = Run.objects.select_related("project", "project__team").get(pk=run_id)
    row = analysis_row(run=run)
    assert row is not None and row.result["windows"]  # a run with chart windows to pass through
    assert page["series"] == json.loads(json.dumps(analysis_series(run=run, row=row)))
    assert page["series"] == RunAnalysis.objects.get(pk=uuid.UUID(run_id)).result["windows"]
    assert page["analysis"] == json.loads(json.dumps(analysis_view(run=run, explain=True, row=row)))
    assert page["analysis_status"] == "analysed" and page["analysis_error"] == analysis_failure(run=run)
    assert page["baseline"] == json.loads(json.dumps(run_vs_baseline(run)))
    assert page["run"]["id"] == run_id and page["run"]["gpu_key"] == row.gpu_key
    assert len(page["run"]["ranks"]) == 4


@pytest.mark.django_db
@pytest.mark.backends
def test_a_pending_run_page_has_no_analysis_and_no_series(owner: Tenant, reader: APIClient) -> None:
    run_id = owner.create_run(name="pending", gpu_model="H100-SXM", gpu_count=1)
    page: dict[str, Any] = reader.get(f"/api/v1/portal/runs/{run_id}").json()
    assert (page["analysis_status"], page["analysis"], page["series"]) == ("pending", None, None)
    assert reader.get(f"/api/v1/portal/runs/{uuid.uuid4()}").status_code == 404


@pytest.mark.django_db
def test_a_run_page_takes_a_bounded_number_of_statements(
    owner: Tenant, reader: APIClient, django_assert_max_num_queries: Any
) -> None:
    run_id = _analysed(owner, ranks=2)
    with django_assert_max_num_queries(9):
        assert reader.get(f"/api/v1/portal/runs/{run_id}").status_code == 200


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the windows are split off on PostgreSQL only")
def test_an_analysis_written_between_the_pages_two_reads_is_shown_whole(owner: Tenant, reader: APIClient) -> None:
    run_id = _analysed(owner, ranks=2)
    written: list[str] = []

    def reanalysis_meanwhile(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "result - 'windows'" in sql and not written:
            written.append(sql)
            execute(
                "UPDATE waste_runanalysis SET analysed_at = analysed_at + interval '1 second', cost_usd = 12345.67, "
                "result = jsonb_set(result, '{mfu}', '0.123') WHERE run_id = %s",
                [run_id], False, context,
            )  # fmt: skip
        return execute(sql, params, many, context)

    with connection.execute_wrapper(reanalysis_meanwhile):
        page = reader.get(f"/api/v1/portal/runs/{run_id}").json()

    assert written  # the split read ran, and the row changed just before it
    assert (page["analysis"]["cost_usd"], page["analysis"]["mfu"]) == (12345.67, 0.123)
    assert page["series"] == RunAnalysis.objects.get(pk=uuid.UUID(run_id)).result["windows"]

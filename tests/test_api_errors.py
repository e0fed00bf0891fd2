"""What the fuzzer (tests/test_fuzz_api.py) found, one test each: answers that contradicted the
OpenAPI schema (undocumented error statuses, HTML error pages under /api/, arrays documented as
objects, query parameters the schema did not name) and a 500 on bad input."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.waste.models import ProjectDay
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]


@pytest.fixture
def admin() -> APIClient:
    user = User.objects.create_user("ada")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_every_operation_documents_the_errors_it_can_answer(schema: dict[str, Any]) -> None:
    for path, method, op in _operations(schema):
        statuses = set(op["responses"])
        expected = {"400"}  # a NUL in any query parameter
        if path != "/api/v1/health":
            expected |= {"401"}
        if path != "/api/v1/health" and not (path == "/api/v1/portal/session" and method == "get"):
            expected |= {"403"}
        if "{" in path:
            expected |= {"404"}
        if "requestBody" in op:
            expected |= {"413", "415"}
        assert expected <= statuses, (method, path, sorted(statuses))
        for status in expected:
            body = op["responses"][status]["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/Error"}, (method, path, status)


def test_rate_limited_operations_document_429(schema: dict[str, Any]) -> None:
    limited = {
        ("/api/v1/runs", "post"),
        ("/api/v1/runs/{run_id}/steps", "post"),
        ("/api/v1/runs/{run_id}/samples", "post"),
        ("/api/v1/runs/{run_id}/events", "post"),
        ("/api/v1/runs/{run_id}/batch", "post"),
        ("/api/v1/runs/{run_id}/batches", "post"),
        ("/api/v1/portal/session", "post"),
    }
    for path, method in limited:
        assert "429" in schema["paths"][path][method]["responses"], (method, path)


def test_closing_a_closed_month_is_a_documented_409(admin: APIClient, schema: dict[str, Any], owner: Tenant) -> None:
    project = owner.project  # a month with spend (one without cannot be closed)
    ProjectDay.objects.create(day=date(2026, 9, 15), project=project, team=project.team, cost_usd=Decimal("1.00"))
    assert admin.post("/api/v1/portal/finance/2026-09/close").status_code == 200
    again = admin.post("/api/v1/portal/finance/2026-09/close")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    assert admin.post("/api/v1/portal/finance/2026-08/reopen").status_code == 409
    for action in ("close", "reopen"):
        assert "409" in schema["paths"][f"/api/v1/portal/finance/{{month}}/{action}"]["post"]["responses"]


def test_a_token_for_a_project_you_do_not_administer_is_a_documented_404(admin: APIClient, schema: dict[str, Any]) -> None:
    response = admin.post("/api/v1/portal/tokens", {"project": "nowhere", "name": "ci"}, format="json")
    assert response.status_code == 404
    assert "404" in schema["paths"]["/api/v1/portal/tokens"]["post"]["responses"]


@pytest.mark.parametrize(
    "path",
    ["/api/v1/runs/not-a-uuid", "/api/v1/runs/null,null/steps", "/api/v1/portal/finance/%C2%84", "/api/v1/nothing-here"],
)
def test_a_url_no_route_takes_answers_404_in_the_api_error_shape(owner: Tenant, settings: Any, path: str) -> None:
    settings.DEBUG = False  # as deployed (debugging shows Django's technical page instead)
    response = owner.client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


def test_outside_the_api_a_missing_page_is_still_a_page(settings: Any) -> None:
    settings.DEBUG = False
    response = Client().get("/static/no-such-file.js")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_signing_in_without_the_csrf_token_answers_403_in_the_api_error_shape() -> None:
    User.objects.create_user("ada", password="a-long-password-1")
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/api/v1/portal/session", {"username": "ada", "password": "a-long-password-1"}, content_type="application/json"
    )
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "forbidden" and "CSRF" in error["message"]


def test_the_teams_and_tokens_lists_are_documented_as_the_arrays_they_are(admin: APIClient, schema: dict[str, Any]) -> None:
    assert isinstance(admin.get("/api/v1/portal/teams").json(), list)
    assert isinstance(admin.get("/api/v1/portal/tokens").json(), list)
    for path in ("/api/v1/portal/teams", "/api/v1/portal/tokens"):
        body = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert body["type"] == "array", path
    created = schema["paths"]["/api/v1/portal/tokens"]["post"]["responses"]["201"]["content"]["application/json"]
    assert created["schema"] == {"$ref": "#/components/schemas/TokenIssued"}
    assert "token" in schema["components"]["schemas"]["TokenIssued"]["properties"]


def test_the_portal_query_parameters_are_in_the_schema(schema: dict[str, Any]) -> None:
    def names(path: str) -> set[str]:
        return {p["name"] for p in schema["paths"][path]["get"].get("parameters", []) if p["in"] == "query"}

    filters = {"team", "project", "status", "gpu", "tag", "from", "to", "q", "launched_by", "sort"}
    assert names("/api/v1/portal/runs") == filters | {"page", "page_size"}
    assert names("/api/v1/portal/runs.csv") == filters
    assert names("/api/v1/portal/leaderboards/{kind}") == {"period", "sort", "page", "page_size"}
    assert names("/api/v1/portal/leaderboards/{kind}.csv") == {"period", "sort"}  # every row: no pages
    for path in ("/api/v1/portal/overview", "/api/v1/portal/teams/{slug}", "/api/v1/portal/projects/{slug}"):
        assert names(path) == {"period"}


# Every download (a GET whose 200 is not JSON), a path to fetch it by, and its type.
DOWNLOADS = {
    "/api/v1/portal/runs.csv": "/api/v1/portal/runs.csv",
    "/api/v1/portal/leaderboards/{kind}.csv": "/api/v1/portal/leaderboards/teams.csv",
    "/api/v1/portal/finance/{month}.csv": "/api/v1/portal/finance/2026-09.csv",
    "/api/v1/portal/finance/{month}.pdf": "/api/v1/portal/finance/2026-09.pdf",
    "/api/v1/fleet/{table}.csv": "/api/v1/fleet/nodes.csv?period=7d",
    "/api/v1/audit.csv": "/api/v1/audit.csv",
    "/api/v1/pricing/prices.csv": "/api/v1/pricing/prices.csv",
    "/api/v1/runs/{run_id}/steps.parquet": None,  # a run's (tests/telemetry/test_steps_export.py asks with its Accept)
}


def _download_types(schema: dict[str, Any]) -> dict[str, str]:
    found = {}
    for path, method, op in _operations(schema):
        content = op["responses"].get("200", {}).get("content", {})
        if method == "get" and content and "application/json" not in content:
            found[path] = next(iter(content))
    return found


def test_every_download_answers_its_file_whatever_accept_says(admin: APIClient, schema: dict[str, Any]) -> None:
    types = _download_types(schema)
    assert set(types) == set(DOWNLOADS), "a download not in DOWNLOADS (or gone from the schema)"
    for documented, path in DOWNLOADS.items():
        if path is None:
            continue
        for accept in (types[documented], "application/json", "*/*", "image/png"):
            response = admin.get(path, HTTP_ACCEPT=accept)
            assert response.status_code == 200, (path, accept, response.status_code)  # never a 406
            assert response["Content-Type"].startswith(types[documented]), (path, accept)
    refused = admin.get("/api/v1/portal/finance/2026-13.csv", HTTP_ACCEPT="text/csv")
    assert refused.status_code in (400, 404) and refused["Content-Type"] == "application/json"
    assert "error" in refused.json()


@pytest.mark.parametrize("query", [{"status": "¿bogus"}, {"sort": "nonsense"}, {"from": "2026-13-01"}])
def test_the_runs_csv_refuses_a_bad_filter_with_a_400_before_streaming(admin: APIClient, query: dict[str, str]) -> None:
    response = admin.get("/api/v1/portal/runs.csv", query)
    assert response.status_code == 400, response
    assert set(response.json()["error"]["fields"]) == set(query)


def test_a_database_outage_answers_503_with_retry_after_in_the_api_shape() -> None:
    # What a request meets while PostgreSQL restarts (bench/soak.py): not an HTML 500.
    from django import db

    from phantomhub.errors import api_exception_handler

    response = api_exception_handler(db.OperationalError("the database system is shutting down"), {})
    assert response is not None and response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.data["error"]["code"] == "unavailable"

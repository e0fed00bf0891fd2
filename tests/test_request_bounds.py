"""Bad input gets a 400 naming what is wrong, never a 500: deep JSON, NUL characters in bodies and
query strings, periods outside the range of telemetry. Against the real database (PostgreSQL
cannot store NUL, which is where those used to end)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.telemetry import parsers
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.parsers import MAX_JSON_DEPTH, json_body_parse
from tests.conftest import Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _post_raw(client: APIClient, path: str, text: str, method: str = "post") -> Any:
    return getattr(client, method)(path, text.encode(), content_type="application/json")


@pytest.fixture
def admin() -> APIClient:
    user = User.objects.create_user("ada")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 1_025, 2_000])  # the sign-in takes 4 KiB at most
def test_json_nested_too_deep_gets_a_400_even_on_the_unauthenticated_sign_in(levels: int) -> None:
    body = '{"username": "a", "password": ' + _nested(levels) + "}"
    response = _post_raw(APIClient(), "/api/v1/portal/session", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["fields"] == {"body": f"nested deeper than {MAX_JSON_DEPTH} levels"}


def test_json_nested_100_000_levels_deep_gets_a_400(owner: Tenant) -> None:
    body = '{"id": "' + str(uuid.uuid4()) + '", "config": ' + _nested(100_000) + "}"
    response = _post_raw(owner.client, "/api/v1/runs", body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"body": f"nested deeper than {MAX_JSON_DEPTH} levels"}


def test_deep_json_with_nan_gets_a_400_too(owner: Tenant) -> None:
    # NaN sends the body through the standard library's decoder, which recurses.
    body = '{"id": "' + str(uuid.uuid4()) + '", "config": {"x": NaN, "y": ' + _nested(5_000) + "}}"
    response = _post_raw(owner.client, "/api/v1/runs", body)
    assert response.status_code == 400 and "nested deeper" in response.json()["error"]["message"]


def test_json_at_the_depth_limit_is_accepted(owner: Tenant) -> None:
    config: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH - 2):  # the body and `config` are two levels
        config = {"k": config}
    run_id = str(uuid.uuid4())
    response = owner.client.post("/api/v1/runs", {"id": run_id, "config": config}, format="json")
    assert response.status_code == 201, response.content
    assert json_body_parse(json.dumps({"a": [[1]] * 100}).encode()) == {"a": [[1]] * 100}


def test_a_full_ingest_batch_is_never_walked_for_depth_or_nul(monkeypatch: pytest.MonkeyPatch) -> None:
    def walked(*args: Any) -> None:
        raise AssertionError("an ingest batch was walked")

    monkeypatch.setattr(parsers, "_too_deep", walked)
    monkeypatch.setattr(parsers, "nul_field", walked)
    raw = json.dumps({**steps_body(10_000), "host": "node-1"}).encode()
    assert len(json_body_parse(raw)["steps"]["step"]) == 10_000


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "bad\u0000name"}, "name"),
        ({"config": {"lr": 1e-3, "opt": {"name": "adam\u0000"}}}, "config.opt.name"),
        ({"config": {"a\u0000b": 1}}, "config.a\\u0000b"),
        ({"tags": ["ok", "n\u0000"]}, "tags[1]"),
    ],
)
def test_nul_in_any_string_of_a_run_gets_a_400_naming_the_field(owner: Tenant, body: dict[str, Any], field: str) -> None:
    run_id = str(uuid.uuid4())
    response = owner.client.post("/api/v1/runs", {"id": run_id, **body}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {field: "NUL characters are not allowed"}
    assert not Run.objects.filter(pk=run_id).exists()


def test_nul_in_a_step_batch_host_and_in_event_data_get_a_400(owner: Tenant) -> None:
    run_id = owner.create_run()
    response = owner.post_steps(run_id, {**steps_body(3), "host": "node\u00001"})
    assert response.status_code == 400 and response.json()["error"]["fields"] == {"host": "NUL characters are not allowed"}
    event = {"id": "p1", "kind": "oom", "t_ns": 1_790_000_000 * 10**9, "data": {"msg": "\u0000"}}
    response = owner.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"events[0].data.msg": "NUL characters are not allowed"}


def test_nul_in_the_sign_in_gets_a_400_naming_the_field() -> None:
    response = APIClient().post("/api/v1/portal/session", {"username": "ro\u0000ot", "password": "x"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"username": "NUL characters are not allowed"}


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/portal/runs?q=%00", "q"),
        ("/api/v1/portal/runs?team=nlp%00x", "team"),
        ("/api/v1/portal/runs?tag=%00", "tag"),
        ("/api/v1/portal/runs?sort=name&x%00=1", "x\\u0000"),
        ("/api/v1/portal/leaderboards/teams?period=7d%00", "period"),
        ("/metrics?x=%00", "x"),
    ],
)
def test_nul_in_a_query_parameter_gets_a_400_naming_it(admin: APIClient, path: str, field: str) -> None:
    response = admin.get(path)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {field: "NUL characters are not allowed"}


@pytest.mark.parametrize("month", ["0000-01", "0001-01", "1999-12", "2100-01", "9999-12", "2026-13"])
def test_periods_outside_the_range_of_telemetry_get_a_400(admin: APIClient, month: str) -> None:
    for path, field in [
        (f"/api/v1/portal/finance/{month}", "month"),
        (f"/api/v1/portal/finance/{month}.csv", "month"),
        (f"/api/v1/portal/overview?period={month}", "period"),
        (f"/api/v1/portal/leaderboards/runs?period={month}", "period"),
        (f"/api/v1/portal/teams/nlp?period={month}", "period"),
    ]:
        response = admin.get(path)
        assert response.status_code in (400, 404), (path, response.status_code)
        if response.status_code == 400:
            assert field in response.json()["error"]["fields"], path
    response = admin.post(f"/api/v1/portal/finance/{month}/close")
    assert response.status_code == 400 and "month" in response.json()["error"]["fields"]


def test_the_first_and_last_months_work_and_compare_with_the_month_before(admin: APIClient) -> None:
    for month in ("2000-01", "2099-12"):
        assert admin.get(f"/api/v1/portal/finance/{month}").status_code == 200
        overview = admin.get("/api/v1/portal/overview", {"period": month})
        assert overview.status_code == 200, overview.content
    assert admin.get("/api/v1/portal/overview", {"period": "2000-01"}).json()["period"]["label"] == "2000-01"


def test_nan_and_infinite_settings_get_a_400(admin: APIClient) -> None:
    for body in ('{"target_mfu": NaN}', '{"target_mfu": Infinity}', '{"recoverability": {"idle": NaN}}'):
        response = _post_raw(admin, "/api/v1/portal/settings", body, method="put")
        assert response.status_code == 400, (body, response.content)
    assert admin.get("/api/v1/portal/settings").json()["target_mfu"] == 0.5

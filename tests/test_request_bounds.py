"""Bad input gets a 400 naming what is wrong, never a 500: deep JSON, NUL characters in bodies and
query strings, periods outside the range of telemetry. Against the real database (PostgreSQL
cannot store NUL, which is where those used to end)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import uuid
import zlib
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.errors import ApiError
from phantomhub.telemetry import parsers
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.parsers import MAX_JSON_DEPTH, json_body_parse
from phantomhub_agent import _node as node
from tests import rawrows
from tests.conftest import Tenant, steps_body, tenant_for

MIB = 1024 * 1024


def _owner_tenant() -> Tenant:
    return tenant_for("nlp", "llm-pretrain")


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
        (f"/api/v1/portal/finance/{month}.pdf", "month"),
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
        assert admin.get(f"/api/v1/portal/finance/{month}.pdf").status_code == 200
        overview = admin.get("/api/v1/portal/overview", {"period": month})
        assert overview.status_code == 200, overview.content
    assert admin.get("/api/v1/portal/overview", {"period": "2000-01"}).json()["period"]["label"] == "2000-01"


def test_nan_and_infinite_settings_get_a_400(admin: APIClient) -> None:
    for body in ('{"target_mfu": NaN}', '{"target_mfu": Infinity}', '{"recoverability": {"idle": NaN}}'):
        response = _post_raw(admin, "/api/v1/portal/settings", body, method="put")
        assert response.status_code == 400, (body, response.content)
    assert admin.get("/api/v1/portal/settings").json()["target_mfu"] == 0.5


# -- what one request may cost: inflated bytes, rows, and bodies from someone not signed in ---------


class _CountingInflater:
    """parsers.inflate_lib with a tally of the bytes its decompressors produced."""

    def __init__(self) -> None:
        self.produced = 0
        self.error = zlib.error

    def decompressobj(self, wbits: int) -> Any:
        inner, tally = zlib.decompressobj(wbits), self

        class Counted:
            @property
            def unconsumed_tail(self) -> bytes:
                return inner.unconsumed_tail

            def decompress(self, data: bytes, max_length: int = 0) -> bytes:
                out = inner.decompress(data, max_length)
                tally.produced += len(out)
                return out

        return Counted()


@pytest.fixture
def inflater(monkeypatch: pytest.MonkeyPatch) -> _CountingInflater:
    counting = _CountingInflater()
    monkeypatch.setattr(parsers, "inflate_lib", counting)
    return counting


def _post_gzip(client: APIClient, path: str, raw: bytes) -> Any:
    return client.post(path, gzip.compress(raw, 9), content_type="application/json", HTTP_CONTENT_ENCODING="gzip")


def test_the_ingest_endpoints_cap_inflated_bodies_far_below_the_global_cap() -> None:
    assert settings.MAX_INFLATED_BYTES == 64 * MIB
    # The agent's rank batch is at most batch_max_bytes (1 MiB); its node batch at most 6 MiB of
    # peers' batches and its own (phantomhub_agent._node.MAX_RAW_BYTES), ~7 MiB.
    assert settings.MAX_BATCH_INFLATED_BYTES == 8 * MIB and settings.MAX_NODE_BATCH_INFLATED_BYTES == 16 * MIB
    assert node.MAX_RAW_BYTES + 1 * MIB < settings.MAX_NODE_BATCH_INFLATED_BYTES


@pytest.mark.parametrize(("path", "cap"), [("batches", 16 * MIB), ("batch", 8 * MIB), ("steps", 8 * MIB)])
def test_a_gzip_body_past_an_endpoint_s_inflated_cap_is_refused_before_inflating_beyond_it(
    owner: Tenant, inflater: _CountingInflater, path: str, cap: int
) -> None:
    run_id = owner.create_run()
    bomb = b'{"batches": [{"rank": 0, "steps": {"step": [' + b"0," * (20 * MIB) + b"0]}}]}"  # 40 MiB inflated
    response = _post_gzip(owner.client, f"/api/v1/runs/{run_id}/{path}", bomb)
    assert response.status_code == 413, response.content
    assert response.json()["error"]["fields"] == {"body": f"inflated request body is over the limit of {cap} bytes"}
    assert inflater.produced <= cap + 1  # never a byte more than the cap tells apart
    assert rawrows.steps() == []


def test_a_gzip_body_is_read_and_inflated_chunk_by_chunk_up_to_either_cap() -> None:
    raw = json.dumps(steps_body(20_000)).encode()
    sent = gzip.compress(raw, 1)
    assert parsers._read_inflated(io.BytesIO(sent), len(sent), len(raw)) == raw
    stream = io.BytesIO(gzip.compress(os.urandom(3 * MIB), 1))  # a body without a declared length
    with pytest.raises(ApiError) as caught:
        parsers._read_inflated(stream, 2 * MIB, 64 * MIB)
    assert caught.value.status_code == 413 and caught.value.message == f"request body is over the limit of {2 * MIB} bytes"
    assert stream.tell() <= 2 * MIB + parsers._CHUNK  # it stopped reading there
    with pytest.raises(ApiError) as caught:
        parsers._read_inflated(io.BytesIO(sent), len(sent), len(raw) - 1)
    assert caught.value.message == f"inflated request body is over the limit of {len(raw) - 1} bytes"


def test_a_node_batch_over_the_rows_per_request_bound_is_413_naming_the_field(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = {"batches": [steps_body(20, rank=k) for k in range(8)]}  # 160 steps
    body["batches"][3]["samples"] = {"t_ns": {"i8": base64.b64encode(b"\0" * 8 * 50).decode()}}  # packed: 50 rows
    with override_settings(MAX_REQUEST_ROWS=200):
        response = owner.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json")
        assert response.status_code == 413, response.content
        error = response.json()["error"]
        assert error["code"] == "payload_too_large"
        assert error["fields"] == {"batches": "210 rows is over the limit of 200 per request (send them in more requests)"}
        assert rawrows.steps() == []
        body["batches"][3].pop("samples")
        assert owner.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json").status_code == 200


def test_a_rank_batch_over_the_rows_per_request_bound_is_413_naming_its_part(owner: Tenant) -> None:
    run_id = owner.create_run()
    with override_settings(MAX_REQUEST_ROWS=50):
        response = owner.post_steps(run_id, steps_body(51))
    assert response.status_code == 413 and set(response.json()["error"]["fields"]) == {"steps"}


def test_the_rows_bound_lets_the_agent_s_largest_node_batch_through() -> None:
    # ~7 MiB of rank batches whose densest rows are steps of three packed int64 columns (32 bytes).
    assert (node.MAX_RAW_BYTES + 1 * MIB) // 32 < settings.MAX_REQUEST_ROWS


def test_a_100_kb_gzip_sign_in_body_is_413_before_a_byte_is_inflated(inflater: _CountingInflater) -> None:
    padding = "a" * (64 * MIB)
    body = gzip.compress(json.dumps({"username": "ada", "password": padding}).encode(), 9)
    assert 60_000 < len(body) < 120_000
    response = APIClient().post("/api/v1/portal/session", body, content_type="application/json", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert response.json()["error"]["fields"] == {"body": "request body is over the limit of 4096 bytes"}
    assert inflater.produced == 0


def test_a_small_gzip_sign_in_body_that_inflates_far_stops_at_4_kib(inflater: _CountingInflater) -> None:
    body = gzip.compress(b'{"username": "ada", "password": "' + b"a" * (2 * MIB) + b'"}', 9)
    assert len(body) < 4096
    response = APIClient().post("/api/v1/portal/session", body, content_type="application/json", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert response.json()["error"]["fields"] == {"body": "inflated request body is over the limit of 4096 bytes"}
    assert inflater.produced <= 4097


def test_people_signed_in_by_session_keep_the_usual_caps() -> None:
    user = User.objects.create_user("ada")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient(enforce_csrf_checks=True)  # the CSRF check parses the body while DRF authenticates
    client.force_login(user)
    csrf = client.get("/api/v1/portal/session").json()["csrf_token"]
    body = json.dumps({"target_mfu": 0.4, "note": "x" * 10_000})
    response = client.put("/api/v1/portal/settings", body, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert response.status_code == 200, response.content  # read whole: not a 413
    assert response.json()["target_mfu"] == 0.4


def test_a_large_body_is_freed_once_its_answer_is_sent(owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    # DRF's request, view and response refer to one another: only a full collection frees them
    # and the parsed body the request holds (bench/ingest_limits.py: +60 MiB a 16 MiB batch).
    collections: list[int] = []
    monkeypatch.setattr(parsers.gc, "collect", lambda *args: collections.append(1) or 0)
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(100)).status_code == 200
    assert collections == []  # a small body: nothing to do
    padding = "x" * parsers.TRIM_AFTER_BYTES
    body = json.dumps({"batches": [{**steps_body(100, first=100), "host": "node-1"}], "pad": padding}).encode()
    response = owner.client.post(f"/api/v1/runs/{run_id}/batches", gzip.compress(body, 1), content_type="application/json",
                                 HTTP_CONTENT_ENCODING="gzip")  # fmt: skip
    assert response.status_code == 400  # parsed whole (4 MiB), then refused: `pad` is no field
    assert collections == [1]


@pytest.mark.django_db(transaction=True)
def test_after_a_large_body_the_database_connection_lets_go_of_its_buffers() -> None:
    # libpq keeps its send buffer as large as the largest statement sent, while the connection lives.
    from django.db import connection

    owner = _owner_tenant()
    run_id = owner.create_run()
    assert owner.post_steps(run_id, steps_body(100)).status_code == 200
    assert connection.connection is not None  # kept for the next request (CONN_MAX_AGE)
    body = json.dumps({"batches": [steps_body(100, first=100)], "pad": "x" * parsers.TRIM_AFTER_BYTES}).encode()
    owner.client.post(f"/api/v1/runs/{run_id}/batches", body, content_type="application/json")
    assert connection.connection is None
    assert owner.post_steps(run_id, steps_body(100, first=200)).status_code == 200  # a new one, as usual

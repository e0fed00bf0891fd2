"""Ingest rate limit per token: past PHANTOMHUB_INGEST_RATE a token's ingest POSTs get 429 with
Retry-After (the seconds to the end of its window, which the agent waits out), counted in Redis;
other tokens, reads and the rest of the API are not counted, and a Redis outage lets ingest through.
Rows count as well as requests: past PHANTOMHUB_INGEST_ROWS_RATE rows (steps, samples, events) in
a window, the token's ingest gets 429 too, however few requests carried them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from phantomhub.accounts import throttles
from phantomhub.accounts.models import ApiToken
from phantomhub.accounts.services import token_digest
from phantomhub.env import cache_from_url, env_rate
from phantomhub.telemetry.models import RunRank
from tests.conftest import Tenant, steps_body

pytestmark = pytest.mark.django_db
REDIS_URL = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
WINDOW_START = 1_790_000_040.0  # a whole minute (and hour) of the epoch
EVENTS = {"events": [{"kind": "log", "data": {"message": "hello"}}]}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The throttle's wall clock, 20 s into a window; tests move it by assigning now[0]."""
    now = [WINDOW_START + 20]
    monkeypatch.setattr(throttles, "_now", lambda: now[0])
    return now


@pytest.fixture
def redis_cache() -> Iterator[str]:
    """The default cache on the suite's Redis, under a key prefix of this test's own."""
    prefix = f"phantomhub-test-{uuid.uuid4().hex}"
    caches = cache_from_url("PHANTOMHUB_TEST_REDIS_URL", REDIS_URL)
    caches["default"]["KEY_PREFIX"] = prefix
    with override_settings(CACHES=caches):
        yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def _rate(monkeypatch: pytest.MonkeyPatch, value: str) -> Any:
    """INGEST_RATE as the settings read it from PHANTOMHUB_INGEST_RATE."""
    monkeypatch.setenv("PHANTOMHUB_INGEST_RATE", value)
    return override_settings(INGEST_RATE=env_rate("PHANTOMHUB_INGEST_RATE", "60000/min"))


def _rows_rate(monkeypatch: pytest.MonkeyPatch, value: str) -> Any:
    """INGEST_ROWS_RATE as the settings read it from PHANTOMHUB_INGEST_ROWS_RATE."""
    monkeypatch.setenv("PHANTOMHUB_INGEST_ROWS_RATE", value)
    return override_settings(INGEST_ROWS_RATE=env_rate("PHANTOMHUB_INGEST_ROWS_RATE", "2000000/min"))


def _keys(prefix: str, kind: str) -> list[str]:
    client = redis.Redis.from_url(REDIS_URL)
    return [key.decode() for key in client.scan_iter(f"{prefix}*") if f":throttle:{kind}:" in key.decode()]


def test_the_default_rate_is_generous_for_training_jobs() -> None:
    assert settings.INGEST_RATE == (60000, 60)  # ~1,000 ranks of one token posting a batch a second
    assert env_rate("PHANTOMHUB_INGEST_RATE", "off") is None
    # ~33,000 rows a second: 3x a 1,000-GPU job at 10 steps/s and a sample a second per GPU, and
    # 8 node batches of the largest size one request may have (MAX_REQUEST_ROWS).
    assert settings.INGEST_ROWS_RATE == (2_000_000, 60)
    assert settings.INGEST_ROWS_RATE[0] >= 8 * settings.MAX_REQUEST_ROWS


def test_a_token_past_its_rate_gets_429_with_retry_after_until_its_window_ends(
    owner: Tenant, outsider: Tenant, redis_cache: str, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _rate(monkeypatch, "3/min"):
        run_id = owner.create_run()  # registration counts: 1
        assert owner.post_steps(run_id, steps_body(5)).status_code == 200  # 2
        assert owner.post_steps(run_id, steps_body(5, first=5)).status_code == 200  # 3
        refused = owner.post_steps(run_id, steps_body(5, first=10))
        assert refused.status_code == 429
        assert refused["Retry-After"] == "40"  # the window ends 40 s later
        assert refused.json()["error"]["code"] == "throttled"
        assert set(refused.json()["error"]) == {"code", "message", "fields"}
        for path, body in ((f"/api/v1/runs/{run_id}/samples", {"rank": 0, "samples": {}}),
                           (f"/api/v1/runs/{run_id}/events", EVENTS),
                           ("/api/v1/runs", {"id": run_id, "name": "r"})):  # fmt: skip
            assert owner.client.post(path, body, format="json").status_code == 429, path
        assert owner.client.get(f"/api/v1/runs/{run_id}").status_code == 200  # reads are not counted
        other = outsider.create_run()  # another token has its own count
        assert outsider.post_steps(other, steps_body(5)).status_code == 200
        clock[0] = WINDOW_START + 60  # the next window
        assert owner.post_steps(run_id, steps_body(5, first=10)).status_code == 200
    assert RunRank.objects.get(run_id=run_id).step_rows == 15  # the refused batch was not stored


def test_the_count_lives_in_redis_and_refused_requests_write_nothing(
    owner: Tenant, redis_cache: str, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _rate(monkeypatch, "2/min"):
        run_id = owner.create_run()
        assert owner.post_steps(run_id, steps_body(5)).status_code == 200
        assert owner.post_steps(run_id, steps_body(5, first=5)).status_code == 429
    token_id = ApiToken.objects.get(digest=token_digest(owner.token)).pk
    keys = _keys(redis_cache, "ingest")
    assert len(keys) == 1 and f"throttle:ingest:token:{token_id}:60:" in keys[0]
    assert redis.Redis.from_url(REDIS_URL).get(keys[0]) == b"3"
    rows = _keys(redis_cache, "rows")  # the refused request was refused before its rows were read
    assert len(rows) == 1 and f"throttle:rows:token:{token_id}:60:" in rows[0]
    assert redis.Redis.from_url(REDIS_URL).get(rows[0]) == b"5"
    assert RunRank.objects.get(run_id=run_id).step_rows == 5


def test_a_node_batch_counts_as_one_ingest_request(
    owner: Tenant, redis_cache: str, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _rate(monkeypatch, "2/min"):
        run_id = owner.create_run()  # 1
        body = {"batches": [steps_body(5, rank=k) for k in range(8)]}
        assert owner.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json").status_code == 200  # 2
        assert owner.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json").status_code == 429
    assert RunRank.objects.filter(run_id=run_id).count() == 8


def test_an_unreachable_cache_lets_ingest_through(owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    down = cache_from_url("PHANTOMHUB_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens on port 1
    with override_settings(CACHES=down), _rate(monkeypatch, "1/min"):
        run_id = owner.create_run()
        assert owner.post_steps(run_id, steps_body(5)).status_code == 200
        assert owner.post_steps(run_id, steps_body(5, first=5)).status_code == 200


def test_off_means_no_limit(owner: Tenant, redis_cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with _rate(monkeypatch, "off"), _rows_rate(monkeypatch, "off"):
        run_id = owner.create_run()
        for first in range(0, 50, 5):
            assert owner.post_steps(run_id, steps_body(5, first=first)).status_code == 200
    assert redis.Redis.from_url(REDIS_URL).keys(f"{redis_cache}*") == []


def test_rows_past_the_budget_get_429_with_retry_after_however_few_the_requests(
    owner: Tenant, outsider: Tenant, redis_cache: str, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _rate(monkeypatch, "1000/min"), _rows_rate(monkeypatch, "25/min"):
        run_id = owner.create_run()  # no rows
        assert owner.post_steps(run_id, steps_body(10)).status_code == 200  # 10
        body = {"batches": [steps_body(5, rank=k) for k in (1, 2)]}
        assert owner.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json").status_code == 200  # 20
        refused = owner.post_steps(run_id, steps_body(6, first=10))  # 26: past the budget
        assert refused.status_code == 429
        assert refused["Retry-After"] == "40"  # the window ends 40 s later
        error = refused.json()["error"]
        assert error["code"] == "throttled" and "rows" in error["message"]
        # Refused rows count: the token is past its budget, and its next requests are refused
        # before their bodies are read, whatever their size.
        assert owner.post_steps(run_id, steps_body(1, first=10)).status_code == 429
        assert owner.client.post(f"/api/v1/runs/{run_id}/events", EVENTS, format="json").status_code == 429
        other = outsider.create_run()  # another token has its own budget
        assert outsider.post_steps(other, steps_body(25)).status_code == 200
        clock[0] = WINDOW_START + 60  # the next window
        assert owner.post_steps(run_id, steps_body(5, first=10)).status_code == 200
    assert RunRank.objects.get(run_id=run_id, rank=0).step_rows == 15  # the refused rows were not stored


def test_a_node_batch_counts_every_rank_s_rows(
    owner: Tenant, redis_cache: str, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _rows_rate(monkeypatch, "100/min"):
        run_id = owner.create_run()
        body = {"batches": [steps_body(10, rank=k) for k in range(8)]}  # 80 rows in one request
        assert owner.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json").status_code == 200
        again = {"batches": [steps_body(10, rank=k, first=10) for k in range(8)]}  # 160
        refused = owner.client.post(f"/api/v1/runs/{run_id}/batches", again, format="json")
        assert refused.status_code == 429 and int(refused["Retry-After"]) == 40
    assert redis.Redis.from_url(REDIS_URL).get(_keys(redis_cache, "rows")[0]) == b"160"
    assert sum(RunRank.objects.filter(run_id=run_id).values_list("step_rows", flat=True)) == 80


@pytest.mark.parametrize(
    ("value", "expected"),
    [("6000/min", (6000, 60)), ("100/s", (100, 1)), ("5 / hour", (5, 3600)), ("1/day", (1, 86_400)), ("OFF", None)],
)
def test_rates_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: Any) -> None:
    monkeypatch.setenv("PHANTOMHUB_INGEST_RATE", value)
    assert env_rate("PHANTOMHUB_INGEST_RATE", "60000/min") == expected

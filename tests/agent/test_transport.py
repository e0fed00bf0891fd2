"""Transport mechanics against a scripted stdlib server: gzip, keep-alive, retries, Retry-After,
4xx never retried, 413 split. Only the mechanics; what the real server stores is tested live."""

from __future__ import annotations

import email.utils
import logging
import random
import time
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent._transport import (
    HALT,
    OK,
    REJECT,
    RETRY,
    TOO_LARGE,
    NetworkError,
    Transport,
    backoff_delay,
    classify,
    parse_retry_after,
)

from .conftest import FakeServer, Recorded, carries, free_port


def loop(run: pa.Run, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        with run.step(step=i, tokens=10), run.stage("forward"):
            pass


def error(status: int, code: str = "invalid", **headers: str) -> tuple[int, dict[str, str], bytes]:
    body = f'{{"error": {{"code": "{code}", "message": "nope", "fields": {{"dtype": "bad"}}}}}}'
    return status, headers, body.encode()


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, OK),
        (201, OK),
        (429, RETRY),
        (500, RETRY),
        (503, RETRY),
        (400, REJECT),
        (422, REJECT),
        (413, TOO_LARGE),
        (401, HALT),
        (403, HALT),
        (404, HALT),
    ],
)
def test_answers_are_classified(status: int, outcome: str) -> None:
    assert classify(status) == outcome


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= (parse_retry_after(date, now=now) or 0) <= 31


def test_backoff_grows_is_capped_jittered_and_floored_by_retry_after() -> None:
    rng = random.Random(1)
    delays = [backoff_delay(a, base_s=0.5, max_s=8.0, rng=rng) for a in range(10)]
    assert all(0.25 <= d <= 8.0 for d in delays)
    assert delays[0] <= 0.5 and delays[-1] >= 4.0  # grew to the cap's jitter band
    assert len({round(d, 6) for d in delays[5:]}) > 1  # jittered, not lock-step
    assert backoff_delay(0, base_s=0.5, max_s=8.0, retry_after_s=5.0, rng=rng) == 5.0
    assert backoff_delay(0, base_s=0.5, max_s=8.0, retry_after_s=500.0, retry_after_max_s=60.0, rng=rng) == 60.0


def test_one_connection_is_kept_alive_across_requests(fake_server: FakeServer) -> None:
    transport = Transport(fake_server.url, "phk_t", timeout_s=5)
    for _ in range(5):
        assert transport.request("POST", "/api/v1/runs/x/events", b'{"events": []}').status == 200
    assert transport.connections_opened == 1
    assert len({r.client_port for r in fake_server.requests}) == 1
    assert fake_server.requests[0].headers["authorization"] == "Bearer phk_t"


def test_a_refused_connection_is_a_network_error() -> None:
    transport = Transport(f"http://127.0.0.1:{free_port()}", "t", timeout_s=1)
    with pytest.raises(NetworkError):
        transport.request("POST", "/x", b"{}")


def test_batches_are_gzipped_and_carry_rank_and_host(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(name="gz", server=fake_server.url, token="phk_t", **agent_kwargs)
    loop(run, 300)
    run.finish()
    [create] = fake_server.of("/runs")
    assert create.body["id"] == run.id and create.body["name"] == "gz"
    steps = [r for r in fake_server.requests if carries(r, "steps")]
    assert steps and all(r.headers.get("content-encoding") == "gzip" for r in steps)
    body = steps[0].body
    assert body["rank"] == 0 and body["host"]
    assert sorted(s for r in steps for s in r.body["steps"]["step"]) == list(range(300))
    assert fake_server.paths()[0] == "/api/v1/runs"  # metadata first


def test_5xx_is_retried_with_backoff_until_it_succeeds(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    failures = {"left": 2}

    def script(req: Recorded, index: int) -> Any:
        if carries(req, "steps") and failures["left"] > 0:
            failures["left"] -= 1
            return error(503, "unavailable")
        return None

    fake_server.script = script
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 5)
    run.finish()
    attempts = [r for r in fake_server.requests if carries(r, "steps")]
    assert len(attempts) == 3
    assert attempts[0].raw_body == attempts[2].raw_body  # the same batch, resent
    assert run.counters["send_failures"] == 2
    assert run.counters["rejected_batches"] == 0
    assert run.counters["spooled_batches"] == 0


def test_429_waits_at_least_retry_after(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    answered: list[float] = []

    def script(req: Recorded, index: int) -> Any:
        answered.append(time.monotonic())
        if carries(req, "steps") and sum(carries(r, "steps") for r in fake_server.requests) == 1:
            return error(429, "throttled", **{"Retry-After": "0.6"})
        return None

    fake_server.script = script
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 3)
    run.finish()
    steps_times = [t for t, r in zip(answered, fake_server.requests) if carries(r, "steps")]
    assert len(steps_times) == 2
    assert steps_times[1] - steps_times[0] >= 0.6


def test_other_4xx_is_never_retried_logged_once_and_counted(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    fake_server.script = lambda req, i: error(400) if carries(req, "steps") else None
    agent_kwargs["debug"] = False
    caplog.set_level(logging.WARNING, logger="phantomhub_agent")
    run = pa.init(server=fake_server.url, token="t", batch_max_rows=10, **agent_kwargs)
    loop(run, 30)
    run.finish()
    attempts = [r for r in fake_server.requests if carries(r, "steps")]
    assert len(attempts) == 3  # three batches of 10, each tried exactly once
    assert run.counters["rejected_batches"] == 3
    rejected_logs = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert len(rejected_logs) == 1
    assert "dtype" in rejected_logs[0].getMessage()  # the field at fault is shown


def test_a_rejected_batch_fails_finish_in_debug_mode(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    fake_server.script = lambda req, i: error(400) if carries(req, "steps") else None
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 3)
    with pytest.raises(pa.AgentError, match="rejected with 400"):
        run.finish()


def test_413_splits_the_batch_until_it_fits(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    def script(req: Recorded, index: int) -> Any:
        if carries(req, "steps") and len(req.body["steps"]["step"]) > 25:
            return error(413, "too_large")
        return None

    fake_server.script = script
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 100)
    run.finish()
    delivered = [r for r in fake_server.of("/steps") if len(r.body["steps"]["step"]) <= 25]
    assert sorted(s for r in delivered for s in r.body["steps"]["step"]) == list(range(100))


def test_a_refused_token_keeps_telemetry_in_the_spool(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    fake_server.script = lambda req, i: error(401, "unauthorized")
    run = pa.init(server=fake_server.url, token="phk_revoked", **agent_kwargs)
    loop(run, 20)
    run.finish()
    assert len(fake_server.requests) == 1  # after the 401, nothing more is sent
    kinds = sorted({p.name.split("-")[1] for p in (agent_kwargs["spool_dir"] / run.id).iterdir()})
    assert kinds == ["a", "b"]  # the run's metadata and its data wait for `phantomhub-agent sync`
    assert any("401" in r.getMessage() for r in caplog.records)

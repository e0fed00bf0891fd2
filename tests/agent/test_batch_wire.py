"""The combined wire: one POST /api/v1/runs/{id}/batch per interval with a rank's steps, samples
and events; the separate endpoints for a server that has no batch endpoint."""

from __future__ import annotations

import json
import time
from typing import Any

import phantomhub_agent as pa
from phantomhub_agent import _batcher as b

from .conftest import FakeServer, LiveServer, Recorded, carries


def loop(run: pa.Run, n: int, pause_s: float = 0.0) -> None:
    for i in range(n):
        with run.step(step=i, tokens=10), run.stage("forward"):
            pass
        if pause_s:
            time.sleep(pause_s)


def steps_of(server: FakeServer) -> list[int]:
    return sorted(s for r in server.requests if carries(r, "steps") for s in r.body["steps"]["step"])


def test_one_request_per_interval_carries_steps_samples_and_events(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    agent_kwargs.update(flush_interval_s=0.5, system_interval_s=0.1, counters_interval_s=0.1)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    started = time.monotonic()
    loop(run, 60, pause_s=0.025)
    run.finish()
    elapsed = time.monotonic() - started
    data = [r for r in fake_server.requests if not r.path.endswith("/runs")]
    assert data and all(r.path == f"/api/v1/runs/{run.id}/batch" for r in data)
    assert any(carries(r, "steps") and carries(r, "samples") and carries(r, "events") for r in data)
    assert len(data) <= elapsed / 0.5 + 3  # about one a flush interval, plus the final flush
    assert steps_of(fake_server) == list(range(60))
    assert all(r.body["rank"] == 0 and r.body["host"] for r in data)


def _without_batch_endpoint(req: Recorded, index: int) -> Any:
    if req.path.endswith("/batch"):  # what a server older than the endpoint answers
        return 404, {"Content-Type": "text/html"}, b"<h1>Not Found</h1>"
    return None


def test_a_server_without_the_batch_endpoint_gets_one_request_per_kind(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    fake_server.script = _without_batch_endpoint
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 30)
    assert run.flush(timeout=10)
    loop(run, 30)
    run.finish()
    assert len(fake_server.of("/batch")) == 1  # tried once, then the separate endpoints
    separate = [s for r in fake_server.requests if r.path.endswith("/steps") for s in r.body["steps"]["step"]]
    assert sorted(separate) == sorted(list(range(30)) * 2)  # every row (the user numbered both loops from 0)
    assert fake_server.of("/events")  # the finish event went too
    assert run.counters["rejected_batches"] == 0 and run.counters["dropped_steps"] == 0
    assert not list(agent_kwargs["spool_dir"].rglob("*.phk"))


def test_run_not_found_on_a_batch_still_keeps_telemetry_in_the_spool(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    def script(req: Recorded, index: int) -> Any:
        if req.path.endswith("/batch"):
            return 404, {}, b'{"error": {"code": "not_found", "message": "run not found (create it first)", "fields": {}}}'
        return None

    fake_server.script = script
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 10)
    run.finish()
    assert [r.path.rsplit("/", 1)[1] for r in fake_server.requests] == ["runs", "batch"]  # halted, not unbatched
    assert list((agent_kwargs["spool_dir"] / run.id).glob("*-b-*.phk"))  # kept for `phantomhub-agent sync`


def test_a_batch_over_the_byte_cap_goes_part_by_part() -> None:
    steps = {"step": list(range(400)), "t_start_ns": list(range(400))}
    samples = {"t_ns": list(range(100))}
    events = [{"id": "e", "kind": "counters", "t_ns": 1, "data": {}}]
    parts = {"steps": steps, "samples": samples, "events": events}
    [(body, rows, rebase)] = list(b.fit_batch(parts, {"rank": 1}, 1 << 20, rebase=True))
    assert (rows, rebase) == (400, True) and b'"samples"' in body and b'"events"' in body
    pieces = list(b.fit_batch(parts, {"rank": 1}, 2000, rebase=True))
    assert sum(rows for _, rows, _ in pieces) == 400
    assert all(rebase == (b'"steps"' in body) for body, _, rebase in pieces)  # only steps are shifted
    assert all(len(body) <= 2000 for body, _, _ in pieces)
    assert sum(body.count(b'"events"') for body, _, _ in pieces) == 1


def same_counters(sent: dict[str, int], final: dict[str, int]) -> bool:
    """The counters a batch carried are those at the end, but for what moved after it was built
    (the batches sent since, the request that carries it included, and the sender's CPU time)."""
    moving = ("sent_batches", "sender_cpu_us")
    if set(sent) != set(final) or sent["sent_batches"] <= 0:
        return False
    return all(sent[k] <= final[k] if k in moving else sent[k] == final[k] for k in final)


def _says_batch_counters(req: Recorded, index: int) -> Any:
    if req.path.endswith("/runs"):  # a server that takes the counters in the batch
        return 201, {}, json.dumps({**req.body, "wire": {"packed_columns": True, "batch_counters": True}}).encode()
    return None


def test_counters_ride_in_the_batch_once_the_server_takes_them(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    fake_server.script = _says_batch_counters
    agent_kwargs.update(flush_interval_s=0.3, counters_interval_s=0.1)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 40, pause_s=0.02)
    run.finish()
    data = [r for r in fake_server.requests if not r.path.endswith("/runs")]
    assert all(r.path.endswith("/batch") for r in data)
    events = [e for r in data for e in r.body.get("events", [])]
    assert [e["kind"] for e in events] == ["finish"]  # no counters event: the field carries them
    fields = [r.body["counters"] for r in data if "counters" in r.body]
    assert len(fields) >= 2
    assert same_counters(fields[-1], run.counters)  # the final flush carries the final counters


def test_a_server_without_batch_counters_gets_counters_events(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    agent_kwargs.update(flush_interval_s=0.3, counters_interval_s=0.1)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)  # the fake server's answer names no wire
    loop(run, 20, pause_s=0.02)
    run.finish()
    data = [r for r in fake_server.requests if not r.path.endswith("/runs")]
    assert not any("counters" in r.body for r in data)
    counters = [e["data"] for r in data for e in r.body.get("events", []) if e["kind"] == "counters"]
    assert counters and same_counters(counters[-1], run.counters)


def test_unbatching_for_an_older_server_turns_the_counters_into_an_event() -> None:
    from phantomhub_agent._split import unbatch
    from phantomhub_agent._spool import SpooledRequest

    body = b.encode_json({"rank": 3, "host": "h", "steps": {"step": [0], "t_start_ns": [5]}, "counters": {"sent_batches": 2}})
    request = SpooledRequest(path="/api/v1/runs/r/batch", body=body, gzipped=False, kind="batch", run_id="r", rows=1,
                             token_fp="f", server="s", created_ns=7)  # fmt: skip
    parts = {p.path.rsplit("/", 1)[1]: p for p in unbatch(request)}
    assert set(parts) == {"steps", "events"}
    [event] = json.loads(parts["events"].body)["events"]
    assert (event["kind"], event["rank"], event["data"], event["t_ns"]) == ("counters", 3, {"sent_batches": 2}, 7)
    assert "counters" not in json.loads(parts["steps"].body)


def test_against_the_real_server_the_stored_counters_are_the_agents(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    agent_kwargs.update(flush_interval_s=0.3, counters_interval_s=0.1)
    run = pa.init(project="agent", team="agent-tests", name="counters-field", server=live.url, token=live.token, **agent_kwargs)
    loop(run, 30, pause_s=0.02)
    run.finish()
    [rank] = live.run(run.id)["ranks"]
    assert same_counters(rank["counters"], run.counters) and rank["counters"]["sent_batches"] >= 2

"""One request per node: a run's local ranks hand their batches to local rank 0 (``_node``).

Four senders of one run share a spool directory, as a node's ranks do, against the scripted
server (the live path is in test_node_batches_live.py). The oracle is what was recorded: every
step of every rank reaches the server exactly once, whatever carried it.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from phantomhub_agent import _node as node
from phantomhub_agent._config import settings_from
from phantomhub_agent._spool import KIND_HANDED, token_fingerprint
from phantomhub_agent._worker import MARK_END, Worker, WorkerContext
from tests.agent.conftest import Answer, FakeServer, Recorded, wait_for

LOCAL_WORLD = 4
INTERVAL_S = 0.5
WIRE = {"packed_columns": False, "packed_nulls": False, "batch_counters": True, "node_batches": True}


def _answer(req: Recorded, wire: dict[str, bool]) -> Answer | None:
    if req.path.endswith("/runs"):
        return 201, {}, json.dumps({**req.body, "wire": wire}).encode()
    if req.path.endswith("/batches"):
        results = [{"steps": {"accepted": len(b.get("steps", {}).get("step", [])), "duplicates": 0}} for b in req.body["batches"]]
        return 200, {}, json.dumps({"batches": results}).encode()
    return None


def _workers(fake: FakeServer, spool_dir: Path, ranks: list[int], **overrides: Any) -> list[Worker]:
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, str(spool_dir)))
    workers = []
    for rank in ranks:
        settings = settings_from(
            {"server": fake.url, "token": "t", "spool_dir": str(spool_dir), "flush_interval_s": INTERVAL_S, "debug": True,
             "system_interval_s": 0, "counters_interval_s": 3600, "checkpoint_interval_s": 0, "backoff_base_s": 0.05,
             "backoff_max_s": 0.2, **overrides},
            environ={},
        )  # fmt: skip
        ctx = WorkerContext(run_id=run_id, rank=rank, host="node-0", token_fp=token_fingerprint("t"),
                            clock_offset_ns=time.time_ns() - time.perf_counter_ns(), local_rank=rank,
                            local_world_size=LOCAL_WORLD)  # fmt: skip
        worker = Worker(settings, ctx)
        worker.items.append(("request", worker.make_request("run", "/api/v1/runs", {"id": run_id, "name": "node"})))
        worker.ensure_started()
        workers.append(worker)
    return workers


def _record(workers: list[Worker], steps: range, period_ms: int = 20) -> None:
    for step in steps:
        start = time.perf_counter_ns()
        for worker in workers:
            worker.steps.append((step, start, start + period_ms * 10**6, 10**6, 2 * 10**6, 3 * 10**6, 10**6, 0,
                                 1e12, 64, 2, 0, 0, 0, 0, None))  # fmt: skip
        time.sleep(period_ms / 1000)


def _finish(workers: list[Worker]) -> None:
    for worker in workers:
        worker.steps.append((MARK_END, time.perf_counter_ns()))
    for worker in workers:
        assert worker.finish(10.0)
        assert worker.errors == []


def _steps_by_rank(fake: FakeServer, refused: frozenset[int] = frozenset()) -> dict[int, list[int]]:
    """Every step row the server took, per rank, from /batch and /batches alike (``refused``: the
    requests it answered with an error)."""
    out: dict[int, list[int]] = {}
    for k, req in enumerate(list(fake.requests)):
        if k in refused:
            continue
        if req.path.endswith("/batch"):
            parts = [req.body]
        elif req.path.endswith("/batches"):
            parts = req.body["batches"]
        else:
            continue
        for part in parts:
            out.setdefault(part["rank"], []).extend(part.get("steps", {}).get("step", []))
    return {rank: sorted(steps) for rank, steps in out.items()}


def _handed_left(spool_dir: Path) -> list[Path]:
    return [p for p in spool_dir.rglob("*.phk*") if f"-{KIND_HANDED}-" in p.name]


def test_a_node_sends_one_request_an_interval_carrying_every_local_rank(fake_server: FakeServer, spool_dir: Path) -> None:
    fake_server.script = lambda req, i: _answer(req, WIRE)
    workers = _workers(fake_server, spool_dir, list(range(LOCAL_WORLD)))
    _record(workers, range(100))  # ~2 s: four intervals
    running = [r for r in fake_server.requests if not r.path.endswith("/runs")]
    _finish(workers)

    assert _steps_by_rank(fake_server) == {rank: list(range(100)) for rank in range(LOCAL_WORLD)}  # each once
    assert not [r for r in running if r.path.endswith("/batch") and r.body["rank"] != 0]  # every peer handed its own
    # Local rank 0 may cut alone once, when the ranks' first boundaries straddle one; never after.
    assert sum(r.path.endswith("/batches") for r in running) >= len(running) - 1 >= 2
    carried = [sorted(part["rank"] for part in r.body["batches"]) for r in running if r.path.endswith("/batches")]
    assert max(len(ranks) for ranks in carried) == LOCAL_WORLD
    assert all(len(ranks) == len(set(ranks)) for ranks in carried)
    counters = [w.counters_snapshot() for w in workers]
    assert counters[0]["node_batches"] == sum(r.path.endswith("/batches") for r in fake_server.requests)
    # Every handed batch went once: with the node's (local rank 0 carried it) or, when local rank 0
    # had finished before taking it, sent by its own rank at that rank's finish (a replay).
    in_node, replayed = counters[0]["node_peer_batches"], sum(c["replayed_batches"] for c in counters[1:])
    assert in_node > 0 and in_node + replayed == sum(c["handed_batches"] for c in counters[1:])
    assert _handed_left(spool_dir) == []


def test_the_node_cut_is_aligned_on_wall_clock_boundaries() -> None:
    now = 1_700_000_012_345_000_000
    cut = node.boundary_after(now, 60.0)
    assert cut % int(60e9) == 0 and now < cut <= now + int(60e9)
    assert node.boundary_after(cut, 60.0) == cut + int(60e9)  # a cut on the boundary waits for the next
    assert node.gather_s(60.0) == 2.0 and node.gather_s(0.5) == 0.125  # local rank 0 cuts this long after
    shifted = node.boundary_after(now, 60.0, phase_s=7.5)
    assert shifted % int(60e9) == int(7.5e9) and now < shifted <= now + int(60e9)


def test_a_fleets_runs_cut_at_phases_spread_over_the_interval() -> None:
    phases = [node.run_phase_s(str(uuid.UUID(int=k)), 60.0) for k in range(2000)]
    assert phases[7] == node.run_phase_s(str(uuid.UUID(int=7)), 60.0)  # every rank of a run: the same
    counts = [sum(1 for p in phases if lo <= p < lo + 6) for lo in range(0, 60, 6)]  # ten 6 s bins
    assert all(0 <= p < 60 for p in phases) and min(counts) > 150 and max(counts) < 250  # 200 each, evenly


def test_a_peer_whose_local_rank_0_is_silent_sends_its_batches_itself(fake_server: FakeServer, spool_dir: Path) -> None:
    fake_server.script = lambda req, i: _answer(req, WIRE)
    peers = _workers(fake_server, spool_dir, [1, 2, 3])  # local rank 0 never started
    _record(peers, range(60))
    wait_for(lambda: sum(r.path.endswith("/batch") for r in fake_server.requests) >= 3, timeout_s=10)
    _finish(peers)

    assert _steps_by_rank(fake_server) == {rank: list(range(60)) for rank in (1, 2, 3)}
    assert not any(r.path.endswith("/batches") for r in fake_server.requests)
    assert all(w.counters_snapshot()["handed_batches"] >= 1 for w in peers)
    assert _handed_left(spool_dir) == []


def test_a_server_without_node_batches_gets_one_request_per_rank(fake_server: FakeServer, spool_dir: Path) -> None:
    fake_server.script = lambda req, i: _answer(req, {**WIRE, "node_batches": False})
    workers = _workers(fake_server, spool_dir, list(range(LOCAL_WORLD)))
    _record(workers, range(50))
    _finish(workers)

    assert _steps_by_rank(fake_server) == {rank: list(range(50)) for rank in range(LOCAL_WORLD)}
    assert not any(r.path.endswith("/batches") for r in fake_server.requests)
    assert sum(w.counters_snapshot()["handed_batches"] for w in workers) == 0


def test_a_refused_node_batch_goes_out_part_by_part_and_the_sender_stops_combining(
    fake_server: FakeServer, spool_dir: Path
) -> None:
    missing = json.dumps({"error": {"code": "not_found", "message": "no such endpoint"}}).encode()

    refused: set[int] = set()

    def script(req: Recorded, i: int) -> Answer | None:
        if req.path.endswith("/batches"):
            refused.add(i)
            return 404, {}, missing  # an older server that told its agents otherwise
        return _answer(req, WIRE)

    fake_server.script = script
    workers = _workers(fake_server, spool_dir, list(range(LOCAL_WORLD)))
    _record(workers, range(80))
    _finish(workers)

    assert _steps_by_rank(fake_server, frozenset(refused)) == {rank: list(range(80)) for rank in range(LOCAL_WORLD)}
    assert sum(r.path.endswith("/batches") for r in fake_server.requests) == 1  # tried once, then never again
    assert _handed_left(spool_dir) == []


def test_a_failing_server_loses_nothing_of_the_handed_batches(fake_server: FakeServer, spool_dir: Path) -> None:
    failures = {"left": 4}
    refused: set[int] = set()

    def script(req: Recorded, i: int) -> Answer | None:
        if req.path.endswith("/batches") and failures["left"] > 0:
            failures["left"] -= 1
            refused.add(i)
            return 503, {"Retry-After": "0"}, b'{"error": {"code": "unavailable", "message": "down"}}'
        return _answer(req, WIRE)

    fake_server.script = script
    workers = _workers(fake_server, spool_dir, list(range(LOCAL_WORLD)))
    _record(workers, range(120))
    _finish(workers)

    assert failures["left"] == 0
    # A batch may arrive twice (a retry racing the peer's own send): the server ignores the copy.
    stored = _steps_by_rank(fake_server, frozenset(refused))
    assert {rank: sorted(set(steps)) for rank, steps in stored.items()} == {r: list(range(120)) for r in range(LOCAL_WORLD)}
    assert _handed_left(spool_dir) == []


def test_node_batches_off_makes_every_rank_send_for_itself(fake_server: FakeServer, spool_dir: Path) -> None:
    fake_server.script = lambda req, i: _answer(req, WIRE)
    workers = _workers(fake_server, spool_dir, list(range(LOCAL_WORLD)), node_batches=False)
    _record(workers, range(20))
    _finish(workers)
    assert _steps_by_rank(fake_server) == {rank: list(range(20)) for rank in range(LOCAL_WORLD)}
    assert not any(r.path.endswith("/batches") for r in fake_server.requests)
    assert sum(w.counters_snapshot()["handed_batches"] for w in workers) == 0


def test_a_sender_with_nothing_to_send_waits_for_the_next_boundary(
    fake_server: FakeServer, spool_dir: Path, monkeypatch: Any
) -> None:
    """Nothing pending at a boundary (no steps, no samples): the boundary is taken all the same,
    and the sender sleeps until the next one instead of waking every millisecond."""
    fake_server.script = lambda req, i: _answer(req, WIRE)
    passes = {"n": 0}
    real_tick = Worker.tick

    def counted(self: Worker, **kwargs: Any) -> None:
        passes["n"] += 1
        real_tick(self, **kwargs)

    monkeypatch.setattr(Worker, "tick", counted)
    workers = _workers(fake_server, spool_dir, [0, 1])
    time.sleep(2.0)  # four boundaries of 0.5 s, nothing recorded
    assert passes["n"] < 60  # two senders, a pass every 0.25 s or at a boundary: ~25; spinning: thousands
    _finish(workers)


def test_only_a_node_of_several_local_ranks_has_a_sender() -> None:
    assert node.node_role(0, 1) is None  # alone on its node (or the launcher did not say)
    assert node.node_role(0, 8) == node.LEADER
    assert node.node_role(3, 8) == node.PEER

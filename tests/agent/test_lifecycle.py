"""The background sender's life: lazy start, offline spooling, recovery, bounded queues,
deadlines, fork, and the rule that nothing raises into the training loop."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa

from .conftest import FakeServer, Recorded, free_port


def loop(run: pa.Run, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        with run.step(step=i, tokens=10):
            with run.stage("forward"):
                pass
            with run.stage("backward"):
                pass


def steps_sent(server: FakeServer) -> list[int]:
    return [s for r in server.of("/steps") for s in r.body["steps"]["step"]]


def agent_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "phantomhub-agent"]


def test_the_sender_thread_starts_lazily_and_ends_with_the_run(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    before = len(agent_threads())
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    assert len(agent_threads()) == before + 1  # started by the first enqueue (the run's metadata)
    loop(run, 3)
    run.finish()
    time.sleep(0.05)
    assert len(agent_threads()) == before


def test_offline_mode_only_spools(fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path) -> None:
    run = pa.init(server=fake_server.url, token="t", mode="offline", **agent_kwargs)
    loop(run, 50)
    with run.phase("eval"):
        pass
    run.finish()
    assert fake_server.requests == []
    files = sorted((spool_dir / run.id).iterdir())
    assert files[0].name.split("-")[1] == "a"  # run metadata first
    assert len(files) >= 3  # metadata, steps, events


def test_a_run_without_a_token_spools_instead_of_failing(agent_kwargs: dict[str, Any], spool_dir: Path) -> None:
    run = pa.init(**agent_kwargs)
    assert run.settings.mode == "offline"
    loop(run, 2)
    run.finish()
    assert (spool_dir / run.id).is_dir()


def test_an_unavailable_server_gets_everything_once_it_recovers(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    state = {"down": True}

    def script(req: Recorded, index: int) -> Any:
        return (503, {}, b"{}") if state["down"] else None

    fake_server.script = script
    agent_kwargs.update(max_retries=1)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 100)
    time.sleep(1.0)
    assert run.counters["spooled_batches"] >= 1
    state["down"] = False
    loop(run, 100, first=100)
    run.finish()
    assert sorted(set(steps_sent(fake_server))) == list(range(200))
    assert fake_server.paths()[0] == "/api/v1/runs"  # the run's metadata is replayed first
    assert not list(spool_dir.rglob("*.phk"))
    assert run.counters["replayed_batches"] >= 1


def test_a_dead_server_never_hangs_finish(agent_kwargs: dict[str, Any], spool_dir: Path) -> None:
    run = pa.init(server=f"http://127.0.0.1:{free_port()}", token="t", **agent_kwargs)
    loop(run, 20)
    started = time.monotonic()
    run.finish(timeout=1.0)
    assert time.monotonic() - started < 2.0
    assert list((spool_dir / run.id).glob("*.phk"))


def test_a_hanging_server_never_hangs_finish(fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path) -> None:
    fake_server.delay_s = 30.0
    run = pa.init(server=fake_server.url, token="t", request_timeout_s=60.0, **agent_kwargs)
    loop(run, 20)
    started = time.monotonic()
    run.finish(timeout=1.0)
    assert time.monotonic() - started < 2.5
    spooled = list((spool_dir / run.id).glob("*.phk"))
    assert len(spooled) >= 2  # steps and the finish event are safe on disk


def test_flush_sends_all_but_the_step_waiting_for_its_end(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    agent_kwargs["flush_interval_s"] = 60.0
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 10)
    assert run.flush(timeout=5.0)
    assert sorted(steps_sent(fake_server)) == list(range(9))
    run.finish()
    assert sorted(steps_sent(fake_server)) == list(range(10))


def test_a_full_queue_drops_steps_counts_them_and_reports_the_count(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    run = pa.init(server=fake_server.url, token="t", queue_max_steps=5, **agent_kwargs)
    loop(run, 2000)
    run.finish()
    dropped = run.counters["dropped_steps"]
    assert dropped > 0
    assert len(steps_sent(fake_server)) + dropped == 2000
    reported = [e["data"] for r in fake_server.of("/events") for e in r.body["events"] if e["kind"] == "counters"]
    assert reported[-1]["dropped_steps"] == dropped


def test_internal_errors_never_reach_the_training_loop(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    agent_kwargs["debug"] = False
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)

    class Exploding:
        def __len__(self) -> int:
            raise RuntimeError("boom")

    run._rec.q = Exploding()  # type: ignore[assignment]
    loop(run, 5)  # no exception
    with run.stage("not-a-stage"):
        pass
    run.finish()
    assert run.counters["internal_errors"] >= 2
    assert sum("boom" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_debug_mode_raises_internal_errors(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    with pytest.raises(ValueError, match="unknown stage"), run.stage("not-a-stage"):
        pass
    run.finish()


def test_bad_metadata_is_refused_at_init_in_debug_mode(agent_kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="pricing_tier"):
        pa.init(pricing_tier="cheap", mode="offline", **agent_kwargs)


def test_the_context_manager_finishes_and_marks_a_crash(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    runs: list[pa.Run] = []

    def train() -> None:
        with pa.init(server=fake_server.url, token="t", **agent_kwargs) as run:
            runs.append(run)
            loop(run, 2)
            raise KeyError("training bug")

    with pytest.raises(KeyError):
        train()
    [run] = runs
    finishes = [e for r in fake_server.of("/events") for e in r.body["events"] if e["kind"] == "finish"]
    assert [e["status"] for e in finishes] == ["crashed"]
    assert run.finished


def test_a_forked_child_gets_its_own_sender_and_not_the_parents_data(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    agent_kwargs["flush_interval_s"] = 60.0
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    loop(run, 5)  # buffered in the parent, not yet sent
    pid = os.fork()
    if pid == 0:  # the child: record its own steps and flush them through a new thread
        code = 1
        try:
            loop(run, 3, first=1000)
            ok = run.flush(timeout=5.0) and run._worker.alive()
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    run.finish()
    sent = steps_sent(fake_server)
    assert sorted(sent) == [0, 1, 2, 3, 4, 1000, 1001]  # the child's last step waits for its end
    finishes = [e for r in fake_server.of("/events") for e in r.body["events"] if e["kind"] == "finish"]
    assert len(finishes) == 1  # only the parent finishes the run

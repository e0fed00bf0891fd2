"""Step numbers across restarts, against the scripted server: the agent's own numbering continues
after the last step the server holds for its rank; numbers the user gives are never changed. The
same end to end against the real server is in test_restarts_live."""

from __future__ import annotations

import gzip
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent import _batcher as b
from phantomhub_agent import cli
from phantomhub_agent._spool import (
    Spool,
    SpooledRequest,
    SpoolEntry,
    _owner_of,
    decode_file,
    encode_file,
    read_entry,
    shift_request,
)

from .conftest import FakeServer, Recorded, carries


def resumed_answer(last_steps: dict[int, int | None]) -> Any:
    """A server that knows the run, whose ranks stored up to ``last_steps``."""

    def script(req: Recorded, index: int) -> Any:
        if req.path.endswith("/runs"):
            ranks = [{"rank": rank, "host": "", "counters": {}, "last_step": last} for rank, last in last_steps.items()]
            return 200, {}, json.dumps({**req.body, "status": "running", "ranks": ranks}).encode()
        return None

    return script


def steps_sent(server: FakeServer) -> list[int]:
    return [s for r in server.of("/steps") for s in r.body["steps"]["step"]]


def auto_steps(run: pa.Run, n: int) -> None:
    for _ in range(n):
        with run.step(tokens=1):
            pass


# -- pure pieces ---------------------------------------------------------------------------------


def test_the_base_is_one_after_the_ranks_last_stored_step() -> None:
    answer = {"ranks": [{"rank": 0, "last_step": 41}, {"rank": 1, "last_step": None}, {"rank": 2}]}
    assert b.step_base_from_run(answer, 0) == 42
    assert b.step_base_from_run(answer, 1) == 0  # the rank stored nothing yet
    assert b.step_base_from_run(answer, 2) == 0  # an older server
    assert b.step_base_from_run(answer, 3) == 0  # a new rank
    assert b.step_base_from_run({"ranks": [{"rank": 0, "last_step": True}]}, 0) == 0
    assert b.step_base_from_run("not json", 0) == 0


def test_a_take_never_mixes_auto_and_explicit_rows() -> None:
    buf = b.StepBuffer(clock_offset_ns=0)
    for i in range(5):
        raw = (i, i * 10, i * 10 + 5, *([None] * 12), None)
        buf.append((raw, i * 10 + 10), now_ns=0, auto=i < 3)
    assert buf.head_is_auto
    assert buf.take(10)["step"] == [0, 1, 2]
    assert not buf.head_is_auto
    assert buf.take(10)["step"] == [3, 4]


def test_a_spooled_batch_is_shifted_once_and_loses_its_mark() -> None:
    body = b.gzip_bytes(b.encode_json({"rank": 0, "steps": {"step": [0, 1, 2], "t_start_ns": [5, 6, 7]}}))
    marked = SpooledRequest(path="/p", body=body, gzipped=True, kind="steps", run_id="r", rows=3, rebase=True)
    assert decode_file(encode_file(marked)).rebase
    shifted = shift_request(marked, 100)
    assert not shifted.rebase and not decode_file(encode_file(shifted)).rebase
    assert json.loads(gzip.decompress(shifted.body))["steps"] == {"step": [100, 101, 102], "t_start_ns": [5, 6, 7]}


# -- a run that resumes ----------------------------------------------------------------------


def test_a_resumed_run_numbers_its_steps_after_the_stored_ones(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    fake_server.script = resumed_answer({0: 41, 1: 7})
    run = pa.init(server=fake_server.url, token="t", run_id="exp-restarted", **agent_kwargs)
    auto_steps(run, 20)
    run.finish()
    assert steps_sent(fake_server) == list(range(42, 62))


def test_a_new_run_numbers_from_zero(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)  # 201, no ranks yet
    auto_steps(run, 5)
    run.finish()
    assert steps_sent(fake_server) == [0, 1, 2, 3, 4]


def test_steps_ended_before_the_answer_arrived_are_numbered_after_it(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    fake_server.script = resumed_answer({0: 99})
    fake_server.delay_s = 0.5  # a slow server: the loop runs on meanwhile, and flushes
    run = pa.init(server=fake_server.url, token="t", run_id="exp-slow", **agent_kwargs)
    auto_steps(run, 10)
    assert run.flush(timeout=10)
    fake_server.delay_s = 0.0
    auto_steps(run, 5)
    run.finish()
    assert steps_sent(fake_server) == list(range(100, 115))
    assert fake_server.paths()[0] == "/api/v1/runs"


def test_explicit_step_numbers_are_never_shifted(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    fake_server.script = resumed_answer({0: 41})
    run = pa.init(server=fake_server.url, token="t", run_id="exp-explicit", **agent_kwargs)
    for i in range(30, 35):  # e.g. a framework's global step after a resume from checkpoint
        with run.step(step=i):
            pass
    run.finish()
    assert steps_sent(fake_server) == [30, 31, 32, 33, 34]


def test_only_the_steps_before_the_first_explicit_number_are_shifted(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    fake_server.script = resumed_answer({0: 9})
    run = pa.init(server=fake_server.url, token="t", run_id="exp-mixed", **agent_kwargs)
    auto_steps(run, 3)  # the agent's numbers 0-2, sent as 10-12
    with run.step(step=500):
        pass
    auto_steps(run, 2)  # continue the user's numbering: 501, 502
    run.finish()
    assert steps_sent(fake_server) == [10, 11, 12, 500, 501, 502]


def test_steps_spooled_before_the_registration_was_answered_are_shifted_on_replay(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    up = resumed_answer({0: 19})
    down = {"on": True}

    def script(req: Recorded, index: int) -> Any:
        if down["on"]:
            return 503, {}, b'{"error": {"code": "unavailable", "message": "down"}}'
        return up(req, index)

    fake_server.script = script
    agent_kwargs.update(max_retries=0, backoff_base_s=0.01, backoff_max_s=0.05)
    run = pa.init(server=fake_server.url, token="t", run_id="exp-outage", **agent_kwargs)
    auto_steps(run, 10)
    assert run.flush(timeout=10)
    spooled = [read_entry(e) for e in Spool(spool_dir, 10**9).own(run.id)]
    assert spooled[0].kind == "run"
    assert [r.rebase for r in spooled if r.kind in ("steps", "batch") and r.rows] == [True]  # numbers not known yet
    down["on"] = False
    time.sleep(0.1)  # past the probe delay
    auto_steps(run, 5)
    run.finish(timeout=10)
    assert sorted(steps_sent(fake_server)) == list(range(20, 35))
    assert not list(spool_dir.rglob("*.phk"))


def test_sync_shifts_an_offline_spool_after_the_stored_steps(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    for _ in range(2):  # two offline processes of the same run, one after the other
        run = pa.init(mode="offline", run_id="exp-offline", batch_max_rows=4, **agent_kwargs)
        auto_steps(run, 10)
        run.finish()
    stored: list[int] = []

    def server(req: Recorded, index: int) -> Any:
        if req.path.endswith("/runs"):
            last = max(stored) if stored else None
            answer = {**req.body, "ranks": [{"rank": 0, "last_step": last}] if stored else []}
            return 200, {}, json.dumps(answer).encode()
        if carries(req, "steps"):
            stored.extend(req.body["steps"]["step"])
        return None

    fake_server.script = server
    assert cli.sync(spool_dir, fake_server.url, "t", out=io.StringIO()) == 0
    assert stored == list(range(20))  # the second process continued after the first


@pytest.mark.parametrize("foreign", [False, True], ids=["own files", "a dead process's files"])
def test_rebase_rewrites_the_files_of_the_registrations_process_up_to_its_next_registration(
    spool_dir: Path, foreign: bool
) -> None:
    writer = Spool(spool_dir, 10**9, rank=1)
    if foreign:
        writer.pid = 999_999_999  # no such process
    other_rank = Spool(spool_dir, 10**9, rank=2)

    def steps(rebase: bool, first: int) -> SpooledRequest:
        body = b.encode_json({"rank": 1, "steps": {"step": [first, first + 1], "t_start_ns": [1, 2]}})
        return SpooledRequest(path="/s", body=body, gzipped=False, kind="steps", run_id="r", rows=2, rebase=rebase)

    def registration() -> SpooledRequest:
        return SpooledRequest(path="/api/v1/runs", body=b"{}", gzipped=False, kind="run", run_id="r", rows=1)

    writer.write(registration())
    writer.write(steps(True, 0))
    other_rank.write(steps(True, 0))  # another rank: its own registration decides
    writer.write(steps(False, 7))  # explicit numbers
    writer.write(registration())  # a later run of the same process
    writer.write(steps(True, 0))
    reader = Spool(spool_dir, 10**9)
    entries = sorted((spool_dir / "r").iterdir())
    assert reader.rebase_after(reader_entry(entries[0]), 50) == 1
    after = [decode_file(p.read_bytes()) for p in sorted((spool_dir / "r").iterdir())]
    bodies = [json.loads(r.body)["steps"]["step"] if r.kind == "steps" else None for r in after]
    assert bodies == [None, [50, 51], [0, 1], [7, 8], None, [0, 1]]
    assert [r.rebase for r in after] == [False, False, True, False, False, True]
    assert not [p for p in (spool_dir / "r").iterdir() if "claimed" in p.name or p.name.startswith(".tmp")]


def reader_entry(path: Path) -> SpoolEntry:
    return SpoolEntry(path=path, run_id=path.parent.name, name=path.name, owner_pid=_owner_of(path.name))

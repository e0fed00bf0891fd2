"""Restarts and runs one after the other, against the live server: a restarted process (the same
PHANTOMHUB_RUN_ID again) continues the step numbers of its run instead of losing its steps as
"duplicates", an elastic restart is the job's next attempt, and two runs of one process are billed
one after the other, never the same seconds twice."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent import cli

from .conftest import LiveServer, free_port, run_script

pytestmark = pytest.mark.live_server

AUTO_STEPS_SCRIPT = """
import sys, time
import phantomhub_agent as pa
run = pa.init(name="restartable", debug=True, flush_interval_s=0.2, max_retries=0, request_timeout_s=2)
explicit = sys.argv[2] == "explicit"
for i in range(int(sys.argv[1])):
    with run.step(step=i if explicit else None, samples=8):
        time.sleep(0.001)
run.finish()
print(run.id)
"""


def start(live: LiveServer, tmp_path: Path, steps: int, *, numbering: str = "auto", server: str | None = None, **env: str) -> str:
    """One process of a run; the run id it used."""
    base = {"PHANTOMHUB_SERVER": server or live.url, "PHANTOMHUB_TOKEN": live.token, "PHANTOMHUB_SPOOL_DIR": str(tmp_path / "s")}
    done = run_script(AUTO_STEPS_SCRIPT, tmp_path, {**base, **env}, args=[str(steps), numbering])
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def rank_of(live: LiveServer, run_id: str, rank: int) -> dict[str, Any]:
    [entry] = [r for r in live.run(run_id)["ranks"] if r["rank"] == rank]
    return entry


def test_a_restarted_process_continues_the_step_numbers_of_its_run(live: LiveServer, tmp_path: Path) -> None:
    env = {"PHANTOMHUB_RUN_ID": f"restart-{tmp_path.name}"}
    run_id = start(live, tmp_path, 30, **env)
    assert start(live, tmp_path, 20, **env) == run_id
    rows = live.steps(run_id, rank=0)
    assert rows["step"] == list(range(50))  # nothing refused: the training time is all there
    assert all(a < b for a, b in zip(rows["t_start_ns"], rows["t_start_ns"][1:]))  # the restart's steps come after
    assert rank_of(live, run_id, 0)["reused_step_rows"] == 0
    assert rank_of(live, run_id, 0)["last_step"] == 49


def test_an_elastic_restart_is_a_second_attempt_of_the_same_job(live: LiveServer, tmp_path: Path) -> None:
    """torchrun restarts the workers with the same rendezvous id and a higher restart count: each
    attempt is a run of its own (its steps are never refused as reused), both in one job."""
    elastic = {"TORCHELASTIC_RUN_ID": f"job-{tmp_path.name}", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    ids: list[set[str]] = [set(), set()]
    for restart, steps in enumerate((12, 5)):
        for rank in (0, 1):
            env = {**elastic, "RANK": str(rank), "LOCAL_RANK": str(rank), "TORCHELASTIC_RESTART_COUNT": str(restart)}
            ids[restart].add(start(live, tmp_path, steps + rank, **env))
    [first], [second] = ids
    assert first != second
    jobs = [live.run(run_id)["job"] for run_id in (first, second)]
    assert jobs[0] == jobs[1] and jobs[0]["key"] == f"torchelastic/job-{tmp_path.name}"
    assert [live.run(run_id)["attempt"] for run_id in (first, second)] == [0, 1]
    assert live.steps(first, rank=0)["step"] == list(range(12))
    assert live.steps(second, rank=1)["step"] == list(range(6))
    assert rank_of(live, second, 1)["reused_step_rows"] == 0


def test_explicit_step_numbers_are_kept_and_reused_ones_are_counted(live: LiveServer, tmp_path: Path) -> None:
    env = {"PHANTOMHUB_RUN_ID": f"explicit-{tmp_path.name}"}
    run_id = start(live, tmp_path, 30, numbering="explicit", **env)
    start(live, tmp_path, 10, numbering="explicit", **env)  # e.g. a resume from an older checkpoint
    rows = live.steps(run_id, rank=0)
    assert rows["step"] == list(range(30))
    assert rank_of(live, run_id, 0)["reused_step_rows"] == 10  # refused, but not silently


def test_a_restart_while_the_server_is_down_is_renumbered_when_its_spool_is_delivered(live: LiveServer, tmp_path: Path) -> None:
    env = {"PHANTOMHUB_RUN_ID": f"outage-{tmp_path.name}"}
    run_id = start(live, tmp_path, 25, **env)
    start(live, tmp_path, 15, server=f"http://127.0.0.1:{free_port()}", **env)  # nothing reaches the server
    assert live.steps(run_id, rank=0)["step"] == list(range(25))
    assert cli.sync(tmp_path / "s", live.url, live.token, out=io.StringIO()) == 0
    assert live.steps(run_id, rank=0)["step"] == list(range(40))
    assert rank_of(live, run_id, 0)["reused_step_rows"] == 0


TWO_RUNS_SCRIPT = """
import time
import phantomhub_agent as pa
ids = []
for trial in range(2):  # a sweep loop
    run = pa.init(name=f"trial-{trial}", debug=True, flush_interval_s=0.2)
    for i in range(10):
        with run.step():
            time.sleep(0.01)
    run.finish()
    ids.append(run.id)
    time.sleep(0.3)  # between trials: the next one's start-up
print(*ids)
"""


def moment(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_two_runs_of_one_process_are_billed_one_after_the_other(live: LiveServer, tmp_path: Path) -> None:
    env = {"PHANTOMHUB_SERVER": live.url, "PHANTOMHUB_TOKEN": live.token, "PHANTOMHUB_SPOOL_DIR": str(tmp_path / "s")}
    done = run_script(TWO_RUNS_SCRIPT, tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (live.run(run_id) for run_id in done.stdout.split())
    assert first["status"] == second["status"] == "finished"
    # the first run starts with the process (before its own init); the second where the first ended
    assert moment(first["allocation_start"]) <= moment(first["started_at"])
    assert moment(second["allocation_start"]) == moment(first["finished_at"])
    assert moment(second["allocation_start"]) < moment(second["started_at"])
    billed = sorted((moment(r["allocation_start"]), moment(r["finished_at"])) for r in (first, second))
    assert billed[0][1] <= billed[1][0]  # no second billed to both


def test_an_explicit_allocation_start_wins_for_a_later_run(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    before = pa.init(name="earlier", server=live.url, token=live.token, **agent_kwargs)
    before.finish()
    given = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    run = pa.init(name="given", server=live.url, token=live.token, allocation_start=given, **agent_kwargs)
    run.finish()
    assert moment(live.run(run.id)["allocation_start"]) == given

"""Checkpoints: with 60 s flushes, what waits in memory is on disk every checkpoint interval, so a
SIGKILL loses at most one checkpoint interval; the live process never sends its own checkpoints,
deletes them once their rows went out, and a checkpoint sent after its rows changes nothing."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent import _batcher as b
from phantomhub_agent._batcher import unpack_payload
from phantomhub_agent._config import settings_from
from phantomhub_agent._spool import Spool, SpooledRequest, decode_file, iter_spool_files

from .conftest import PYTHON, SCRIPT_ENV, FakeServer, LiveServer, agent_cli, run_script, wait_for
from .test_batcher import raw_step


def checkpoint_files(root: Path) -> list[Path]:
    return [path for _, path in iter_spool_files(root) if path.name.split("-")[1] == "c"]


def payload_of(path: Path) -> dict[str, Any]:
    request = decode_file(path.read_bytes())
    raw = gzip.decompress(request.body) if request.gzipped else request.body
    return unpack_payload(json.loads(raw.decode("utf-8")))


def checkpointed_steps(root: Path) -> list[int]:
    return [s for path in checkpoint_files(root) for s in payload_of(path).get("steps", {}).get("step", [])]


def record(run: pa.Run, steps: range) -> None:
    for i in steps:
        with run.step(step=i, tokens=7 * i, samples=i % 5):
            pass


def test_checkpoints_every_10_s_and_flushes_every_60_s_by_default_and_the_variable_sets_it() -> None:
    defaults = settings_from({}, environ={})
    assert (defaults.flush_interval_s, defaults.checkpoint_interval_s) == (60.0, 10.0)
    assert settings_from({}, environ={"PHANTOMHUB_CHECKPOINT_INTERVAL": "2.5"}).checkpoint_interval_s == 2.5
    assert settings_from({"checkpoint_interval_s": 0}, environ={}).checkpoint_interval_s == 0
    with pytest.raises(ValueError, match="checkpoint_interval_s"):
        settings_from({"checkpoint_interval_s": -1, "debug": True}, environ={})


def test_a_buffers_rows_since_a_mark_skip_what_was_taken_and_keep_auto_and_explicit_apart() -> None:
    buffer = b.StepBuffer(clock_offset_ns=1000)
    for step in range(5):  # 0-2 numbered by the agent, 3-4 by the user
        buffer.append((raw_step(step, 10 * step, 10 * step + 5), 10 * step + 10), now_ns=0, auto=step < 3)
    assert buffer.take(2)["step"] == [0, 1]
    auto, explicit = buffer.since(1)  # row 1 was taken: only what is still here
    assert (auto["step"], explicit["step"]) == ([2], [3, 4])
    assert auto["t_start_ns"] == [1020] and explicit["dur_ns"] == [10, 10]
    assert [cols["step"] for cols in buffer.since(4)] == [[], [4]]
    assert [cols["step"] for cols in buffer.since(5)] == [[], []]
    assert buffer.since(0)[0]["step"] == [2]  # nothing is removed by looking
    samples = b.ColumnBuffer(b.SAMPLE_COLUMNS)
    for t in range(4):
        samples.append([t, -1] + [None] * 8, now_ns=0)
    samples.take(3)
    assert samples.since(2)["t_ns"] == [3] and samples.since(4)["t_ns"] == []


# -- the spool: checkpoints are not backlog while their writer lives -----------------------------


def test_a_live_writers_checkpoints_are_not_its_backlog_but_a_dead_ones_are_orphans(spool_dir: Path) -> None:
    spool = Spool(spool_dir, max_bytes=10**6)
    data = SpooledRequest(path="/api/v1/runs/r/batch", body=b"{}", gzipped=False, kind="batch", run_id="r", rows=1)
    spooled = spool.write(data)
    checkpoint = spool.write(data, checkpoint=True)
    assert spooled is not None and checkpoint is not None
    assert checkpoint.name.split("-")[1] == "c"
    assert [e.path for e in spool.own("r")] == [spooled]
    spool.remove(spool.own("r")[0])
    assert not spool.has_own("r")  # only the checkpoint is left
    assert spool.orphans() == []  # its writer (this process) is alive
    dead = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    orphan = checkpoint.with_name(checkpoint.name.replace(f"-p{os.getpid()}-", f"-p{dead_pid}-"))
    checkpoint.rename(orphan)
    assert [e.path for e in spool.orphans()] == [orphan]


def test_a_full_spool_skips_a_checkpoint_without_counting_its_rows_as_dropped(spool_dir: Path) -> None:
    spool = Spool(spool_dir, max_bytes=100)
    big = SpooledRequest(path="/api/v1/runs/r/batch", body=b"x" * 500, gzipped=False, kind="batch", run_id="r", rows=9)
    assert spool.write(big, checkpoint=True) is None
    assert (spool.dropped_batches, spool.dropped_rows) == (0, 0)  # the rows are still in memory


# -- the checkpoint files of a live run ---------------------------------------------------------


def test_each_checkpoint_holds_exactly_the_rows_recorded_since_the_previous_one(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    agent_kwargs.update(flush_interval_s=60.0, checkpoint_interval_s=0.2, counters_interval_s=60.0)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    record(run, range(10))
    with run.phase("eval"):  # closes step 9, and is an event
        pass
    wait_for(lambda: len(checkpointed_steps(spool_dir)) == 10)
    record(run, range(10, 25))
    with run.phase("checkpoint"):
        pass
    wait_for(lambda: len(checkpointed_steps(spool_dir)) >= 25)
    files = checkpoint_files(spool_dir)
    payloads = [payload_of(path) for path in files]
    steps = [s for p in payloads if "steps" in p for s in p["steps"]["step"]]
    tokens = [t for p in payloads if "steps" in p for t in p["steps"]["tokens"]]
    assert steps == list(range(25))  # every row once, in order: deltas, not the whole buffer again
    assert tokens == [7 * i for i in range(25)]
    phases = [e["name"] for p in payloads for e in p.get("events", []) if e["kind"] == "phase"]
    assert phases == ["eval", "checkpoint"]
    sample_times = [t for p in payloads if "samples" in p for t in p["samples"]["t_ns"]]
    assert len(sample_times) == len(set(sample_times))
    assert all(p["rank"] == 0 for p in payloads)
    assert [r.path for r in fake_server.requests] == ["/api/v1/runs"]  # nothing sent but the registration
    # The counter moves just after its file appears: read it once the two agree, or fail on timeout.
    wait_for(lambda: run.counters["checkpoints_written"] == len(files))
    run.finish()
    assert checkpoint_files(spool_dir) == []  # their rows went out: deleted
    assert sorted(s for r in fake_server.of("/steps") for s in r.body["steps"]["step"]) == list(range(25))


def test_a_live_process_sends_one_batch_per_flush_and_never_its_own_checkpoints(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    agent_kwargs.update(flush_interval_s=1.5, checkpoint_interval_s=0.1, counters_interval_s=60.0)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < 3.9:
        record(run, range(i, i + 1))
        i += 1
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    batches = [r for r in fake_server.requests if r.path.endswith("/batch")]
    assert 1 <= len(batches) <= elapsed / 1.5  # one per flush, while dozens of checkpoints were written
    assert run.counters["checkpoints_written"] >= 10
    run.finish()
    sent = [s for r in fake_server.of("/steps") for s in r.body["steps"]["step"]]
    assert sent == list(range(i))  # each step once: no checkpoint was sent
    assert checkpoint_files(spool_dir) == []


def test_checkpoints_wait_for_the_step_base_then_carry_the_shift(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    """A restarted rank: the registration's answer says 41 steps are stored; the checkpoint
    carries the auto-numbered steps as the batch will, from 41."""

    def answer(req: Any, index: int) -> Any:
        if req.path.endswith("/runs"):
            return 201, {}, json.dumps({**req.body, "ranks": [{"rank": 0, "last_step": 40}]}).encode()
        return None

    fake_server.script = answer
    agent_kwargs.update(flush_interval_s=60.0, checkpoint_interval_s=0.2, counters_interval_s=60.0)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    for _ in range(6):
        with run.step():
            pass
    files = wait_for(lambda: [p for p in checkpoint_files(spool_dir) if "steps" in payload_of(p)])
    assert [s for p in files for s in payload_of(p)["steps"]["step"]] == list(range(41, 46))
    run.finish()
    assert checkpoint_files(spool_dir) == []


def test_no_checkpoints_when_the_batches_come_as_often(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    agent_kwargs.update(flush_interval_s=0.2, checkpoint_interval_s=0.2)
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    for i in range(40):
        record(run, range(i, i + 1))
        time.sleep(0.02)
    run.finish()
    assert run.counters["checkpoints_written"] == 0
    assert len(fake_server.of("/batch")) >= 2


def test_offline_runs_spool_at_the_checkpoint_interval_and_write_no_checkpoints(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    agent_kwargs.update(flush_interval_s=60.0, checkpoint_interval_s=0.3, counters_interval_s=60.0)
    run = pa.init(server=fake_server.url, token="t", mode="offline", **agent_kwargs)
    record(run, range(5))
    with run.phase("eval"):
        pass
    wait_for(lambda: any(path.name.split("-")[1] == "b" for _, path in iter_spool_files(spool_dir)))
    assert checkpoint_files(spool_dir) == []
    run.finish()
    assert fake_server.requests == []


# -- the live server: SIGKILL, normal finish, duplicates -----------------------------------------

CHECKPOINT_INTERVAL_S = 1.0
KILLED_SCRIPT = """
import sys, time, torch
import phantomhub_agent as pa
run = pa.init(name="sigkilled", debug=True, flush_interval_s=60, checkpoint_interval_s=float(sys.argv[1]), system_interval_s=0.5)
print("RUN", run.id, flush=True)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100000):
    with run.step(samples=8):
        with run.stage("forward"):
            loss = model(torch.randn(8, 16)).sum()
        with run.stage("backward"):
            loss.backward()
        with run.stage("optimizer"):
            opt.step(); opt.zero_grad()
        time.sleep(0.02)
    print("ENDED", i, time.time(), flush=True)
"""


def script_env(live: LiveServer, spool: Path, server: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")}
    env.update(SCRIPT_ENV, PHANTOMHUB_SERVER=server or live.url, PHANTOMHUB_TOKEN=live.token, PHANTOMHUB_SPOOL_DIR=str(spool))
    return env


def sync(live: LiveServer, spool: Path) -> subprocess.CompletedProcess[str]:
    env = script_env(live, spool)
    return subprocess.run([agent_cli(), "sync", str(spool)], env=env, capture_output=True, text=True, timeout=120)


RESTART_SCRIPT = """
import phantomhub_agent as pa
run = pa.init(name="again", debug=True)
for i in range(10):
    with run.step():
        pass
run.finish()
"""


def rank_of(live: LiveServer, run_id: str) -> dict[str, Any]:
    [entry] = [r for r in live.run(run_id)["ranks"] if r["rank"] == 0]
    return entry


@pytest.mark.live_server
@pytest.mark.slow
def test_a_sigkill_loses_at_most_one_checkpoint_interval_and_sync_delivers_the_rest_once(
    live: LiveServer, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    script = tmp_path / "train.py"
    script.write_text(KILLED_SCRIPT)
    proc = subprocess.Popen(
        [PYTHON, str(script), str(CHECKPOINT_INTERVAL_S)],
        env=script_env(live, spool),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ended: dict[int, float] = {}  # step -> wall time its `with` block ended, as the child reported it
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("RUN"), (first, proc.stderr.read() if proc.poll() is not None else "")
        run_id = first.split()[1]
        stdout = proc.stdout

        def read_ended() -> None:
            for line in stdout:
                _, step, at = line.split()
                ended[int(step)] = float(at)

        reader = threading.Thread(target=read_ended)
        reader.start()
        wait_for(lambda: len(ended) >= 20)
        time.sleep(4.0)  # several checkpoints, far less than the 60 s flush
    finally:
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    reader.join(timeout=10)
    assert live.steps(run_id, rank=0).get("step", []) == []  # the live process sent no steps at all
    assert checkpoint_files(spool)  # ... but they are on disk
    done = sync(live, spool)
    assert done.returncode == 0, done.stderr
    stored = live.steps(run_id, rank=0)["step"]
    assert stored == list(range(len(stored)))  # a prefix of what was recorded, nothing twice
    assert rank_of(live, run_id)["last_step"] == len(stored) - 1
    assert rank_of(live, run_id)["reused_step_rows"] == 0
    # The bound: one interval, plus the sender's poll (0.5 s) and scheduling on a busy machine.
    slack_s = 0.5 + 1.0
    must_have = [i for i, t in ended.items() if t <= killed_at - CHECKPOINT_INTERVAL_S - slack_s]
    assert len(must_have) >= 20
    assert max(must_have) < len(stored), (max(must_have), len(stored), len(ended))
    assert len(stored) <= len(ended)
    assert list(spool.rglob("*.phk")) == []  # the checkpoints were delivered and deleted


@pytest.mark.live_server
@pytest.mark.slow
def test_a_restarted_process_sends_its_killed_predecessors_checkpoint_before_numbering_its_own(
    live: LiveServer, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    script = tmp_path / "train.py"
    script.write_text(KILLED_SCRIPT)
    env = {**script_env(live, spool), "PHANTOMHUB_RUN_ID": f"restart-{tmp_path.name}"}
    proc = subprocess.Popen([PYTHON, str(script), "0.3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = iter(proc.stdout.readline, "")
        run_id = next(lines).split()[1]
        for line in lines:
            if int(line.split()[1]) >= 40:
                break
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    killed = len([p for p in checkpoint_files(spool) if "steps" in payload_of(p)])
    assert killed  # its steps are in checkpoints only
    again = run_script(RESTART_SCRIPT, tmp_path, {k: v for k, v in env.items() if k.startswith("PHANTOMHUB_")})
    assert again.returncode == 0, again.stderr[-3000:]
    stored = live.steps(run_id, rank=0)["step"]
    assert stored == list(range(len(stored)))  # the restart numbered its steps after the replayed ones
    assert len(stored) >= 40 + 10
    assert rank_of(live, run_id)["reused_step_rows"] == 0
    # Every file the spool finished is sent and gone. A SIGKILL in the middle of a write leaves
    # that write's temporary file (never a file the spool reads); the spool removes those once
    # an hour old (_spool.py cleanup_stale_tmp), not at once: the writer may be alive elsewhere.
    assert [p for p in spool.rglob("*.phk") if not p.name.startswith(".tmp-")] == []


FINISHING_SCRIPT = """
import time
import phantomhub_agent as pa
run = pa.init(name="finishing", debug=True, flush_interval_s=60, checkpoint_interval_s=0.3, system_interval_s=0.2)
for i in range(120):
    with run.step(tokens=i):
        time.sleep(0.02)
    if i % 40 == 39:
        with run.phase("eval"):
            time.sleep(0.01)
run.finish()
print(run.id)
"""


@pytest.mark.live_server
@pytest.mark.slow
def test_a_normal_finish_loses_nothing_and_a_late_checkpoint_changes_nothing(live: LiveServer, tmp_path: Path) -> None:
    spool, copies = tmp_path / "spool", tmp_path / "copies"
    copies.mkdir()
    stop = threading.Event()

    def keep_copies() -> None:  # what a crash just before a checkpoint's deletion would leave
        while not stop.is_set():
            try:
                for run_dir, path in iter_spool_files(spool):
                    target = copies / run_dir / path.name
                    if path.name.split("-")[1] == "c" and not target.exists():
                        target.parent.mkdir(exist_ok=True)
                        os.link(path, target)
            except OSError:  # deleted meanwhile: the next look finds the rest
                pass
            time.sleep(0.01)

    watcher = threading.Thread(target=keep_copies)
    watcher.start()
    try:
        done = run_script(FINISHING_SCRIPT, tmp_path, script_env(live, spool, None))
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = done.stdout.strip()
    assert list(spool.rglob("*.phk")) == []  # no checkpoint left behind
    rows = live.steps(run_id, rank=0)
    assert rows["step"] == list(range(120)) and rows["tokens"] == list(range(120))
    assert rank_of(live, run_id)["last_step"] == 119
    late = sorted(checkpoint_files(copies))
    assert len(late) >= 5
    parts = {"steps": 0, "samples": 0, "events": 0}
    for path in late:  # each one straight to the server: every row and event is a duplicate
        status, answer = live.request("POST", f"/api/v1/runs/{run_id}/batch", payload_of(path))
        assert status == 200, answer
        for name, counts in answer.items():
            assert counts["accepted"] == 0, (name, counts)
            parts[name] += counts["duplicates"]
    assert all(parts.values()), parts  # steps, samples and events were all in the checkpoints
    synced = subprocess.run(
        [agent_cli(), "sync", str(copies)], env=script_env(live, spool), capture_output=True, text=True, timeout=120
    )
    assert synced.returncode == 0, synced.stderr
    assert live.steps(run_id, rank=0)["step"] == list(range(120))
    assert rank_of(live, run_id)["last_step"] == 119
    assert live.run(run_id)["status"] == "finished"

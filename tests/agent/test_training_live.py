"""Real PyTorch CPU training loops against a live PhantomHub server; stored rows read back."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import phantomhub_agent as pa

from .conftest import PYTHON, SCRIPT_ENV, FaultProxy, LiveServer, agent_cli, free_port, run_script

pytestmark = [pytest.mark.live_server, pytest.mark.slow]  # a long unit: handed out first (tests/conftest.py)
torch.set_num_threads(1)  # see conftest: OpenMP wake-ups on a small VM would swamp the timings

MS = 1_000_000
TOLERANCE_NS = 10 * MS  # typical sleep overshoot and scheduling on a busy 2-core machine
OUTLIER_NS = 40 * MS  # the worst single step may be preempted by other load


def tiny_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def batches(n: int, sleep_s: float = 0.0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for _ in range(n):
        if sleep_s:
            time.sleep(sleep_s)
        yield torch.randn(8, 16), torch.randint(0, 4, (8,))


def train(
    run: pa.Run,
    n: int,
    *,
    first: int = 0,
    data_s: float = 0.0,
    stage_s: tuple[float, float, float] = (0, 0, 0),
    on_step: Any = None,
) -> None:
    model, opt = tiny_model()
    x, y = next(batches(1))
    nn.functional.cross_entropy(model(x), y).backward()  # warm-up: first calls initialise kernels
    opt.zero_grad()
    for i, (x, y) in enumerate(run.data(batches(n, data_s))):
        with run.step(step=first + i, tokens=128, samples=8):
            with run.stage("forward"):
                loss = nn.functional.cross_entropy(model(x), y)
                time.sleep(stage_s[0])
            with run.stage("backward"):
                loss.backward()
                time.sleep(stage_s[1])
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()
                time.sleep(stage_s[2])
        if on_step is not None:
            on_step(first + i)


def within(values: list[int], expected_ns: int) -> bool:
    """Never below the injected sleep; typically just above it; never far above it."""
    return (
        all(expected_ns <= v <= expected_ns + OUTLIER_NS for v in values)
        and statistics.median(values) <= expected_ns + TOLERANCE_NS
    )


@pytest.mark.alone  # asserts on measured sleeps: other load on the machine lengthens them
def test_injected_sleeps_land_in_the_right_columns(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(
        project="agent",
        team="agent-tests",
        name="sleeps",
        dtype="fp32",
        server=live.url,
        token=live.token,
        **agent_kwargs,
    )
    model, _ = tiny_model()
    flops = run.count_flops(model, torch.randn(8, 16))
    forward = 2 * 8 * (16 * 32 + 32 * 4)
    backward = 2 * 8 * (16 * 32) + 2 * 2 * 8 * (32 * 4)  # no input gradient for the first layer
    assert flops == forward + backward

    def eval_after_three(step: int) -> None:
        if step == 3:
            with run.phase("eval"):
                time.sleep(0.06)

    train(run, 8, data_s=0.030, stage_s=(0.010, 0.020, 0.005), on_step=eval_after_three)
    run.finish()

    rows = live.steps(run.id, rank=0)
    assert rows["step"] == list(range(8))
    assert within(rows["data_ns"], 30 * MS), rows["data_ns"]
    assert within(rows["forward_ns"], 10 * MS), rows["forward_ns"]
    assert within(rows["backward_ns"], 20 * MS), rows["backward_ns"]
    assert within(rows["optimizer_ns"], 5 * MS), rows["optimizer_ns"]
    assert rows["flops"] == [flops] * 8
    assert rows["tokens"] == [128] * 8 and rows["samples"] == [8] * 8
    for i in range(7):
        stages = rows["data_ns"][i] + rows["forward_ns"][i] + rows["backward_ns"][i] + rows["optimizer_ns"][i]
        assert stages <= rows["dur_ns"][i] <= stages + OUTLIER_NS
        assert rows["t_start_ns"][i] + rows["dur_ns"][i] <= rows["t_start_ns"][i + 1]
    # the 60 ms eval after step 3 is not charged to step 3, but leaves a gap before step 4
    # (charged, step 3 would last its stages + 60 ms; a fixed 70 ms bound failed at 72 ms on a
    # loaded machine, where the stages themselves stretch)
    stages_3 = sum(rows[c][3] for c in ("data_ns", "forward_ns", "backward_ns", "optimizer_ns"))
    assert rows["dur_ns"][3] < stages_3 + 60 * MS
    assert rows["t_start_ns"][4] - (rows["t_start_ns"][3] + rows["dur_ns"][3]) >= 60 * MS
    assert abs(rows["t_start_ns"][0] - time.time_ns()) < 120 * 10**9  # wall clock, unix epoch ns

    stored = live.run(run.id)
    assert stored["status"] == "finished"
    assert stored["name"] == "sleeps" and stored["dtype"] == "fp32"
    assert stored["environment"]["torch"] == torch.__version__


def test_server_stopped_mid_run_then_restarted_every_step_arrives_exactly_once(
    live: LiveServer, agent_kwargs: dict[str, Any]
) -> None:
    run = pa.init(name="restart", server=live.url, token=live.token, **agent_kwargs)

    def outage(step: int) -> None:
        time.sleep(0.002)
        if step == 60:
            live.stop()
        if step == 140:
            # Restart only once the agent has spooled: how many retries a short outage takes
            # before the agent spools depends on the machine's load (a bare 80-step outage was
            # sometimes ridden out by retries alone, leaving nothing to replay).
            deadline = time.monotonic() + 20
            while run.counters["spooled_batches"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            live.start()

    train(run, 200, on_step=outage)
    run.finish(timeout=30)
    rows = live.steps(run.id, rank=0)
    assert rows["step"] == list(range(200))
    counters = live.run(run.id)["ranks"][0]["counters"]
    assert counters["spooled_batches"] > 0 and counters["replayed_batches"] > 0
    assert counters["dropped_steps"] == 0 and counters["spool_dropped_batches"] == 0
    assert live.run(run.id)["status"] == "finished"


def test_injected_500_and_429_lose_nothing_and_double_nothing(
    live: LiveServer, fault_proxy: FaultProxy, agent_kwargs: dict[str, Any]
) -> None:
    def rule(index: int, path: str) -> Any:
        if path.endswith(("/steps", "/events", "/batch")):
            if index % 4 == 1:
                return ("after", 500, {})  # stored, but the agent is told it failed
            if index % 4 == 2:
                return ("answer", 429, {"Retry-After": "0.1"})
        if path.endswith("/runs") and index == 0:
            return ("answer", 503, {})
        return None

    fault_proxy.rule = rule
    run = pa.init(name="faults", server=fault_proxy.url, token=live.token, batch_max_rows=25, **agent_kwargs)
    train(run, 300)
    run.finish(timeout=60)
    statuses = {status for _, status in fault_proxy.log}
    assert {500, 429, 503} <= statuses
    rows = live.steps(run.id, rank=0)
    assert rows["step"] == list(range(300))
    assert live.run(run.id)["status"] == "finished"


def test_a_dataloader_with_worker_processes(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    class Slow(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __len__(self) -> int:
            return 160

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            time.sleep(0.001)
            return torch.randn(16), torch.tensor(i % 4)

    run = pa.init(name="workers", server=live.url, token=live.token, **agent_kwargs)
    loader = torch.utils.data.DataLoader(Slow(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    model, opt = tiny_model()
    for x, y in run.data(loader):
        with run.step(samples=len(x)):
            with run.stage("forward"):
                loss = nn.functional.cross_entropy(model(x), y)
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()
    run.finish()
    rows = live.steps(run.id, rank=0)
    assert rows["step"] == list(range(20))
    assert all(v is not None and v > 0 for v in rows["data_ns"])
    stored = live.run(run.id)
    assert stored["status"] == "finished"
    assert [r["rank"] for r in stored["ranks"]] == [0]


SPOOLING_SCRIPT = """
import sys, time, torch
import phantomhub_agent as pa
run = pa.init(name="killed", debug=True, max_retries=0, flush_interval_s=60, request_timeout_s=1)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(40):
    with run.step(samples=8):
        with run.stage("forward"):
            loss = model(torch.randn(8, 16)).sum()
        with run.stage("backward"):
            loss.backward()
        with run.stage("optimizer"):
            opt.step(); opt.zero_grad()
assert run.flush(timeout=10)
print("SPOOLED", run.id, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_process_spool_is_delivered_by_sync(live: LiveServer, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")}
    env.update(
        SCRIPT_ENV,
        PHANTOMHUB_SERVER=f"http://127.0.0.1:{free_port()}",
        PHANTOMHUB_TOKEN=live.token,
        PHANTOMHUB_SPOOL_DIR=str(spool),
    )
    script = tmp_path / "train.py"
    script.write_text(SPOOLING_SCRIPT)
    proc = subprocess.Popen([PYTHON, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("SPOOLED"), (line, proc.stderr.read() if proc.poll() is not None else "")
        run_id = line.split()[1]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert live.get(f"/api/v1/runs/{run_id}")[0] == 404  # nothing reached the server
    sync_env = {**env, "PHANTOMHUB_SERVER": live.url}
    done = subprocess.run([agent_cli(), "sync", str(spool)], env=sync_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "delivered" in done.stderr and "[" in done.stderr  # the progress bar
    rows = live.steps(run_id, rank=0)
    assert rows["step"] == list(range(39))  # everything flushed (the 40th step never ended)
    assert not list(spool.rglob("*.phk"))


NEXT_START_SCRIPT = """
import sys, torch
import phantomhub_agent as pa
run = pa.init(name=sys.argv[1], debug=True, max_retries=0, finish_timeout_s=5, request_timeout_s=1)
for i in range(int(sys.argv[2])):
    with run.step():
        with run.stage("forward"):
            torch.randn(64, 64) @ torch.randn(64, 64)
run.finish()
print(run.id)
"""


@pytest.mark.slow
def test_a_spool_left_by_an_earlier_process_is_replayed_on_the_next_start(live: LiveServer, tmp_path: Path) -> None:
    spool = str(tmp_path / "spool")
    down = {
        "PHANTOMHUB_SERVER": f"http://127.0.0.1:{free_port()}",
        "PHANTOMHUB_TOKEN": live.token,
        "PHANTOMHUB_SPOOL_DIR": spool,
    }
    first = run_script(NEXT_START_SCRIPT, tmp_path, down, args=["offline-first", "30"])
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.strip()
    second = run_script(NEXT_START_SCRIPT, tmp_path, {**down, "PHANTOMHUB_SERVER": live.url}, args=["second", "5"])
    assert second.returncode == 0, second.stderr
    assert live.steps(first_id, rank=0)["step"] == list(range(30))
    assert live.run(first_id)["status"] == "finished"
    assert live.steps(second.stdout.strip(), rank=0)["step"] == list(range(5))


CRASH_SCRIPT = """
import torch
import phantomhub_agent as pa
run = pa.init(name="crash", debug=True)
print(run.id, flush=True)
for i in range(5):
    with run.step():
        with run.stage("forward"):
            torch.randn(8, 8).sum()
raise RuntimeError("loss is nan")
"""


def test_an_unhandled_exception_marks_the_run_crashed(live: LiveServer, tmp_path: Path) -> None:
    env = {"PHANTOMHUB_SERVER": live.url, "PHANTOMHUB_TOKEN": live.token, "PHANTOMHUB_SPOOL_DIR": str(tmp_path)}
    done = run_script(CRASH_SCRIPT, tmp_path, env)
    assert done.returncode == 1
    assert "RuntimeError: loss is nan" in done.stderr  # the original hook still prints
    run_id = done.stdout.strip()
    assert live.run(run_id)["status"] == "crashed"
    assert live.steps(run_id, rank=0)["step"] == list(range(5))


DDP_SCRIPT = """
import os, time, torch, torch.distributed as dist
import phantomhub_agent as pa
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
run = pa.init(name="ddp", debug=True, flush_interval_s=0.2)
run.watch(model)
for step in range(12):
    with run.step(samples=16):
        with run.stage("forward"):
            loss = model(torch.randn(16, 64)).sum()
            if rank == 1:
                time.sleep(0.04)  # a straggler: rank 0 waits for it in the all-reduce
        with run.stage("backward"):
            loss.backward()
        with run.stage("optimizer"):
            opt.step(); opt.zero_grad()
run.finish()
if rank == 0:
    print(run.id, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_two_process_ddp_run_reports_both_ranks_and_the_straggler(live: LiveServer, tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")}
    env.update(
        PHANTOMHUB_SERVER=live.url,
        PHANTOMHUB_TOKEN=live.token,
        PHANTOMHUB_SPOOL_DIR=str(tmp_path / "s"),
        OMP_NUM_THREADS="1",
    )
    done = subprocess.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = done.stdout.strip().splitlines()[-1]
    stored = live.run(run_id)
    assert stored["world_size"] == 2
    assert sorted(r["rank"] for r in stored["ranks"]) == [0, 1]
    fast, slow = live.steps(run_id, rank=0), live.steps(run_id, rank=1)
    assert fast["step"] == slow["step"] == list(range(12))
    assert all(v is not None for v in fast["comm_ns"] + slow["comm_ns"])
    fast_wait, slow_wait = statistics.median(fast["comm_ns"][1:]), statistics.median(slow["comm_ns"][1:])
    assert fast_wait >= 25 * MS, fast["comm_ns"]  # rank 0 waits ~40 ms for the straggler every step
    assert slow_wait < fast_wait / 2, (fast["comm_ns"], slow["comm_ns"])
    # the exposed wait is not double counted in backward
    assert statistics.median(fast["backward_ns"][1:]) < 25 * MS


def test_every_kind_of_record_the_agent_sends_is_accepted(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    """GPU sample rows, oom/phase/counters/finish events and odd values: no 4xx (debug mode
    would raise at finish), and the steps read back."""
    run = pa.init(name="kinds", server=live.url, token=live.token, gpu_model="H100-SXM", gpu_count=1, **agent_kwargs)
    with run.step(tokens=torch.tensor(512), samples=4, flops=10**15):
        pass
    run._worker.drain.sample_cols.append(
        [time.time_ns(), 0, 97.0, 1980, 40 * 2**30, 612.5, None, None, None, None], time.monotonic_ns()
    )
    run._on_step_exception(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), 0)
    with run.phase("checkpoint"):
        pass
    run.finish()
    rows = live.steps(run.id, rank=0)
    assert rows["step"] == [0] and rows["tokens"] == [512] and rows["flops"] == [10**15]
    assert live.run(run.id)["gpu_model"] == "H100-SXM"

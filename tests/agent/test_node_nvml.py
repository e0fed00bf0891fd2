"""The NVML source and the request body, with a stand-in NVML (the hardware, the only fake) of
four GPUs in known states, and the holders' owners read from this machine's real /proc: one
process runs the real training agent (its run registry names the run), the others do not."""

from __future__ import annotations

import importlib.util
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from phantomhub_agent.node import NvmlSource, OwnerConfig, OwnerResolver, payload_build

STANDIN = Path(__file__).parent / "data" / "standin_nvml" / "pynvml.py"
GIB = 1024**3
MIB = 1024**2


def standin_nvml(state: dict[str, Any]) -> ModuleType:
    """A fresh stand-in ``pynvml`` module object holding ``state``."""
    spec = importlib.util.spec_from_file_location(f"pynvml_standin_{time.monotonic_ns()}", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.set_state(state)
    return module


def gpu(index: int, **fields: Any) -> dict[str, Any]:
    base = {
        "uuid": f"GPU-{index:08d}-aaaa-bbbb-cccc-{index:012d}",
        "name": "NVIDIA H100 80GB HBM3",
        "util": 0,
        "mem_used": 0,
        "mem_total": 80 * GIB,
        "power_mw": 70_000,
        "sm_clock": 345,
        "compute": [],
    }
    base.update(fields)
    return base


def four_gpus(run_pid: int, busy_pid: int, idle_pid: int) -> dict[str, Any]:
    return {
        "gpus": [
            gpu(0, util=97, mem_used=71 * GIB, power_mw=612_514, sm_clock=1980, compute=[[run_pid, 70 * GIB]]),
            # busy, no agent: also listed as a graphics process with less memory (merged, the larger kept)
            gpu(
                1,
                util=99,
                mem_used=40 * GIB,
                power_mw=655_000,
                sm_clock=1980,
                compute=[[busy_pid, 39 * GIB]],
                graphics=[[busy_pid, GIB]],
            ),
            # idle-held: memory held, nothing computing; NVML cannot tell this process's memory
            gpu(2, util=0, mem_used=38 * GIB, power_mw=71_305, compute=[[idle_pid, None]]),
            # empty, and a board without power readings
            gpu(3, util=0, mem_used=300 * MIB, unsupported=["power"]),
        ]
    }


def test_nvml_readings_keep_units_and_null_what_the_board_cannot_tell() -> None:
    nvml = standin_nvml(four_gpus(111, 222, 333))
    source = NvmlSource(nvml)
    readings = source.read()
    assert [r.index for r in readings] == [0, 1, 2, 3]
    assert readings[0].uuid == "GPU-00000000-aaaa-bbbb-cccc-000000000000"
    assert readings[0].model == "NVIDIA H100 80GB HBM3"  # bytes from older bindings, decoded
    assert (readings[0].util_pct, readings[0].mem_used_bytes, readings[0].mem_total_bytes) == (97.0, 71 * GIB, 80 * GIB)
    assert readings[0].power_w == pytest.approx(612.514)  # milliwatts to watts
    assert readings[0].sm_clock_mhz == 1980.0
    assert [(h.pid, h.mem_used_bytes) for h in readings[1].holders] == [(222, 39 * GIB)]
    assert [(h.pid, h.mem_used_bytes) for h in readings[2].holders] == [(333, None)]
    assert readings[3].power_w is None and readings[3].holders == []
    source.close()
    assert nvml.calls["nvmlShutdown"] == 1


def test_a_gpu_changing_state_is_read_anew_each_interval() -> None:
    nvml = standin_nvml(four_gpus(111, 222, 333))
    source = NvmlSource(nvml)
    assert source.read()[3].util_pct == 0.0
    state = four_gpus(111, 222, 333)
    state["gpus"][3].update(util=55, compute=[[444, 2 * GIB]])
    nvml.set_state(state)
    again = source.read()[3]
    assert again.util_pct == 55.0 and [(h.pid, h.mem_used_bytes) for h in again.holders] == [(444, 2 * GIB)]


AGENT_SCRIPT = """
import sys, phantomhub_agent as pa
run = pa.init(project="llm-pretrain", name="node-view", mode="offline", debug=True, spool_dir=sys.argv[1])
print(run.id, flush=True)
sys.stdin.readline()
run.finish()
print("finished", flush=True)
"""


@pytest.fixture
def processes(tmp_path: Path) -> Any:
    """A real training process (the agent, offline) and two plain processes, on this machine."""
    env = {**os.environ, "PHANTOMHUB_RUN_DIR": str(tmp_path / "runs")}
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT_SCRIPT, str(tmp_path / "spool")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    plain = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    assert agent.stdout is not None
    run_id = agent.stdout.readline().strip()
    yield agent, run_id, plain
    for proc in (agent, *plain):
        proc.kill()
        proc.wait()


def test_the_request_names_the_run_of_the_instrumented_gpu_and_the_user_of_the_others(tmp_path: Path, processes: Any) -> None:
    agent, run_id, (busy, idle) = processes
    nvml = standin_nvml(four_gpus(agent.pid, busy.pid, idle.pid))
    resolver = OwnerResolver(OwnerConfig(proc_root=Path("/proc"), run_dir=tmp_path / "runs"))
    node = {"hostname": "gpu-a-17", "labels": {}, "collector_version": "t", "source": "nvml"}
    body = payload_build(
        node=node, interval_s=15, t_ns=1_790_000_000_000_000_000, readings=NvmlSource(nvml).read(), owner_of=resolver.owner
    )

    me = pwd.getpwuid(os.getuid()).pw_name
    assert body["node"] == {**node, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 4}
    assert body["interval_s"] == 15
    t = 1_790_000_000_000_000_000
    assert body["gpus"] == {
        "t_ns": [t] * 4,
        "gpu_index": [0, 1, 2, 3],
        "gpu_uuid": [f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}" for i in range(4)],
        "util_pct": [97.0, 99.0, 0.0, 0.0],
        "mem_used_bytes": [71 * GIB, 40 * GIB, 38 * GIB, 300 * MIB],
        "mem_total_bytes": [80 * GIB] * 4,
        "power_w": [612.514, 655.0, 71.305, None],
        "sm_clock_mhz": [1980.0, 1980.0, 345.0, 345.0],
    }
    procs = body["processes"]
    assert procs["gpu_index"] == [0, 1, 2] and procs["pid"] == [agent.pid, busy.pid, idle.pid]
    assert procs["mem_used_bytes"] == [70 * GIB, 39 * GIB, None]
    owners = [body["owners"][i] for i in procs["owner"]]
    assert owners[0] == {"kind": "run", "project": "llm-pretrain", "run_id": run_id, "server_run_id": None}
    if owners[1]["kind"] == "user":  # (this machine may itself run in a pod or a Slurm job)
        assert owners[1] == owners[2] == {"kind": "user", "user": me}
    assert len(body["owners"]) == 2  # the two plain processes share one owner entry

    # The run finishes (its process goes on): the same GPU is no longer the run's.
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write("\n")
    agent.stdin.flush()
    assert agent.stdout.readline().strip() == "finished"
    assert not (tmp_path / "runs" / f"{agent.pid}.json").exists()
    later = payload_build(
        node=node, interval_s=15, t_ns=t + 15 * 10**9, readings=NvmlSource(nvml).read(), owner_of=resolver.owner
    )
    assert later["owners"][later["processes"]["owner"][0]]["kind"] != "run"


def test_a_process_gone_before_its_lookup_keeps_its_row_without_an_owner(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    nvml = standin_nvml({"gpus": [gpu(0, util=50, mem_used=GIB, compute=[[gone.pid, GIB]])]})
    resolver = OwnerResolver(OwnerConfig(proc_root=Path("/proc"), run_dir=tmp_path / "runs"))
    body = payload_build(node={"hostname": "h"}, interval_s=15, t_ns=1, readings=NvmlSource(nvml).read(), owner_of=resolver.owner)
    assert body["processes"]["pid"] == [gone.pid] and body["processes"]["owner"] == [None]
    assert body["owners"] == []

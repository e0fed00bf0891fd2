"""What the node collector costs its host: CPU and memory of `phantomhub-agent node` on a node of
8 GPUs with 16 processes holding them, at the default 15 s interval.

The GPUs are the stand-in NVML (tests/agent/data/standin_nvml, loaded as `pynvml`): the only
thing faked. The processes are real (16 sleeping processes on this machine, 4 of them with a
run registry entry as an in-process agent writes it), so every owner lookup reads this
machine's real /proc. The collector sends to a local receiver that answers like the server.
CPU is the collector process's user + system time from /proc/<pid>/stat (startup included, and
in steady state from its first request on); memory its resident set (VmRSS sampled every
second, VmHWM at the end). Targets: under 1% of a core, under 50 MiB.

    .venv/bin/python bench/node_collector.py [--duration 180] [--gpus 8] [--procs 16] [--interval 15] [--nvml real]

With ``--nvml real`` the host's own NVML and GPUs are read instead (the 16 processes then hold
no GPU; the GPUs' real holders are looked up).

Prints the figures and writes bench/results/node_collector.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests" / "agent" / "data" / "standin_nvml"
RESULTS = ROOT / "bench" / "results" / "node_collector.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 1024**3
MIB = 1024**2
TARGET_CORE_PCT = 1.0
TARGET_RSS_MIB = 50.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class Receiver:
    """Answers POST /api/v1/nodes/samples like the server does, and records what came."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, int, dict[str, Any]]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                data = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
                body = json.loads(data)
                receiver.requests.append((time.monotonic(), len(raw), body))
                answer = json.dumps(
                    {
                        "node": body["node"]["hostname"],
                        "stored": {"gpu": len(body["gpus"]["t_ns"]), "processes": len(body["processes"]["t_ns"])},
                        "duplicates": 0,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def gpu_state(n_gpus: int, pids: list[int]) -> dict[str, Any]:
    gpus = []
    for i in range(n_gpus):
        held = pids[i::n_gpus]  # the processes spread over the GPUs, two each for 16 on 8
        gpus.append(
            {
                "uuid": f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
                "name": "NVIDIA H100 80GB HBM3",
                "util": [97, 99, 0, 43, 88, 0, 12, 100][i % 8],
                "mem_used": (10 + 8 * len(held)) * GIB,
                "mem_total": 80 * GIB,
                "power_mw": 350_000 + 10_000 * i,
                "sm_clock": 1980,
                "compute": [[pid, 8 * GIB] for pid in held],
            }
        )
    return {"gpus": gpus}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds the collector runs (at least 120)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--interval", type=int, default=15)
    parser.add_argument("--nvml", choices=("standin", "real"), default="standin", help="real: this host's NVML and GPUs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="phantomhub-node-bench-"))
    runs = work / "runs"
    runs.mkdir()
    holders = [subprocess.Popen(["sleep", str(args.duration + 120)]) for _ in range(args.procs)]
    receiver = Receiver()
    collector: subprocess.Popen[bytes] | None = None
    try:
        pids = [p.pid for p in holders]
        now = dt.datetime.now(tz=dt.UTC).isoformat()
        for k, pid in enumerate(pids[: max(1, args.procs // 4)]):  # a quarter of them run the agent
            record = {"pid": pid, "project": "llm-pretrain", "run_id": f"00000000-0000-4000-8000-{k:012d}",
                      "server_run_id": None, "server": receiver.url, "started_at": now}  # fmt: skip
            (runs / f"{pid}.json").write_text(json.dumps(record))
        state = work / "nvml-state.json"
        state.write_text(json.dumps(gpu_state(args.gpus, pids)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")}
        env["PHANTOMHUB_RUN_DIR"] = str(runs)
        if args.nvml == "standin":
            env.update(PYTHONPATH=str(STANDIN), NVML_STANDIN_STATE=str(state))
        cmd = [sys.executable, "-m", "phantomhub_agent.cli", "node", "--server", receiver.url, "--token", "phk_bench",
               "--interval", str(args.interval), "--spool", str(work / "spool"), "--hostname", "bench-node"]  # fmt: skip
        started = time.monotonic()
        collector = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
        rss_kib: list[int] = []
        first_cpu: float | None = None
        first_at: float | None = None
        while time.monotonic() - started < args.duration:
            time.sleep(1.0)
            rss_kib.append(status_kib(collector.pid, "VmRSS"))
            if first_cpu is None and receiver.requests:
                first_cpu, first_at = cpu_seconds(collector.pid), time.monotonic()
        cpu_total = cpu_seconds(collector.pid)
        hwm_kib = status_kib(collector.pid, "VmHWM")
        ended = time.monotonic()
        collector.send_signal(signal.SIGTERM)
        exit_code = collector.wait(timeout=30)
    finally:
        if collector is not None and collector.poll() is None:
            collector.kill()
        for proc in holders:
            proc.kill()
            proc.wait()
        receiver.close()
    wall_s = ended - started
    steady_s = ended - (first_at or started)
    steady_cpu = cpu_total - (first_cpu or 0.0)
    requests = receiver.requests
    bodies = [b for _, _, b in requests]
    owners = {json.dumps(o, sort_keys=True) for b in bodies for o in b["owners"]}
    result = {
        "bench": "node_collector",
        "when": dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        "command": "python bench/node_collector.py " + " ".join(sys.argv[1:]),
        "nvml": args.nvml,
        "gpus": len(bodies[0]["gpus"]["t_ns"]) if bodies else args.gpus,
        "processes": args.procs,
        "interval_s": args.interval,
        "wall_s": round(wall_s, 1),
        "requests": len(requests),
        "request_bytes_mean": round(sum(n for _, n, _ in requests) / max(1, len(requests))),
        "process_rows_per_request": round(sum(len(b["processes"]["pid"]) for b in bodies) / max(1, len(bodies)), 1),
        "distinct_owners": len(owners),
        "cpu_s_total": round(cpu_total, 3),
        "cpu_s_per_min": round(cpu_total / wall_s * 60, 3),
        "core_pct": round(cpu_total / wall_s * 100, 3),
        "steady_cpu_s_per_min": round(steady_cpu / steady_s * 60, 3),
        "steady_core_pct": round(steady_cpu / steady_s * 100, 3),
        "rss_mib_max": round(max(rss_kib) * 1024 / MIB, 1),
        "rss_mib_last": round(rss_kib[-1] * 1024 / MIB, 1),
        "vm_hwm_mib": round(hwm_kib * 1024 / MIB, 1),
        "exit_code": exit_code,
        "target_core_pct": TARGET_CORE_PCT,
        "target_rss_mib": TARGET_RSS_MIB,
    }
    result["meets_targets"] = result["core_pct"] < TARGET_CORE_PCT and result["vm_hwm_mib"] < TARGET_RSS_MIB
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    node = f"{result['gpus']} GPUs ({args.nvml} NVML), {args.procs} processes"
    print(f"node collector, {node}, every {args.interval} s, {wall_s:.0f} s:")
    each = f"{result['request_bytes_mean']} bytes each, {result['process_rows_per_request']} process rows"
    print(f"  requests            {len(requests)} ({each})")
    print(f"  CPU                 {result['cpu_s_per_min']:.3f} s/min = {result['core_pct']:.3f}% of a core (startup included)")
    print(f"  CPU, steady state   {result['steady_cpu_s_per_min']:.3f} s/min = {result['steady_core_pct']:.3f}% of a core")
    print(f"  memory              RSS max {result['rss_mib_max']} MiB, high-water mark {result['vm_hwm_mib']} MiB")
    print(
        f"  targets (<{TARGET_CORE_PCT}% of a core, <{TARGET_RSS_MIB:.0f} MiB): {'met' if result['meets_targets'] else 'NOT met'}"
    )
    print(f"  wrote {RESULTS.relative_to(ROOT)}")
    return 0 if exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

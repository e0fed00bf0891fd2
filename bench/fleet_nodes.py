"""Node collectors against the whole server: what a GPU node costs in server CPU per minute.

Simulated 8-GPU nodes each send one ``POST /api/v1/nodes/samples`` every 15 s (gzip, a node token,
staggered over the interval), as ``phantomhub-agent node`` does: 8 GPU rows and a process row per
held GPU, their owners a mix of runs, pods, Slurm jobs and users. The server is gunicorn + one
Celery worker + Celery beat (the ``fleet-derive`` task every 30 s turns samples into priced
node-day rows) + PostgreSQL + Redis, on its own database. Before the window each node posts
``--preload-hours`` of history (so derivation works on a day that already holds samples); after a
warm-up, the CPU time of the gunicorn master and workers, the Celery worker and beat is read
before and after a steady window:

- server CPU ms per node-minute (web, worker, beat, total) and per GPU-minute;
- requests and GPU rows sent vs stored, p50 / p99 request latency;
- node-days still waiting to be derived at the end (the derivation keeps up when it is ~0).

    .venv/bin/python bench/fleet_nodes.py [--nodes 32 128] [--window 120] [--preload-hours 1]

Writes bench/results/fleet_nodes.json.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import manage, server_setup  # noqa: E402
from bench.fleet import Server, _cpu_s, _tree, pct  # noqa: E402

NS = 10**9
GPUS = 8
INTERVAL_S = 15
OWNERS = [
    {"kind": "run", "project": "fleet", "run_id": "bench-run", "server_run_id": None},
    {"kind": "k8s", "namespace": "ml-batch", "pod": "worker-0", "labels": {"team": "bench"}},
    {"kind": "slurm", "job_id": "1", "account": "bench", "partition": "gpu", "user": "alice"},
    {"kind": "user", "user": "bob"},
]


def body(node: int, times_ns: list[int]) -> dict[str, Any]:
    gpus: dict[str, list[Any]] = {
        k: []
        for k in ("t_ns", "gpu_index", "gpu_uuid", "util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "sm_clock_mhz")
    }
    procs: dict[str, list[Any]] = {k: [] for k in ("t_ns", "gpu_index", "pid", "mem_used_bytes", "owner")}
    for t in times_ns:
        for g in range(GPUS):
            owner = (node + g) % 5  # 0-3: an owner, 4: empty
            util = (90.0, 60.0, 0.0, 30.0, 0.0)[owner]
            mem = 40 * 2**30 if owner < 4 else 0
            for key, value in zip(gpus, (t, g, f"GPU-{node}-{g}", util, mem, 80 * 2**30, 400.0, 1800.0), strict=True):
                gpus[key].append(value)
            if owner < 4:
                for key, value in zip(procs, (t, g, 1000 + g, mem, owner), strict=True):
                    procs[key].append(value)
    meta = {"hostname": f"bench-node-{node:04d}", "provider": "aws", "region": "us-east-1", "resource_id": f"i-bench{node}",
            "gpu_model": "H100-SXM", "gpu_count": GPUS, "source": "nvml", "collector_version": "bench"}  # fmt: skip
    return {"node": meta, "interval_s": INTERVAL_S, "gpus": gpus, "processes": procs, "owners": OWNERS}


class Poster:
    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.latencies_ms: list[float] = []
        self.errors = 0
        self.sent_gpu_rows = 0
        self.stored_gpu_rows = 0
        self.lock = threading.Lock()

    def post(self, payload: dict[str, Any]) -> None:
        data = gzip.compress(json.dumps(payload).encode(), 1)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Content-Encoding": "gzip"}
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/api/v1/nodes/samples", body=data, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            ok = response.status == 200
        except OSError:
            ok, answer = False, b""
        finally:
            conn.close()
        with self.lock:
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
            self.sent_gpu_rows += len(payload["gpus"]["t_ns"])
            if ok:
                self.stored_gpu_rows += int(json.loads(answer)["stored"]["gpu"])
            else:
                self.errors += 1


def preload(poster: Poster, nodes: int, hours: float, now_ns: int) -> None:
    """Each node's last `hours` of history, an hour (240 samples) a request, as a spool replay sends it."""
    start = now_ns - int(hours * 3600) * NS
    times = list(range(start - start % (INTERVAL_S * NS), now_ns - 60 * NS, INTERVAL_S * NS))
    for node in range(nodes):
        for i in range(0, len(times), 240):
            poster.post(body(node, times[i : i + 240]))


def node_loop(poster: Poster, node: int, stop: threading.Event, offset_s: float) -> None:
    if stop.wait(offset_s):
        return
    while not stop.is_set():
        t = time.time_ns()
        poster.post(body(node, [t - t % NS]))
        stop.wait(INTERVAL_S - (time.time_ns() - t) / NS)


def pending(env: dict[str, str]) -> int:
    code = "from phantomhub.fleet.models import DayPending; print(DayPending.objects.count())"
    return int(manage(env, "shell", "-c", code).splitlines()[-1])


def one_case(args: argparse.Namespace, server: Server, token: str, nodes: int) -> dict[str, Any]:
    poster = Poster(server.port, token)
    print(f"[{nodes} nodes] preloading {args.preload_hours} h of history …", flush=True)
    preload(poster, nodes, args.preload_hours, time.time_ns())
    poster.latencies_ms.clear()
    stop = threading.Event()
    threads = [
        threading.Thread(target=node_loop, args=(poster, n, stop, INTERVAL_S * n / nodes), daemon=True) for n in range(nodes)
    ]
    for th in threads:
        th.start()
    time.sleep(args.warmup)
    beat = _cpu_s(_tree(server.beat.pid)) if server.beat else 0.0
    web0, worker0 = server.cpu()
    sent0, stored0, lat0 = poster.sent_gpu_rows, poster.stored_gpu_rows, len(poster.latencies_ms)
    t0 = time.monotonic()
    time.sleep(args.window)
    elapsed = time.monotonic() - t0
    web1, worker1 = server.cpu()
    beat1 = _cpu_s(_tree(server.beat.pid)) if server.beat else 0.0
    requests = len(poster.latencies_ms) - lat0
    window_lat = poster.latencies_ms[lat0:]
    sent, stored = poster.sent_gpu_rows - sent0, poster.stored_gpu_rows - stored0
    stop.set()
    for th in threads:
        th.join(30)
    time.sleep(35)  # one more fleet-derive round
    node_min = nodes * elapsed / 60
    web, worker, beat_s = web1 - web0, worker1 - worker0, beat1 - beat
    case = {
        "nodes": nodes,
        "gpus": nodes * GPUS,
        "window_s": round(elapsed, 1),
        "requests": requests,
        "requests_per_node_min": round(requests / node_min, 2),
        "gpu_rows_sent": sent,
        "gpu_rows_stored": stored,
        "errors": poster.errors,
        "latency_ms_p50": round(pct(window_lat, 50) or 0, 1),
        "latency_ms_p99": round(pct(window_lat, 99) or 0, 1),
        "cpu_s": {"web": round(web, 2), "worker": round(worker, 2), "beat": round(beat_s, 2)},
        "cpu_ms_per_node_min": {
            "web": round(web * 1000 / node_min, 1),
            "worker": round(worker * 1000 / node_min, 1),
            "total": round((web + worker + beat_s) * 1000 / node_min, 1),
        },
        "cpu_ms_per_gpu_min": round((web + worker + beat_s) * 1000 / (node_min * GPUS), 2),
        "node_days_pending_after": pending(server.env),
    }
    print(json.dumps(case, indent=2), flush=True)
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--preload-hours", type=float, default=1.0)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_fleet_nodes")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--log-dir", default="/tmp/ph-fleet-nodes")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fleet_nodes.json"))
    args = parser.parse_args()

    env = server_setup(args.database_url, args.redis_url)
    manage(env, "createtoken", "--team", "bench", "--project", "fleet")  # the runs' project, for attribution
    token = manage(env, "createnodetoken", "--hostname", "bench-node-*", "--name", "bench").strip()
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    server = Server(env, args.web_workers, log_dir, beat=True)
    cases: list[dict[str, Any]] = []
    try:
        for nodes in args.nodes:
            cases.append(one_case(args, server, token, nodes))
            write_result(args, cases)
    finally:
        server.stop()
    print(f"wrote {args.out}")


def write_result(args: argparse.Namespace, cases: list[dict[str, Any]]) -> None:
    result = {
        "bench": "fleet_nodes",
        "command": "bench/fleet_nodes.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "server": {"web_workers": args.web_workers, "celery_concurrency": 1, "beat": True, "ingest_rate": "off"},
        "gpus_per_node": GPUS,
        "interval_s": INTERVAL_S,
        "window_s": args.window,
        "warmup_s": args.warmup,
        "preload_hours": args.preload_hours,
        "cases": cases,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""What one ingest request costs the web process, in CPU, in-process and by part.

The whole-server bench (bench/fleet.py) reads the web processes' CPU time; this one finds where
it goes. Bodies are what a rank sends for one flush interval (bench/fleet_sim.py's RankSim: packed
columns, gzip, 1-10 steps/s per rank, a host and a GPU sample a second, the counters event once a
minute), posted through Django's full request path (middleware, authentication, parsing, the
view, the transaction, the analysis request on commit) with django.test.Client, against
PostgreSQL and Redis; gunicorn's own share is not in it. Per request: CPU (process time) p50 / p99
and the first (cold) one, and the CPU the request's PostgreSQL backend spent on it (read from
/proc, so PostgreSQL must run on this machine); ``--profile`` prints the functions that take most
of the web side's (cProfile on process time).

    .venv/bin/python bench/request_cost.py [--flush 10 60] [--requests 400] [--counters-wire event field] [--profile]

Writes bench/results/request_cost.json.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent"))
from bench.common import backend_cpu_s, manage, server_setup  # noqa: E402

RANKS = 8


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def bodies(
    run_ids: list[str], token: str, flush_s: float, n: int, counters_s: float, counters_wire: str
) -> list[tuple[str, bytes]]:
    """``n`` request bodies, round robin over every rank of every run, each one flush interval long."""
    import random

    from bench.fleet_sim import RankSim

    rng = random.Random(7)
    sims = [RankSim(r, k, token, rng.uniform(1, 10), 100 * i + k) for i, r in enumerate(run_ids) for k in range(RANKS)]
    now_ns = time.time_ns() - int(n / len(sims) * flush_s * 1e9) - 10**9
    for sim in sims:
        sim.counters_field = counters_wire == "field"
        sim.next_start_ns = now_ns
        sim.last_sample_s = now_ns // 10**9
        sim.next_counters = 0.0  # the first body of each rank carries the counters event
    out = []
    for i in range(n):
        sim = sims[i % len(sims)]
        t = sim.next_start_ns + int(flush_s * 1e9)
        every = max(1, round(counters_s / flush_s)) if counters_s > 0 else 0
        sim.next_counters = 0.0 if every and i // len(sims) % every == 0 else float("inf")
        out.append((f"/api/v1/runs/{sim.run_id}/batch", sim.body(t)))
    return out


def postgres_backend(client: Any, token: str) -> int:
    """The pid of the PostgreSQL backend that serves this process's requests (one connection)."""
    from django.db import connection

    client.get("/api/v1/health")  # the connection is open, as it is for every request after
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def one_case(args: argparse.Namespace, client: Any, token: str, run_ids: list[str], flush_s: float, wire: str) -> dict[str, Any]:
    n, profile = args.requests, args.profile
    work = bodies(run_ids, token, flush_s, n, args.counters, wire)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_CONTENT_ENCODING": "gzip"}
    cpu: list[float] = []
    pg_cpu: list[float] = []
    backend = postgres_backend(client, token)
    prof = cProfile.Profile(time.process_time) if profile else None
    for path, body in work:
        b0 = backend_cpu_s(backend)
        t0 = time.process_time()
        if prof:
            prof.enable()
        response = client.post(path, body, content_type="application/json", **headers)
        if prof:
            prof.disable()
        cpu.append((time.process_time() - t0) * 1000)
        pg_cpu.append((backend_cpu_s(backend) - b0) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.content[:300]!r}")
    case = {
        "flush_s": flush_s,
        "counters_every_s": args.counters,
        "counters_wire": wire,
        "requests": n,
        "body_bytes_mean": round(sum(len(b) for _, b in work) / n),
        "cpu_ms": {"first": round(cpu[0], 2), "p50": round(pct(cpu, 50), 2), "p99": round(pct(cpu, 99), 2),
                   "mean": round(sum(cpu) / n, 2)},
        # /proc counts CPU in clock ticks (10 ms): only the mean over many requests is meaningful.
        "postgres_cpu_ms_mean": round(sum(pg_cpu) / n, 2),
    }  # fmt: skip
    print(
        f"flush {flush_s:>4} s (counters every {args.counters:g} s as {wire}): {n} requests, "
        f"{case['body_bytes_mean']} B gzip'd each; CPU per request first "
        f"{case['cpu_ms']['first']} ms, p50 {case['cpu_ms']['p50']} ms, p99 {case['cpu_ms']['p99']} ms, "
        f"mean {case['cpu_ms']['mean']} ms; PostgreSQL's backend {case['postgres_cpu_ms_mean']} ms a request (mean)",
        flush=True,
    )
    if prof:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out).sort_stats("cumulative")
        stats.print_stats(45)
        if os.environ.get("BENCH_TOTTIME"):
            stats.sort_stats("tottime").print_stats(40)
        if os.environ.get("BENCH_CALLEES"):
            stats.print_callees(os.environ["BENCH_CALLEES"])
        print(out.getvalue())
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flush", type=float, nargs="+", default=[10.0, 60.0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--counters", type=float, default=60.0, help="seconds between a rank's counters events (0: none)")
    parser.add_argument(
        "--counters-wire", choices=["field", "event"], nargs="+", default=["field"],
        help="counters as the batch's `counters` field (the agent's, against this server) or as an event (older agents); "
        "several: each is a case, side by side",
    )  # fmt: skip
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_request")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "request_cost.json"))
    args = parser.parse_args()

    env = server_setup(args.database_url, args.redis_url)
    token = manage(env, "createtoken", "--team", "bench", "--project", "requests")
    os.environ.update(env)
    import django

    django.setup()
    from django.test import Client

    client = Client(SERVER_NAME="127.0.0.1")
    cases = []
    for flush_s in args.flush:
        for wire in args.counters_wire:
            run_ids = [str(uuid.uuid4()) for _ in range(args.runs)]
            for run_id in run_ids:
                meta = {"id": run_id, "name": f"req-{run_id[:8]}", "gpu_model": "H100-SXM", "gpu_count": RANKS,
                        "world_size": RANKS, "dtype": "bf16", "pricing_tier": "on_demand"}  # fmt: skip
                r = client.post("/api/v1/runs", json.dumps(meta), content_type="application/json",
                                HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
                if r.status_code not in (200, 201):
                    raise RuntimeError(f"registration: {r.status_code} {r.content[:300]!r}")
            cases.append(one_case(args, client, token, run_ids, flush_s, wire))
    result = {
        "bench": "request_cost",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "what": "CPU per POST /api/v1/runs/{id}/batch through Django's request path (no gunicorn), PostgreSQL + Redis",
        "cases": cases,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

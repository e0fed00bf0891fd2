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

Writes bench/results/request_cost.json. ``--node-batches`` compares instead, per flush interval,
a node's 8 ranks sending their batches as 8 ``POST .../batch`` requests with the same 8 batches
in one ``POST .../batches`` (the same data, into runs of their own, the two interleaved node
interval by node interval), and prints the CPU per rank of each; bench/results/request_cost_node.json.
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


def node_body(rank_bodies: list[bytes]) -> bytes:
    """One node's ``POST .../batches`` body from its ranks' ``POST .../batch`` bodies (gzip'd as the agent does)."""
    import gzip

    import orjson

    from phantomhub_agent._batcher import gzip_bytes

    return gzip_bytes(orjson.dumps({"batches": [orjson.loads(gzip.decompress(body)) for body in rank_bodies]}))


def post_timed(client: Any, token: str, path: str, body: bytes, backend: int, prof: Any = None) -> tuple[float, float]:
    """One gzip'd POST through Django's request path: (web CPU ms, its PostgreSQL backend's CPU ms)."""
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_CONTENT_ENCODING": "gzip"}
    b0 = backend_cpu_s(backend)
    t0 = time.process_time()
    if prof:
        prof.enable()
    response = client.post(path, body, content_type="application/json", **headers)
    if prof:
        prof.disable()
    cpu_ms = (time.process_time() - t0) * 1000
    pg_ms = (backend_cpu_s(backend) - b0) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{path}: {response.status_code} {response.content[:300]!r}")
    return cpu_ms, pg_ms


def one_case(args: argparse.Namespace, client: Any, token: str, run_ids: list[str], flush_s: float, wire: str) -> dict[str, Any]:
    n, profile = args.requests, args.profile
    work = bodies(run_ids, token, flush_s, n, args.counters, wire)
    cpu: list[float] = []
    pg_cpu: list[float] = []
    backend = postgres_backend(client, token)
    prof = cProfile.Profile(time.process_time) if profile else None
    for path, body in work:
        cpu_ms, pg_ms = post_timed(client, token, path, body, backend, prof)
        cpu.append(cpu_ms)
        pg_cpu.append(pg_ms)
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
        profile_print(prof)
    return case


def profile_print(prof: cProfile.Profile) -> None:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("cumulative")
    stats.print_stats(45)
    if os.environ.get("BENCH_TOTTIME"):
        stats.sort_stats("tottime").print_stats(40)
    if os.environ.get("BENCH_CALLEES"):
        stats.print_callees(os.environ["BENCH_CALLEES"])
    print(out.getvalue())


def node_case(args: argparse.Namespace, client: Any, token: str, flush_s: float, report: bool = True) -> dict[str, Any]:
    """A node's ranks as 8 POST .../batch against the same 8 batches as one POST .../batches."""
    nodes = max(1, args.requests // RANKS)
    # The same bodies both ways (a body does not name its run), each side into runs of its own:
    # every row is new on both.
    one_by_one, together = register(client, token, args.runs), register(client, token, args.runs)
    work = bodies(one_by_one, token, flush_s, nodes * RANKS, args.counters, args.counters_wire[0])
    backend = postgres_backend(client, token)
    cpu: dict[str, list[float]] = {"batch": [], "batches": []}
    pg_cpu: dict[str, list[float]] = {"batch": [], "batches": []}
    prof = cProfile.Profile(time.process_time) if args.profile else None  # the node batches' side
    for node in range(nodes):  # interleaved: a drift in the machine's load reaches both sides alike
        group = work[node * RANKS : (node + 1) * RANKS]  # one run's 8 ranks: bodies() goes rank by rank, run by run
        timed = [post_timed(client, token, path, body, backend) for path, body in group]
        cpu["batch"].append(sum(c for c, _ in timed))
        pg_cpu["batch"].append(sum(p for _, p in timed))
        run = node % len(one_by_one)
        path = group[0][0].replace(one_by_one[run], together[run]) + "es"
        c, p = post_timed(client, token, path, node_body([body for _, body in group]), backend, prof)
        cpu["batches"].append(c)
        pg_cpu["batches"].append(p)
    case: dict[str, Any] = {"flush_s": flush_s, "ranks_per_node": RANKS, "node_intervals": nodes}
    for side in ("batch", "batches"):
        per_rank = [c / RANKS for c in cpu[side]]
        case[side] = {
            "requests_per_node": RANKS if side == "batch" else 1,
            "cpu_ms_per_rank": {
                "first": round(per_rank[0], 3),
                "p50": round(pct(per_rank, 50), 3),
                "p99": round(pct(per_rank, 99), 3),
                "mean": round(sum(per_rank) / nodes, 3),
            },
            "postgres_cpu_ms_per_rank_mean": round(sum(pg_cpu[side]) / nodes / RANKS, 3),
        }
    if not report:
        return case
    if prof:
        profile_print(prof)
    print(
        f"flush {flush_s:>4} s, {nodes} node intervals of {RANKS} ranks: CPU per rank "
        f"{RANKS} x /batch p50 {case['batch']['cpu_ms_per_rank']['p50']} ms p99 {case['batch']['cpu_ms_per_rank']['p99']} ms "
        f"first {case['batch']['cpu_ms_per_rank']['first']} ms, "
        f"1 x /batches p50 {case['batches']['cpu_ms_per_rank']['p50']} ms p99 {case['batches']['cpu_ms_per_rank']['p99']} ms "
        f"first {case['batches']['cpu_ms_per_rank']['first']} ms; "
        f"PostgreSQL's backend per rank {case['batch']['postgres_cpu_ms_per_rank_mean']} vs "
        f"{case['batches']['postgres_cpu_ms_per_rank_mean']} ms (mean)",
        flush=True,
    )
    return case


def register(client: Any, token: str, runs: int) -> list[str]:
    """`runs` new runs of RANKS GPUs each; their ids."""
    run_ids = [str(uuid.uuid4()) for _ in range(runs)]
    for run_id in run_ids:
        meta = {"id": run_id, "name": f"req-{run_id[:8]}", "gpu_model": "H100-SXM", "gpu_count": RANKS,
                "world_size": RANKS, "dtype": "bf16", "pricing_tier": "on_demand"}  # fmt: skip
        r = client.post("/api/v1/runs", json.dumps(meta), content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
        if r.status_code not in (200, 201):
            raise RuntimeError(f"registration: {r.status_code} {r.content[:300]!r}")
    return run_ids


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
        "--node-batches", action="store_true",
        help=f"compare {RANKS} POST .../batch with one POST .../batches of the same {RANKS} ranks' batches instead",
    )  # fmt: skip
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_request")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--out", default=None, help="default: bench/results/request_cost.json (request_cost_node.json)")
    args = parser.parse_args()
    out = args.out or str(ROOT / "bench" / "results" / ("request_cost_node.json" if args.node_batches else "request_cost.json"))

    env = server_setup(args.database_url, args.redis_url)
    token = manage(env, "createtoken", "--team", "bench", "--project", "requests")
    os.environ.update(env)
    import django

    django.setup()
    from django.test import Client

    client = Client(SERVER_NAME="127.0.0.1")
    cases = []
    if args.node_batches:
        # Warm both paths first (imports, the first COPY's plan), so neither side pays the cold request.
        node_case(argparse.Namespace(**{**vars(args), "requests": RANKS, "runs": 1}), client, token, args.flush[0], report=False)
        for flush_s in args.flush:
            cases.append(node_case(args, client, token, flush_s))
        what = f"CPU per rank: a node's {RANKS} ranks as {RANKS} POST /api/v1/runs/{{id}}/batch vs one POST .../batches"
    else:
        for flush_s in args.flush:
            for wire in args.counters_wire:
                cases.append(one_case(args, client, token, register(client, token, args.runs), flush_s, wire))
        what = "CPU per POST /api/v1/runs/{id}/batch through Django's request path (no gunicorn), PostgreSQL + Redis"
    result = {
        "bench": "request_cost",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "what": what,
        "cases": cases,
    }
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

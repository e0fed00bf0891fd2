"""Ingest throughput: the real HTTP stack (gunicorn + Django + PostgreSQL) against raw COPY.

In one run, on one database:
1. API: concurrent clients POST 5,000-row step batches to /api/v1/runs/{id}/steps on gunicorn;
2. raw COPY: one Python client COPYs the same rows (binary, pre-built) straight into the table.
Prints both rates and their ratio; writes bench/results/ingest.json.

    .venv/bin/python bench/ingest.py [--rows 1000000] [--clients 4] [--workers 4] [--gzip]
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
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import database_recreate, gunicorn, manage  # noqa: E402

T0_NS = 1_790_000_000 * 10**9


def batch_columns(first: int, n: int, rng: np.random.Generator) -> dict[str, list[Any]]:
    dur = rng.integers(90_000_000, 130_000_000, n)
    return {
        "step": list(range(first, first + n)),
        "t_start_ns": (T0_NS + np.cumsum(dur) + first * 110_000_000).tolist(),
        "dur_ns": dur.tolist(),
        "data_ns": rng.integers(1_000_000, 30_000_000, n).tolist(),
        "forward_ns": rng.integers(25_000_000, 35_000_000, n).tolist(),
        "backward_ns": rng.integers(50_000_000, 70_000_000, n).tolist(),
        "optimizer_ns": rng.integers(4_000_000, 6_000_000, n).tolist(),
        "comm_ns": rng.integers(0, 8_000_000, n).tolist(),
        "flops": (rng.uniform(1.4, 1.6, n) * 1e15).tolist(),
        "tokens": [4096] * n,
        "samples": [8] * n,
        "mem_allocated": rng.integers(30 * 2**30, 32 * 2**30, n).tolist(),
        "mem_reserved": [36 * 2**30] * n,
        "mem_peak": rng.integers(33 * 2**30, 35 * 2**30, n).tolist(),
        "alloc_retries": [0] * n,
    }


def post_json(conn: http.client.HTTPConnection, path: str, body: bytes, token: str, gz: bool) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{path}: {response.status} {payload[:300]!r}")
    return dict(json.loads(payload))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--gzip", action="store_true", help="send gzip bodies, as the agent does")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest.json"))
    args = parser.parse_args()

    dbname = args.database_url.rsplit("/", 1)[1]
    database_recreate(args.database_url)
    env = {
        **os.environ,
        "PHANTOMHUB_DATABASE_URL": args.database_url,
        "PHANTOMHUB_SECRET_KEY": "b" * 48,
        "PHANTOMHUB_DEBUG": "0",
        "PHANTOMHUB_LOG_LEVEL": "WARNING",
        "PHANTOMHUB_SECURE_COOKIES": "0",
    }
    print(f"[setup] migrating {dbname} …", flush=True)
    manage(env, "migrate", "--no-input")
    token = manage(env, "createtoken", "--team", "bench", "--project", "ingest")

    n_batches = args.rows // args.batch
    rng = np.random.default_rng(7)
    print(f"[setup] building {n_batches} batches of {args.batch} rows …", flush=True)
    batches = [batch_columns(i * args.batch, args.batch, rng) for i in range(n_batches)]
    api_runs = [str(uuid.uuid4()) for _ in range(args.clients)]
    bodies: list[tuple[str, bytes]] = []
    for i, columns in enumerate(batches):
        raw = json.dumps({"rank": 0, "steps": columns}).encode()
        bodies.append((api_runs[i % args.clients], gzip.compress(raw, 1) if args.gzip else raw))
    body_mb = sum(len(b) for _, b in bodies) / n_batches / 1e6

    with gunicorn(env, args.workers) as port:
        setup = http.client.HTTPConnection("127.0.0.1", port)
        for run_id in api_runs:
            post_json(setup, "/api/v1/runs", json.dumps({"id": run_id, "name": "bench"}).encode(), token, False)
        # Warm every worker (imports, DB connection, temp tables) before timing.
        warm = str(uuid.uuid4())
        post_json(setup, "/api/v1/runs", json.dumps({"id": warm, "name": "warm"}).encode(), token, False)
        for i in range(args.workers * 2):
            body = json.dumps({"rank": 0, "steps": batch_columns(i * 100, 100, rng)}).encode()
            post_json(setup, f"/api/v1/runs/{warm}/steps", body, token, False)

        accepted = [0]
        lock = threading.Lock()
        queue = list(reversed(bodies))

        def client() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            while True:
                with lock:
                    if not queue:
                        return
                    run_id, body = queue.pop()
                result = post_json(conn, f"/api/v1/runs/{run_id}/steps", body, token, args.gzip)
                with lock:
                    accepted[0] += result["accepted"]

        print(f"[api] {args.clients} clients → gunicorn ({args.workers} workers), {n_batches} batches …", flush=True)
        started = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        api_s = time.perf_counter() - started
        assert accepted[0] == n_batches * args.batch, accepted

    # The same rows by raw COPY into the same table (a fresh run id so nothing conflicts).
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")
    import django

    django.setup()
    from phantomhub.telemetry.columns import STEP_COLUMNS, columns_validate
    from phantomhub.telemetry.storage import STEP_TABLE, pg_copy_payload

    copy_run = uuid.uuid4()
    with psycopg.connect(args.database_url) as conn:
        project_id = conn.execute("SELECT id FROM accounts_project WHERE slug = 'ingest'").fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO telemetry_run (id, project_id, name, tags, status, gpu_model, gpu_count, world_size, nodes, provider,"
            " region, pricing_tier, dtype, allocation_start, started_at, last_seen_at, config, environment, ingest_seq,"
            " created_at, updated_at) VALUES (%s, %s, 'copy', '[]', 'running', '', 1, 1, 1, '', '', 'on_demand', '',"
            " now(), now(), now(), '{}', '{}', 0, now(), now())",
            (copy_run, project_id),
        )
        conn.commit()
        names = [c for c in STEP_TABLE.pg_types]
        payloads = [
            pg_copy_payload(
                STEP_TABLE, names, copy_run, 0, columns_validate(b, STEP_COLUMNS, where="steps", keys=("step",), max_rows=10**6)
            )
            for b in batches
        ]
        cols = ", ".join(["run_id", "rank", *names])
        print(f"[copy] one client, {n_batches} binary COPYs …", flush=True)
        started = time.perf_counter()
        with conn.cursor() as cur:
            for payload in payloads:
                with cur.copy(f"COPY telemetry_step ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.write(payload)
                conn.commit()
        copy_s = time.perf_counter() - started

    rows = n_batches * args.batch
    api_rate, copy_rate = rows / api_s, rows / copy_s
    result = {
        "benchmark": "ingest",
        "rows": rows,
        "batch_rows": args.batch,
        "clients": args.clients,
        "gunicorn_workers": args.workers,
        "gzip": args.gzip,
        "body_mb_per_batch": round(body_mb, 3),
        "api_seconds": round(api_s, 3),
        "api_rows_per_s": round(api_rate),
        "copy_seconds": round(copy_s, 3),
        "copy_rows_per_s": round(copy_rate),
        "api_over_copy": round(api_rate / copy_rate, 3),
        "targets": {"api_rows_per_s": 50_000, "api_over_copy": 0.5},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"API (HTTP, {args.clients} clients, {args.workers} gunicorn workers): {api_rate:,.0f} rows/s")
    print(f"raw COPY (one client):                      {copy_rate:,.0f} rows/s")
    print(f"API / raw COPY: {api_rate / copy_rate:.2f}   (targets: ≥ 50,000 rows/s and ≥ 0.50)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

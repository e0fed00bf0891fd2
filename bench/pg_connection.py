"""What a new PostgreSQL connection costs against an open one, in CPU on both sides.

Why it matters: Celery's Django fixup closes a worker's connections around every task unless
told otherwise, so each analysis would pay for a new backend (phantomhub/celery.py keeps them).
Each round opens a connection, runs a few of a pass's first reads (a run, its ranks, an
analysis row: the catalog lookups a new backend must make) and closes it, against the same reads
on one open connection, alternating; CPU is this process's (the client) and PostgreSQL's (every
process of it on this machine, what the postmaster reaped of exited backends included:
bench.common.postgres_cpu_s). Needs nothing else using PostgreSQL on the machine.

    .venv/bin/python bench/pg_connection.py [--rounds 3] [--n 200]

Writes bench/results/pg_connection.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import manage, postgres_cpu_s, server_setup  # noqa: E402

READS = (
    "SELECT id, status, allocation_start FROM telemetry_run LIMIT 5",
    "SELECT run_id, rank, counters FROM telemetry_runrank LIMIT 5",
    "SELECT * FROM waste_runanalysis LIMIT 1",
)


def reads(conn: psycopg.Connection) -> None:
    for sql in READS:
        conn.execute(sql).fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=200, help="connections (and open-connection repeats) per round")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_conn")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "pg_connection.json"))
    args = parser.parse_args()
    env = server_setup(args.database_url, args.redis_url)  # a migrated database: the real catalog
    manage(env, "createtoken", "--team", "bench", "--project", "conn")
    url = args.database_url.replace("postgres://", "postgresql://", 1)
    rounds = []
    for r in range(args.rounds):
        p0, c0 = postgres_cpu_s(), time.process_time()
        for _ in range(args.n):
            with psycopg.connect(url) as conn:
                reads(conn)
        p1, c1 = postgres_cpu_s(), time.process_time()
        with psycopg.connect(url) as conn:
            for _ in range(args.n):
                reads(conn)
        p2, c2 = postgres_cpu_s(), time.process_time()

        def ms(seconds: float) -> float:
            return round(seconds * 1000 / args.n, 2)

        row = {
            "new_connection_ms": {"postgres": ms(p1 - p0), "client": ms(c1 - c0)},
            "open_connection_ms": {"postgres": ms(p2 - p1), "client": ms(c2 - c1)},
        }
        rounds.append(row)
        print(
            f"round {r + 1}: new connection + {len(READS)} reads: PostgreSQL {row['new_connection_ms']['postgres']} ms, "
            f"client {row['new_connection_ms']['client']} ms; on an open one: PostgreSQL "
            f"{row['open_connection_ms']['postgres']} ms, client {row['open_connection_ms']['client']} ms",
            flush=True,
        )
    result = {
        "bench": "pg_connection",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "n_per_round": args.n,
        "reads": list(READS),
        "rounds": rounds,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""PostgreSQL's CPU for one rank's step batch, with and without the per-row foreign key.

Migration 0008 dropped the raw tables' foreign key to telemetry_run (ingest checks the run once
per batch instead). This measures what the key cost: binary COPY payloads built as ingest builds
them (storage.pg_copy_payload) of 400 and 40 step rows (a 60 s batch at ~7 and ~0.7 steps/s),
each COPY committed on its own, alternating rounds with the key put back (as migration 0007 made
it: deferred, checked at commit) and without it, on one connection; CPU is that connection's
PostgreSQL backend's (/proc: PostgreSQL must run on this machine; ticks of 10 ms, so a round is
many batches).

    .venv/bin/python bench/pg_copy.py [--rounds 3] [--batches 150]

Writes bench/results/pg_copy.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import backend_cpu_s, manage, server_setup  # noqa: E402

FK = (
    "ALTER TABLE telemetry_step ADD CONSTRAINT telemetry_step_run_id_fk FOREIGN KEY (run_id) "
    "REFERENCES telemetry_run (id) DEFERRABLE INITIALLY DEFERRED"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=150, help="COPYs per size, key and round")
    parser.add_argument("--rows", type=int, nargs="+", default=[400, 40])
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_copy")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "pg_copy.json"))
    args = parser.parse_args()
    env = server_setup(args.database_url, args.redis_url)
    manage(env, "createtoken", "--team", "bench", "--project", "copy")
    os.environ.update(env)
    import django

    django.setup()
    import numpy as np
    from django.db import connection

    from phantomhub.accounts.models import Project
    from phantomhub.telemetry.columns import Batch
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.partitions import run_week
    from phantomhub.telemetry.storage import STEP_TABLE, pg_copy_payload

    now = django.utils.timezone.now()
    run = Run.objects.create(id=uuid.uuid4(), project=Project.objects.get(), name="copy", gpu_model="H100-SXM",
                             gpu_count=8, world_size=8, allocation_start=now, started_at=now, last_seen_at=now)  # fmt: skip
    week = run_week(run.pk)
    names = list(STEP_TABLE.pg_types)
    connection.ensure_connection()
    raw = connection.connection
    raw.autocommit = False
    cur = raw.cursor()
    cur.execute("SELECT pg_backend_pid()")
    pid = int(cur.fetchone()[0])
    raw.commit()
    next_rank = [0]

    def batch(n: int) -> Batch:
        values: dict[str, Any] = {name: np.arange(n, dtype=np.int64) for name in names}
        values["t_start_ns"] = 10**18 + values["step"] * 10**8
        values["flops"] = values["flops"].astype(np.float64)
        return Batch(n=n, values=values, nulls={})

    def copies(n: int) -> float:
        payloads = []
        for _ in range(args.batches):  # a rank of its own per batch: every row new
            next_rank[0] += 1
            payloads.append(pg_copy_payload(STEP_TABLE, names, run.pk, next_rank[0], batch(n), week))
        c0 = backend_cpu_s(pid)
        for payload in payloads:
            with cur.copy(f"COPY telemetry_step (run_id, rank, run_week, {', '.join(names)}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(payload)
            raw.commit()
        return (backend_cpu_s(pid) - c0) * 1000 / args.batches

    rounds = []
    for r in range(args.rounds):
        row: dict[str, Any] = {}
        for keyed in (r % 2 == 0, r % 2 != 0):  # which goes first alternates
            if keyed:
                cur.execute(FK)
            else:
                cur.execute("ALTER TABLE telemetry_step DROP CONSTRAINT IF EXISTS telemetry_step_run_id_fk")
            raw.commit()
            for n in args.rows:
                row[f"{'with' if keyed else 'without'}_fk_{n}_rows_ms"] = round(copies(n), 2)
        cur.execute("ALTER TABLE telemetry_step DROP CONSTRAINT IF EXISTS telemetry_step_run_id_fk")
        raw.commit()
        rounds.append(row)
        print(
            f"round {r + 1}: PostgreSQL backend CPU per committed COPY: " + ", ".join(f"{k} {v}" for k, v in row.items()),
            flush=True,
        )
    result = {
        "bench": "pg_copy",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "batches_per_case": args.batches,
        "rounds": rounds,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

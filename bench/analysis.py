"""Analysis speed on PostgreSQL: a run of 1,000,000 step rows over 8 ranks.

In one run, on one database, measured side by side:
- plain read: the same rows read into memory as numpy columns (the fastest read path we have:
  binary COPY out, viewed by numpy), per rank;
- full analysis: `run_analyze` from scratch (read + model + recommendations + store);
- incremental analysis after one more 10,000-row batch (1,250 rows on each of the 8 ranks).
Targets: full ≤ 3× the plain read; incremental ≤ 200 ms. Writes bench/results/analysis.json.

    .venv/bin/python bench/analysis.py [--rows 1000000] [--ranks 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import database_recreate  # noqa: E402

NS = 10**9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_analysis"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "analysis.json"))
    args = parser.parse_args()
    env = {
        "PHANTOMHUB_DATABASE_URL": args.database_url,
        "PHANTOMHUB_SECRET_KEY": "a" * 48,
        "PHANTOMHUB_DEBUG": "0",
        "PHANTOMHUB_LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
    }
    os.environ.update(env)
    database_recreate(args.database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env={**os.environ}, check=True)
    import django

    django.setup()
    from django.db import connection

    from phantomhub.accounts.services import project_get_or_create, team_get_or_create
    from phantomhub.pricing.services import price_set
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.selectors import steps_arrays
    from phantomhub.telemetry.services import steps_ingest
    from phantomhub.waste.models import RunAnalysis
    from phantomhub.waste.services import run_analyze

    per_rank = args.rows // args.ranks
    start = datetime(2026, 10, 1, tzinfo=UTC)
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("3.00"), effective_from=start - timedelta(days=1))
    project = project_get_or_create(team=team_get_or_create(slug="bench"), slug="analysis")
    run = Run.objects.create(
        id=uuid.uuid4(),
        project=project,
        name="bench-1m",
        gpu_model="H100-SXM",
        gpu_count=args.ranks,
        world_size=args.ranks,
        dtype="bf16",
        allocation_start=start - timedelta(minutes=5),
        started_at=start,
        last_seen_at=start,
    )
    rng = np.random.default_rng(1)
    t0 = int(start.timestamp()) * NS
    step_ns = 500_000_000

    def batch(rank: int, first: int, n: int) -> dict[str, list[float]]:
        # Compute per rank and step (rank 3 is 15% slow); every rank then waits in the all-reduce
        # until the slowest arrives, so fast ranks' exposed comm is the straggler's doing.
        all_compute = np.random.default_rng(first).normal(300e6, 5e6, (args.ranks, n))
        all_compute[3 % args.ranks] *= 1.15
        compute = all_compute[rank].astype(np.int64)
        comm = (all_compute.max(axis=0) - all_compute[rank] + 5e6).astype(np.int64)
        return {
            "step": list(range(first, first + n)),
            "t_start_ns": (t0 + np.arange(first, first + n) * step_ns).tolist(),
            "dur_ns": [step_ns] * n,
            "data_ns": rng.integers(10_000_000, 40_000_000, n).tolist(),
            "forward_ns": (compute // 3).tolist(),
            "backward_ns": (compute * 2 // 3).tolist(),
            "optimizer_ns": [20_000_000] * n,
            "comm_ns": comm.tolist(),
            "flops": (0.4 * 989.4e12 * 0.3 * rng.normal(1, 0.01, n)).tolist(),
            "tokens": [8192] * n,
            "samples": [16] * n,
            "mem_allocated": rng.integers(50 * 2**30, 60 * 2**30, n).tolist(),
            "mem_reserved": [70 * 2**30] * n,
            "mem_peak": [66 * 2**30] * n,
            "alloc_retries": [0] * n,
        }

    print(f"[setup] {args.rows:,} rows over {args.ranks} ranks …", flush=True)
    for rank in range(args.ranks):
        for first in range(0, per_rank, 10_000):
            steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, first, min(10_000, per_rank - first)))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE telemetry_stepchunk")

    def plain_read() -> int:
        return sum(len(steps_arrays(run_id=run.pk, rank=rank)["step"]) for rank in range(args.ranks))

    def full() -> None:
        RunAnalysis.objects.filter(run=run).delete()
        run_analyze(run_id=run.pk)

    reads, fulls = [], []
    for _ in range(args.repeat):  # alternate, so both see the same machine
        t = time.perf_counter()
        assert plain_read() == per_rank * args.ranks
        reads.append(time.perf_counter() - t)
        t = time.perf_counter()
        full()
        fulls.append(time.perf_counter() - t)
    incrementals = []
    next_first = per_rank
    for _ in range(args.repeat):
        for rank in range(args.ranks):
            steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, next_first, 10_000 // args.ranks))
        next_first += 10_000 // args.ranks
        t = time.perf_counter()
        row = run_analyze(run_id=run.pk)
        incrementals.append(time.perf_counter() - t)
        assert row is not None and row.result["steps"] == next_first * args.ranks
    # The incremental result equals a from-scratch one.
    incremental_row = RunAnalysis.objects.get(run=run)
    full()
    scratch = RunAnalysis.objects.get(run=run)
    same = incremental_row.cost_usd == scratch.cost_usd and [c["usd_cents"] for c in incremental_row.result["categories"]] == [
        c["usd_cents"] for c in scratch.result["categories"]
    ]
    read_s, full_s, inc_s = statistics.median(reads), statistics.median(fulls), statistics.median(incrementals)
    result = {
        "benchmark": "analysis",
        "rows": per_rank * args.ranks,
        "ranks": args.ranks,
        "plain_read_s": round(read_s, 3),
        "full_analysis_s": round(full_s, 3),
        "full_over_read": round(full_s / read_s, 2),
        "incremental_after_10k_rows_ms": round(inc_s * 1000, 1),
        "incremental_equals_full": same,
        "stragglers": [s["rank"] for s in scratch.result["stragglers"]],
        "targets": {"full_over_read": 3.0, "incremental_after_10k_rows_ms": 200},
        "samples": {"plain_read_s": reads, "full_analysis_s": fulls, "incremental_s": incrementals},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"plain read of {result['rows']:,} rows:   {read_s:.2f} s")
    print(f"full analysis:                {full_s:.2f} s  ({full_s / read_s:.2f}× the read; target ≤ 3×)")
    print(f"incremental after 10k rows:   {inc_s * 1000:.0f} ms  (target ≤ 200 ms); equals a full analysis: {same}")
    print(f"stragglers found: {result['stragglers']} (rank 3 is 15% slow by construction)")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

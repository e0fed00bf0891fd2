"""A sweep with nothing dirty, many times, on a database another bench left behind.

    .venv/bin/python bench/big_job.py            # leaves its 1,024-rank run in phantomhub_bench_bigjob
    .venv/bin/python bench/sweep.py [--repeat 200] [--database-url postgres://...]

Times `--repeat` sweeps (`analysis_sweep(inline=True)`, what beat runs) in a fresh process, as
a worker runs them, after one untimed sweep, and prints p50 / p99 / max and the statements one
sweep runs. `bench/big_job.py` runs it for each of its cases once the writes have settled. Writes
bench/results/sweep.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import in_process_env  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_bigjob"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "sweep.json"))
    args = parser.parse_args()
    in_process_env(args.database_url)
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from phantomhub.telemetry.models import Run, RunRank
    from phantomhub.waste.sweeps import analysis_sweep

    analysis_sweep(inline=True)
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        result = analysis_sweep(inline=True)
        times.append((time.perf_counter() - started) * 1000)
        assert result.analysed == 0, "a sweep found a dirty run: run it on a quiet database"
    times.sort()
    with CaptureQueriesContext(connection) as captured:
        analysis_sweep(inline=True)
    out = {
        "bench": "sweep",
        "database": args.database_url.rsplit("/", 1)[1],
        "runs": Run.objects.count(),
        "ranks": RunRank.objects.count(),
        "repeat": args.repeat,
        "ms": {
            "p50": round(times[len(times) // 2], 2),
            "p99": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2),
            "max": round(times[-1], 2),
        },
        "statements": len(captured.captured_queries),
        "load_avg": os.getloadavg(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"{out['repeat']} sweeps, {out['runs']} runs / {out['ranks']} ranks: p50 {out['ms']['p50']} ms, "
          f"p99 {out['ms']['p99']} ms, max {out['ms']['max']} ms; {out['statements']} statements a sweep")  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

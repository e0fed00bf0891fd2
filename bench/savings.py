"""Predicted vs realized savings: does the saving PhantomHub predicts for a fix come true?

Cases of real CPU PyTorch training through the agent (bench/savings_cases.py): a starved input
pipeline, a host sync every step, a slow start-up, and a slow rank in DistributedDataParallel over
gloo with 2 and 4 ranks. Per case, against PhantomHub under gunicorn on a fresh PostgreSQL
database: healthy peer runs, run A with the waste (analysed), then run B with the fix. predicted =
the matching recommendation's ``saving_usd`` in A's analysis; realized = cost(A) - cost(B), the
whole job (all ranks). They should agree within the case's band (±20%, ±15% for a straggler). Prints the table (and, with
--details, A's and B's category figures, evidence and claims) and writes bench/results/savings.json.

    .venv/bin/python bench/savings.py [--cases data sync startup straggler-2 straggler-4] [--launch forkserver|exec] [--details]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import savings_cases as sc  # noqa: E402
from bench.common import brokerless_django, gunicorn  # noqa: E402

USD_PER_GPU_HOUR = Decimal("36000")  # $10 a second: a second of waste is 1,000 cents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=sorted(sc.CASES), default=list(sc.CASES))
    parser.add_argument("--launch", choices=sc.LAUNCHES, default="forkserver")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--details", action="store_true", help="print A's and B's figures, evidence and claims")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_savings"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "savings.json"))
    args = parser.parse_args()
    env = brokerless_django(args.database_url)
    from phantomhub.pricing.services import price_set

    # In force from an hour ago: it closes the example L4 price the migrations seed for the runs' span.
    price_set(gpu=sc.GPU_MODEL, usd_per_gpu_hour=USD_PER_GPU_HOUR, effective_from=datetime.now(UTC) - timedelta(hours=1))
    results = []
    started = time.perf_counter()
    with gunicorn(env, args.workers) as port, tempfile.TemporaryDirectory(prefix="phantomhub-savings-") as tmp:
        for case in args.cases:
            print(f"[{case}] {sc.CASES[case].peers} peers, A ({sc.CASES[case].waste}), B ({sc.CASES[case].fix}) …", flush=True)
            r = sc.case_prove(case, server=f"http://127.0.0.1:{port}", team="bench", workdir=Path(tmp) / case, launch=args.launch)
            results.append(r)
            if args.details:
                print(sc.details(r), flush=True)
    elapsed = time.perf_counter() - started

    def within(r: sc.CaseResult) -> bool:
        return r.ratio is not None and abs(r.ratio - 1) <= sc.CASES[r.case].band

    print()
    print(sc.table(results))
    for r in results:
        print(f"{r.case}: {'within' if within(r) else 'OUTSIDE'} ±{sc.CASES[r.case].band:.0%}")
    out = {
        "benchmark": "savings",
        "all_within_band": all(within(r) for r in results),
        "cases": [
            {
                **r.to_json(),
                "band": sc.CASES[r.case].band,
                "world_size": sc.CASES[r.case].world,
                "within_band": within(r),
                "category": sc.CASES[r.case].category,
                "category_recoverable_usd": sc.category_claims(r)[0],
                "category_claimed_by": sc.category_claims(r)[1],
            }
            for r in results
        ],
        "settings": {
            "launch": args.launch,
            "steps": sc.STEPS,
            "peers": sc.PEERS,
            "batch": sc.BATCH,
            "tokens_per_step": sc.BATCH * sc.SEQ,
            "device_s_per_step": sc.DEVICE_S,
            "load_s_per_sample": sc.LOAD_S_PER_SAMPLE,
            "sync_s": sc.SYNC_S,
            "slow_s": sc.SLOW_S,
            "slow_rank": sc.SLOW_RANK,
            "log_every": sc.LOG_EVERY,
            "stage_s": sc.STAGE_S,
            "gpu_model": sc.GPU_MODEL,
            "dtype": sc.DTYPE,
            "usd_per_gpu_hour": float(USD_PER_GPU_HOUR),
            "gunicorn_workers": args.workers,
        },
        "elapsed_s": round(elapsed, 1),
        "command": " ".join([".venv/bin/python", "bench/savings.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": metadata.version("torch")},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"wrote {args.out} ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()

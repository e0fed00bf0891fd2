"""Lost work against ground truth, and the checkpoint-interval advice followed (issue 31).

Real CPU PyTorch jobs through the agent (bench/lost_work_cases.py) against PhantomHub under
gunicorn on a fresh PostgreSQL database. Per repetition: job A saves every INTERVAL steps and fails
at fixed moments (SIGKILL, once SIGTERM), resuming from its last checkpoint each time; PhantomHub's
rework, restart and checkpoint dollars are compared with those computed from the attempts' own
timestamps (the bar: ±5%). Then job B saves at the interval PhantomHub advised for A, under the same
failures: the realized change of the lost dollars, lost(A) − lost(B), against the predicted saving,
(W(τ0) − W(τ*)) × A's work seconds × the price (the bar: ±20%). Prints both tables and writes
bench/results/lost_work.json.

    .venv/bin/python bench/lost_work.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import lost_work_cases as lw  # noqa: E402
from bench.common import brokerless_django, gunicorn  # noqa: E402

USD_PER_GPU_HOUR = Decimal("36000")  # $10 a GPU-second
CAUSES = ("rework", "restart", "checkpoint")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="pairs of jobs (A, then B with the advice)")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_lost_work"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "lost_work.json"))
    args = parser.parse_args()
    env = brokerless_django(args.database_url)
    from phantomhub.accounts.services import project_token_for_slugs
    from phantomhub.pricing.models import PriceEntry
    from phantomhub.pricing.services import price_set

    PriceEntry.objects.all().delete()
    price_set(gpu=lw.GPU_MODEL, usd_per_gpu_hour=USD_PER_GPU_HOUR, effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    usd = lw.usd_per_s()
    rows: list[dict[str, Any]] = []
    with gunicorn(env, workers=2) as port, tempfile.TemporaryDirectory() as tmp:
        url = f"http://127.0.0.1:{port}"
        token = project_token_for_slugs(team_slug="ml", project_slug="lost-work").raw
        for rep in range(args.repeat):
            kw = {"server": url, "token": token, "team": "ml", "project": "lost-work", "workdir": Path(tmp) / str(rep)}
            a = lw.run_job(key=f"r{rep}-every-{lw.INTERVAL}", interval=lw.INTERVAL, **kw)
            truth, ours = lw.truth(a), lw.measured(a)
            interval = ours.advice["interval"]
            if interval is None:
                raise SystemExit(f"no interval advice for job A: {ours.advice}")
            steps = lw.steps_for(interval["optimum_s"], a)
            b = lw.run_job(key=f"r{rep}-every-{steps}", interval=steps, **kw)
            after = lw.measured(b)
            predicted = (interval["wall_per_work_now"] - interval["wall_per_work_best"]) * truth.work_s * usd
            realized = sum(ours.lost_usd.values()) - sum(after.lost_usd.values())
            row = {
                "repeat": rep,
                "attempts": ours.attempts,
                "truth_usd": {c: round(getattr(truth, f"{c}_s") * usd, 2) for c in CAUSES},
                "phantomhub_usd": ours.lost_usd,
                "ratio": {c: _ratio(ours.lost_usd[c], getattr(truth, f"{c}_s") * usd) for c in CAUSES},
                "billed_s": {"phantomhub": ours.billed_s, "truth": truth.billed_s},
                "mtbf_s": interval["mtbf_s"],
                "checkpoint_s": interval["checkpoint_s"],
                "restart_s": interval["restart_s"],
                "interval_steps": [lw.INTERVAL, steps],
                "interval_s": [interval["interval_s"], interval["optimum_s"]],
                "young_daly_s": interval["young_daly_s"],
                "lost_usd": [sum(ours.lost_usd.values()), sum(after.lost_usd.values())],
                "predicted_usd": predicted,
                "realized_usd": realized,
                "predicted_over_realized": predicted / realized if realized else None,
            }
            rows.append(row)
            print(_row_text(row), flush=True)
    summary = {
        "worst_cause_error": max(abs(r["ratio"][c] - 1) for r in rows for c in CAUSES if r["ratio"][c] is not None),
        "predicted_over_realized": [r["predicted_over_realized"] for r in rows],
        "median_predicted_over_realized": statistics.median(r["predicted_over_realized"] for r in rows),
    }
    print(json.dumps(summary, indent=1))
    out = {"when": datetime.now(UTC).isoformat(), "machine": platform.platform(), "cpus": os.cpu_count(),
           "settings": {"steps": lw.STEPS, "interval": lw.INTERVAL, "step_s": lw.STEP_S, "stage_s": lw.STAGE_S,
                        "restart_wait_s": lw.RESTART_WAIT_S, "mtbf_s": lw.MTBF_S, "failures": lw.failure_times()},
           "rows": rows, "summary": summary}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


def _ratio(ours: float, truth: float) -> float | None:
    return ours / truth if truth else (1.0 if abs(ours) < 0.01 else None)


def _row_text(r: dict[str, Any]) -> str:
    lines = [f"repeat {r['repeat']}: {r['attempts']} attempts"]
    lines.append(f"  {'':<12}{'PhantomHub':>12}{'truth':>12}{'ratio':>8}")
    for c in CAUSES:
        ratio = "-" if r["ratio"][c] is None else f"{r['ratio'][c]:.3f}"
        lines.append(f"  {c:<12}{r['phantomhub_usd'][c]:>12.2f}{r['truth_usd'][c]:>12.2f}{ratio:>8}")
    lines.append(
        f"  interval {r['interval_steps'][0]} -> {r['interval_steps'][1]} steps ({r['interval_s'][0]:.2f} -> "
        f"{r['interval_s'][1]:.2f} s of work; Young/Daly {r['young_daly_s']:.2f} s; MTBF {r['mtbf_s']:.1f} s, "
        f"C {r['checkpoint_s']:.3f} s, R {r['restart_s']:.2f} s): lost ${r['lost_usd'][0]:,.2f} -> ${r['lost_usd'][1]:,.2f}; "
        f"predicted ${r['predicted_usd']:,.2f}, realized ${r['realized_usd']:,.2f} "
        f"(predicted/realized {r['predicted_over_realized']:.3f})"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

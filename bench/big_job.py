"""A big job on PostgreSQL: one run of 1,024 ranks x 2,000 steps (2,048,000 step rows).

Measured in one run, on one database:
- full analysis (`run_analyze` from scratch), the first (cold) and the repeats;
- incremental analysis after one more step from every rank (1,024 rows), repeated: first, p50, p99;
- re-analysis when the run changed but no step did (a system sample arrived): p50, p99;
- a sweep with nothing dirty: p50, p99 and max of 200, once the writes have settled (VACUUM
  ANALYZE, CHECKPOINT), while the database holds one live run of 8, of 128 and of 1,024 ranks
  (the sweep must not depend on the rank count), in a fresh process as a worker runs it
  (bench/sweep.py) and in this one (with the cyclic collector's time inside the slowest);
- the stored state's size after a full analysis and after the incremental ones (a full analysis
  must leave a state as small as the live path's), part by part;
- a small run's ordinary pass: 8 ranks, 30 s of new steps (1 step/s) per rank, repeated;
- every analysis timing as wall time and as this process's CPU time (on a shared machine the
  wall time includes waiting for a core; the CPU time is what a worker spends);
- side by side in one process, the pure model: the ranks' batches attributed one rank at a time
  (the old path) against one vectorised pass (`RunAccumulator.add_steps_many`), alternating.
Targets (issue: big jobs): incremental p99 <= 200 ms; a sweep with no new data <= 10 ms; a small
run's pass <= 10 ms of worker CPU.
Writes bench/results/big_job.json.

    .venv/bin/python bench/big_job.py [--ranks 1024] [--steps 2000] [--repeat 20] [--model-only]
    .venv/bin/python bench/big_job.py --pass-cost [--repeat 20] [--profile /tmp/pass.prof] [--breakdown] [--reconnect]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import database_recreate, in_process_env  # noqa: E402

NS = 10**9


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


GC_MS: list[float] = []  # the cyclic garbage collector's time inside each timed call, ms
_gc_started: list[float] = []


def _gc_watch(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_started.append(time.perf_counter())
    elif _gc_started:
        GC_MS.append((time.perf_counter() - _gc_started.pop()) * 1000)


gc.callbacks.append(_gc_watch)


def timed(fn: Any) -> tuple[Any, float, float]:
    """fn's result, its wall time and this process's CPU time, in ms (the collector's time inside
    is appended to TIMED_GC_MS)."""
    GC_MS.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    TIMED_GC_MS.append(sum(GC_MS))
    return out, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


TIMED_GC_MS: list[float] = []


def summary(wall: list[float], cpu: list[float]) -> dict[str, float]:
    return {"first": wall[0], "p50": pct(wall, 50), "p99": pct(wall, 99), "cpu_first": cpu[0],
            "cpu_p50": pct(cpu, 50), "cpu_p99": pct(cpu, 99), "n": len(wall)}  # fmt: skip


def line(name: str, s: dict[str, float], target: str = "") -> str:
    queries = f"; {s['queries']:.0f} SQL statements" if "queries" in s else ""
    return (f"{name}: first {s['first']:.0f} ms, p50 {s['p50']:.0f} ms, p99 {s['p99']:.0f} ms wall; CPU first "
            f"{s['cpu_first']:.0f}, p50 {s['cpu_p50']:.0f}, p99 {s['cpu_p99']:.0f} ms{queries}{target}")  # fmt: skip


def model_side_by_side(ranks: int, steps: int, pairs: int = 3) -> dict[str, float]:
    """The pure model on the same rows: one rank at a time vs one pass, alternating."""
    from phantomhub.waste.core.model import PriceSegment, RunAccumulator, RunConfig, StepColumns

    config = RunConfig(gpu_count=ranks, world_size=ranks, allocation_start_ns=0,
                       price_segments=(PriceSegment(0, 10**7 * NS, 3),), peak_flops_per_gpu=1e12)  # fmt: skip

    def batch(rank: int, first: int, n: int) -> StepColumns:
        rng = np.random.default_rng(rank)
        return StepColumns(
            rank=rank, host=f"node-{rank // 8}", step=np.arange(first, first + n), t_start_ns=np.arange(first, first + n) * NS,
            dur_ns=np.full(n, NS), data_ns=rng.integers(10**7, 4 * 10**7, n), forward_ns=np.full(n, 3 * 10**8),
            backward_ns=np.full(n, 3 * 10**8), comm_ns=rng.integers(0, 10**8, n), flops=np.full(n, 1e11),
        )  # fmt: skip

    full = [batch(r, 0, steps) for r in range(ranks)]
    one = [batch(r, steps, 1) for r in range(ranks)]
    timings: dict[str, list[float]] = {k: [] for k in ("full_per_rank", "full_one_pass", "step_per_rank", "step_one_pass")}
    for _ in range(pairs):
        for mode in ("per_rank", "one_pass"):
            acc = RunAccumulator(config)
            t = time.perf_counter()
            if mode == "one_pass":
                acc.add_steps_many(full, align=False)
            else:
                for b in full:
                    acc.add_steps_many([b], align=False)
            acc.align_known()
            timings[f"full_{mode}"].append(time.perf_counter() - t)
            t = time.perf_counter()
            if mode == "one_pass":
                acc.add_steps_many(one)
            else:
                for b in one:
                    acc.add_steps_many([b])
            timings[f"step_{mode}"].append(time.perf_counter() - t)
    out = {k: float(np.median(v)) for k, v in timings.items()}
    print(
        f"model, {ranks} ranks: full {out['full_per_rank']:.2f} s per rank vs {out['full_one_pass']:.2f} s one pass; "
        f"one more step per rank {out['step_per_rank'] * 1000:.0f} ms vs {out['step_one_pass'] * 1000:.0f} ms"
    )
    return out


def cent_figures(x: Any, y: Any) -> list[tuple[str, Any, Any]]:
    """The figures that must agree to the cent (and the straggler findings), side by side."""
    from phantomhub.waste.selectors import rank_figures_of

    def of(row: Any) -> dict[str, Any]:
        r = row.result
        stragglers = [(s["rank"], s["caused_wait_gpu_seconds"]) for s in r["stragglers"]]
        out = {"cost_usd": row.cost_usd, "waste_usd": row.waste_usd, "recoverable_usd": row.recoverable_usd,
               "steps": r["steps"], "stragglers": stragglers}  # fmt: skip
        for c in r["categories"]:
            out[f"{c['category']}.usd_cents"] = c["usd_cents"]
            out[f"{c['category']}.recoverable_cents"] = c["recoverable_cents"]
        for rank in rank_figures_of(row):
            out[f"rank {rank['rank']}.steps"] = rank["steps"]
        return out

    a, b = of(x), of(y)
    return [(k, a[k], b.get(k)) for k in a]


SWEEPS = 200  # sweeps timed per case: enough for a p99 that is not just the slowest of a few


def sweep_case(run: Any, database_url: str) -> dict[str, Any]:
    """Sweeps with nothing dirty while ``run`` (analysed) is the database's one run, timed once
    the bench's writes have settled: VACUUM ANALYZE (nothing left for autovacuum to do beside the
    sweeps) and a CHECKPOINT (no dirty buffers left to flush), as on a live server between
    bursts. SWEEPS sweeps in this process (its heap holds what the bench built: the cyclic
    collector's time inside each sweep is recorded), then SWEEPS in a fresh process
    (bench/sweep.py), as a worker runs them."""
    from django.db import connection

    from phantomhub.waste.services import run_analyze
    from phantomhub.waste.sweeps import analysis_sweep

    run_analyze(run_id=run.pk)
    analysis_sweep(inline=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")
    times, gc_ms = [], []
    for _ in range(SWEEPS):
        result, wall, _ = timed(lambda: analysis_sweep(inline=True))
        times.append(wall)
        gc_ms.append(TIMED_GC_MS[-1])
        assert result.analysed == 0
    slowest = np.argsort(times)[-max(len(times) // 100, 1) :]  # the sweeps at and above the p99
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "sweep.json"
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "sweep.py"), "--repeat", str(SWEEPS), "--database-url", database_url,
             "--out", str(out_file)], check=True, capture_output=True,
        )  # fmt: skip
        fresh = json.loads(out_file.read_text())["ms"]
    return {"ranks": run.gpu_count, "p50": pct(times, 50), "p99": pct(times, 99), "max": max(times), "n": len(times),
            "gc_ms_max": max(gc_ms), "gc_ms_in_slowest": [gc_ms[i] for i in slowest.tolist()],
            "fresh_process": fresh, "settled": "VACUUM ANALYZE, CHECKPOINT"}  # fmt: skip


def sweep_run(project: Any, start: datetime, n_ranks: int, batch: Any) -> Any:
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.services import steps_ingest

    run = Run.objects.create(
        id=uuid.uuid4(), project=project, name=f"sweep-{n_ranks}", gpu_model="H100-SXM", gpu_count=n_ranks,
        world_size=n_ranks, dtype="bf16", allocation_start=start - timedelta(minutes=5), started_at=start, last_seen_at=start,
    )  # fmt: skip
    for rank in range(n_ranks):
        steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, 0, 10))
    return run


def queries_of(fn: Any) -> int:
    """How many SQL statements ``fn`` runs (an untimed pass: capturing formats every statement)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fn()
    return sum(1 for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT"))


def small_run_case(project: Any, start: datetime, repeat: int) -> dict[str, float]:
    """An ordinary live run: 8 ranks, each pass after 30 more steps (30 s at 1 step/s) per rank."""
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.services import steps_ingest
    from phantomhub.waste.services import run_analyze

    run = Run.objects.create(
        id=uuid.uuid4(), project=project, name="small-8-ranks", gpu_model="H100-SXM", gpu_count=8, world_size=8,
        dtype="bf16", allocation_start=start - timedelta(minutes=5), started_at=start, last_seen_at=start,
    )  # fmt: skip
    t0 = int(start.timestamp()) * NS

    def steps(rank: int, first: int, n: int) -> dict[str, list[Any]]:
        rng = np.random.default_rng(rank * 7 + first)
        compute = rng.normal(600e6, 10e6, n) * (1.1 if rank == 3 else 1.0)
        return {"step": list(range(first, first + n)), "t_start_ns": (t0 + np.arange(first, first + n) * NS).tolist(),
                "dur_ns": [NS] * n, "data_ns": rng.integers(10_000_000, 40_000_000, n).tolist(),
                "forward_ns": (compute / 3).astype(np.int64).tolist(), "backward_ns": (compute * 2 / 3).astype(np.int64).tolist(),
                "comm_ns": (750e6 - compute).clip(0).astype(np.int64).tolist(), "flops": [2.4e14] * n,
                "tokens": [8192] * n}  # fmt: skip

    first = 0
    for _ in range(20):  # 10 minutes of history first
        for rank in range(8):
            steps_ingest(run=run, rank=rank, host=f"node-{rank // 4}", steps=steps(rank, first, 30))
        first += 30
    run_analyze(run_id=run.pk)
    wall, cpu = [], []
    for _ in range(repeat):
        for rank in range(8):
            steps_ingest(run=run, rank=rank, host=f"node-{rank // 4}", steps=steps(rank, first, 30))
        first += 30
        row, w, c = timed(lambda: run_analyze(run_id=run.pk))
        assert row is not None and row.result["steps"] == 8 * first
        wall.append(w)
        cpu.append(c)
    for rank in range(8):
        steps_ingest(run=run, rank=rank, host=f"node-{rank // 4}", steps=steps(rank, first, 30))
    queries = queries_of(lambda: run_analyze(run_id=run.pk))
    run.delete()
    return {**summary(wall, cpu), "queries": queries}


# Functions whose CPU --breakdown reports (module, attribute): the pass's parts, outermost first.
BREAKDOWN = [
    ("phantomhub.waste.services", "analysis_lock"), ("phantomhub.waste.services", "pass_inputs_read"),
    ("phantomhub.waste.services", "run_config_and_prices"), ("phantomhub.waste.services", "_state_load"),
    ("phantomhub.waste.services", "_fetch_new_rows"), ("phantomhub.waste.services", "_step_columns_many"),
    ("phantomhub.waste.services", "_samples"),
    ("phantomhub.waste.core.accumulator:RunAccumulator", "add_steps_many"),
    ("phantomhub.waste.core.accumulator:RunAccumulator", "add_samples"),
    ("phantomhub.waste.core.accumulator:RunAccumulator", "add_samples_many"),
    ("phantomhub.waste.services", "state_pack"), ("phantomhub.waste.services", "analysis_from"),
    ("phantomhub.waste.core.finalize", "assess"), ("phantomhub.waste.core.finalize", "window_series"),
    ("phantomhub.waste.core.finalize", "ledger_build"), ("phantomhub.waste.core.accumulator:RunAccumulator", "finished"),
    ("phantomhub.waste.services", "_store"), ("phantomhub.waste.core.result:Analysis", "to_json"),
    ("phantomhub.waste.core.result:Analysis", "to_json_bytes"), ("phantomhub.waste.services", "recommend"),
    ("phantomhub.waste.rollups", "run_days"), ("phantomhub.waste.services", "_state_write"),
    ("phantomhub.waste.services", "pass_outputs_write"), ("phantomhub.telemetry.hot", "hot_rows"),
]  # fmt: skip


_UNWRAPPED: list[tuple[Any, str, Any]] = []


def breakdown_uninstall() -> None:
    """Put back what ``breakdown_install`` wrapped."""
    while _UNWRAPPED:
        owner, name, fn = _UNWRAPPED.pop()
        setattr(owner, name, fn)


def breakdown_install(totals: dict[str, float]) -> None:
    """Wrap the BREAKDOWN functions so each adds its CPU time (s) to ``totals`` (a bench only)."""
    import functools
    import importlib

    for where, name in BREAKDOWN:
        module, _, cls = where.partition(":")
        owner: Any = importlib.import_module(module)
        if cls:
            owner = getattr(owner, cls)
        fn = getattr(owner, name, None)
        if fn is None:  # not in this version of the code (a side by side with an older one)
            continue

        def wrapped(*args: Any, _fn: Any = fn, _name: str = name, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return _fn(*args, **kwargs)
            finally:
                totals[_name] = totals.get(_name, 0.0) + time.process_time() - t

        _UNWRAPPED.append((owner, name, fn))
        setattr(owner, name, functools.wraps(fn)(wrapped))


def pass_cost_case(
    project: Any, start: datetime, repeat: int, profile: str | None = None, breakdown: bool = False, reconnect: bool = False
) -> dict[str, dict[str, float]]:
    """A live 8-rank run's pass after 0, ~1,300 and ~2,600 new step rows (0, 30 and 60 s of the
    fleet bench's ~44 step rows/s, with its 8 sample rows/s: a GPU or a host row a second per
    rank), so a pass's fixed cost and its cost per new row can be told apart. Passes of the three
    sizes alternate; each is timed in this process (CPU and wall), its statements counted once."""
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.services import samples_ingest, steps_ingest
    from phantomhub.waste.services import run_analyze

    run = Run.objects.create(
        id=uuid.uuid4(), project=project, name="pass-cost-8-ranks", gpu_model="H100-SXM", gpu_count=8, world_size=8,
        dtype="bf16", allocation_start=start - timedelta(minutes=5), started_at=start, last_seen_at=start,
    )  # fmt: skip
    t0 = int(start.timestamp()) * NS
    step_ns = NS * 2 // 11  # 5.5 steps/s per rank: 44 step rows/s over 8 ranks
    state = {"step": 0, "second": 0}

    def add(seconds: int) -> int:
        """Ingest ``seconds`` of telemetry from every rank; the step rows added."""
        first, n = state["step"], seconds * 11 // 2
        s0 = state["second"]
        for rank in range(8):
            rng = np.random.default_rng(rank * 7919 + first)
            compute = rng.normal(130e6, 3e6, n) * (1.1 if rank == 3 else 1.0)
            if n:
                steps_ingest(run=run, rank=rank, host=f"node-{rank // 4}", steps={
                    "step": list(range(first, first + n)), "t_start_ns": (t0 + np.arange(first, first + n) * step_ns).tolist(),
                    "dur_ns": [step_ns] * n, "data_ns": rng.integers(2_000_000, 8_000_000, n).tolist(),
                    "forward_ns": (compute / 3).astype(np.int64).tolist(),
                    "backward_ns": (compute * 2 / 3).astype(np.int64).tolist(),
                    "comm_ns": (170e6 - compute).clip(0).astype(np.int64).tolist(), "flops": [5.2e13] * n,
                    "tokens": [2048] * n})  # fmt: skip
            secs = np.arange(s0, s0 + seconds)
            gpu, host = secs[secs % 2 == 0], secs[secs % 2 == 1]
            if len(gpu):
                samples_ingest(run=run, rank=rank, host=f"node-{rank // 4}", samples={
                    "t_ns": (t0 + gpu * NS).tolist(), "device": [rank % 4] * len(gpu),
                    "gpu_util_pct": rng.uniform(60, 100, len(gpu)).round(1).tolist()})  # fmt: skip
            if len(host):
                samples_ingest(run=run, rank=rank, host=f"node-{rank // 4}", samples={
                    "t_ns": (t0 + host * NS).tolist(), "cpu_other_pct": rng.uniform(0, 5, len(host)).round(2).tolist(),
                    "cpu_steal_pct": [0.0] * len(host)})  # fmt: skip
        state["step"] += n
        state["second"] += seconds
        return 8 * n

    add(600)  # 10 minutes of history first
    run_analyze(run_id=run.pk)
    sizes = {0: "0 new rows", 30: "30 s of new rows", 60: "60 s of new rows"}
    wall: dict[int, list[float]] = {s: [] for s in sizes}
    cpu: dict[int, list[float]] = {s: [] for s in sizes}
    for _ in range(repeat):
        for seconds in sizes:
            add(seconds)
            row, w, c = timed(lambda: run_analyze(run_id=run.pk))
            assert row is not None and row.result["steps"] == 8 * state["step"]
            wall[seconds].append(w)
            cpu[seconds].append(c)
    if reconnect:  # the Celery worker's default: every task closes the connection before and after
        from django.db import connection

        kept: dict[str, list[float]] = {"kept": [], "fresh": [], "kept_wall": [], "fresh_wall": []}
        for _ in range(repeat):
            for mode in ("kept", "fresh"):
                add(30)
                if mode == "fresh":
                    connection.close()
                _, w, c = timed(lambda: run_analyze(run_id=run.pk))
                kept[mode].append(c)
                kept[f"{mode}_wall"].append(w)
        print(
            "30 s pass on the open connection vs on a new one (closed before it, as Celery's Django fixup does "
            f"around every task without CELERY_DB_REUSE_MAX): CPU p50 {pct(kept['kept'], 50):.1f} vs "
            f"{pct(kept['fresh'], 50):.1f} ms, wall p50 {pct(kept['kept_wall'], 50):.1f} vs {pct(kept['fresh_wall'], 50):.1f} ms "
            "(this process only: the server's new backend is not counted)"
        )
    if breakdown:  # untimed passes of the middle size, each part's CPU
        totals: dict[str, float] = {}
        breakdown_install(totals)
        for _ in range(repeat):
            add(30)
            run_analyze(run_id=run.pk)  # looks its parts up at call time: the wrapped ones
        out_parts = {name: totals[name] * 1000 / repeat for _, name in BREAKDOWN if name in totals}
        print("CPU per 30 s pass, ms (nested parts are inside the ones above them): "
              + ", ".join(f"{k} {v:.2f}" for k, v in out_parts.items()))  # fmt: skip
    if profile:  # untimed passes of the middle size
        import cProfile

        profiler = cProfile.Profile(timer=time.process_time)
        for _ in range(repeat):
            add(30)
            profiler.runcall(run_analyze, run_id=run.pk)
        profiler.dump_stats(profile)
    out: dict[str, dict[str, float]] = {}
    for seconds, name in sizes.items():
        n = add(seconds)
        queries = queries_of(lambda: run_analyze(run_id=run.pk))
        out[name] = {**summary(wall[seconds], cpu[seconds]), "queries": queries, "step_rows": n}
    run.delete()
    none, mid, hi = out["0 new rows"], out["30 s of new rows"], out["60 s of new rows"]
    # Per row: the slope between the two sizes with rows (a pass with any rows also pays for
    # steps it would skip with none: reading them, appending, the samples); fixed: what is left.
    per_row_us = (hi["cpu_p50"] - mid["cpu_p50"]) * 1000 / max(hi["step_rows"] - mid["step_rows"], 1)
    out["fit"] = {"nothing_new_cpu_ms": none["cpu_p50"], "fixed_cpu_ms": mid["cpu_p50"] - per_row_us * mid["step_rows"] / 1000,
                  "cpu_us_per_step_row": per_row_us}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_bigjob"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "big_job.json"))
    parser.add_argument("--model-only", action="store_true", help="only the pure-model side-by-side")
    parser.add_argument("--small-only", action="store_true", help="only the small run's passes (prints, writes nothing)")
    parser.add_argument(
        "--pass-cost", action="store_true", help="only a small run's pass after 0 / ~1,300 / ~2,600 new rows (prints)"
    )
    parser.add_argument("--profile", help="with --pass-cost: cProfile (CPU time) of the ~1,300-row passes to this file")
    parser.add_argument(
        "--breakdown", action="store_true",
        help="CPU of each part of a pass: with --pass-cost of the ~1,300-row passes, else of extra incremental passes",
    )  # fmt: skip
    parser.add_argument(
        "--reconnect", action="store_true", help="with --pass-cost: ~1,300-row passes on the open connection vs on a new one"
    )
    args = parser.parse_args()
    model = model_side_by_side(args.ranks, args.steps) if not (args.small_only or args.pass_cost) else {}
    if args.model_only:
        return
    in_process_env(args.database_url)
    database_recreate(args.database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env={**os.environ}, check=True)
    import django

    django.setup()
    from django.db import connection

    from phantomhub.accounts.services import project_get_or_create, team_get_or_create
    from phantomhub.pricing.services import price_set
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.services import samples_ingest, steps_ingest
    from phantomhub.waste import models as waste_models
    from phantomhub.waste.models import RunAnalysis

    # The same bench runs on older code (copied into a worktree of an earlier commit, for a side
    # by side), where the state was one orjson blob in RunAnalysis.state.
    RunAnalysisState = getattr(waste_models, "RunAnalysisState", None)

    def state_forget(run: Any) -> None:
        if RunAnalysisState is None:
            RunAnalysis.objects.filter(run=run).update(state=None)
        else:
            RunAnalysisState.objects.filter(run=run).delete()

    from phantomhub.waste.services import run_analyze

    try:  # as a worker's pool process does once it has imported the tasks (phantomhub/celery.py)
        from phantomhub.runtime import boot_objects_freeze
    except ImportError:  # older code, for a side by side: its worker froze nothing
        pass
    else:
        boot_objects_freeze()
    start = datetime(2026, 10, 1, tzinfo=UTC)
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("3.00"), effective_from=start - timedelta(days=1))
    project = project_get_or_create(team=team_get_or_create(slug="bench"), slug="big-job")
    if args.small_only:
        print(line("small run (8 ranks, 30 s of new steps per rank)", small_run_case(project, start, args.repeat)))
        return
    if args.pass_cost:
        cost = pass_cost_case(project, start, args.repeat, args.profile, args.breakdown, args.reconnect)
        for name, s in cost.items():
            if name != "fit":
                print(line(f"8-rank pass, {name} ({s['step_rows']:.0f} step rows)", s))
        fit = cost["fit"]
        print(f"a pass with new rows: fixed {fit['fixed_cpu_ms']:.1f} ms CPU + {fit['cpu_us_per_step_row']:.2f} µs per new "
              f"step row (with its samples; p50s of 30 and 60 s); with nothing new {fit['nothing_new_cpu_ms']:.1f} ms; "
              f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        return
    t0 = int(start.timestamp()) * NS
    step_ns = 1_000_000_000

    def batch(rank: int, first: int, n: int) -> dict[str, list[float]]:
        rng = np.random.default_rng(rank * 1_000_003 + first)
        compute = rng.normal(600e6, 10e6, n) * (1.1 if rank == 7 else 1.0)
        return {
            "step": list(range(first, first + n)),
            "t_start_ns": (t0 + np.arange(first, first + n) * step_ns).tolist(),
            "dur_ns": [step_ns] * n,
            "data_ns": rng.integers(10_000_000, 40_000_000, n).tolist(),
            "forward_ns": (compute / 3).astype(np.int64).tolist(),
            "backward_ns": (compute * 2 / 3).astype(np.int64).tolist(),
            "optimizer_ns": [20_000_000] * n,
            "comm_ns": (750e6 - compute).clip(0).astype(np.int64).tolist(),
            "flops": [0.4 * 989.4e12 * 0.6] * n,
            "tokens": [8192] * n,
        }

    sweeps = {}
    for n_ranks in (8, 128):  # before the big run exists: each is the database's one run
        small_run = sweep_run(project, start, n_ranks, batch)
        sweeps[str(n_ranks)] = sweep_case(small_run, args.database_url)
        small_run.delete()

    run = Run.objects.create(
        id=uuid.uuid4(), project=project, name=f"bench-{args.ranks}-ranks", gpu_model="H100-SXM",
        gpu_count=args.ranks, world_size=args.ranks, dtype="bf16", allocation_start=start - timedelta(minutes=5),
        started_at=start, last_seen_at=start,
    )  # fmt: skip
    print(f"[setup] {args.ranks:,} ranks x {args.steps:,} steps …", flush=True)
    t = time.perf_counter()
    for rank in range(args.ranks):
        steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, 0, args.steps))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE telemetry_stepchunk")
    print(f"[setup] stored {args.ranks * args.steps:,} rows in {time.perf_counter() - t:.0f} s", flush=True)

    def state_bytes() -> dict[str, int]:
        if RunAnalysisState is None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT length(state), pg_column_size(state) FROM waste_runanalysis WHERE run_id = %s", [run.pk])
                raw, stored = cursor.fetchone()
            return {"total": int(raw), "stored": int(stored)}
        row = RunAnalysisState.objects.get(run=run)
        parts = {"header": len(bytes(row.header)), "ranks": len(bytes(row.ranks)), "windows": len(bytes(row.windows))}
        with connection.cursor() as cursor:  # as stored (TOAST-compressed)
            cursor.execute(
                "SELECT pg_column_size(header) + pg_column_size(ranks) + pg_column_size(windows) "
                "FROM waste_runanalysisstate WHERE run_id = %s",
                [run.pk],
            )
            (stored,) = cursor.fetchone()
        return {**parts, "total": sum(parts.values()), "stored": int(stored)}

    fulls, full_cpu = [], []
    for _ in range(3):
        RunAnalysis.objects.filter(run=run).delete()
        state_forget(run)
        _, wall, cpu = timed(lambda: run_analyze(run_id=run.pk))
        fulls.append(wall / 1000)
        full_cpu.append(cpu / 1000)
    full_state = state_bytes()
    print(f"full analysis: first {fulls[0]:.2f} s, then {', '.join(f'{x:.2f}' for x in fulls[1:])} s "
          f"(CPU {', '.join(f'{x:.2f}' for x in full_cpu)} s); state {full_state}")  # fmt: skip

    inc_wall, inc_cpu = [], []
    TIMED_GC_MS.clear()
    next_step = args.steps
    for _ in range(args.repeat):
        for rank in range(args.ranks):
            steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, next_step, 1))
        next_step += 1
        row, wall, cpu = timed(lambda: run_analyze(run_id=run.pk))
        inc_wall.append(wall)
        inc_cpu.append(cpu)
        assert row is not None and row.result["steps"] == next_step * args.ranks
    for rank in range(args.ranks):
        steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, next_step, 1))
    next_step += 1
    incremental = {**summary(inc_wall, inc_cpu), "gc_ms_p50": pct(TIMED_GC_MS, 50), "gc_ms_max": max(TIMED_GC_MS),
                   "queries": queries_of(lambda: run_analyze(run_id=run.pk))}  # fmt: skip
    if args.breakdown:  # untimed incremental passes after the timed ones, each part's CPU per pass
        parts: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for rank in range(args.ranks):
                steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=batch(rank, next_step, 1))
            next_step += 1
            totals: dict[str, float] = {}
            breakdown_install(totals)
            c0 = time.process_time()
            run_analyze(run_id=run.pk)
            parts.setdefault("(the pass)", []).append((time.process_time() - c0) * 1000)
            for name, seconds in totals.items():
                parts.setdefault(name, []).append(seconds * 1000)
            breakdown_uninstall()
        print("incremental pass, CPU ms per part p50 / max over the passes (nested parts are inside the ones above them): "
              + ", ".join(f"{k} {pct(v, 50):.1f} / {max(v):.1f}" for k, v in parts.items()))  # fmt: skip
    live_state = state_bytes()
    print(line("incremental after one step per rank", incremental, " (target p99 <= 200 ms)") + f"; state {live_state}"
          + f"; garbage collector inside a pass p50 {incremental['gc_ms_p50']:.1f} ms, "
          f"max {incremental['gc_ms_max']:.1f} ms")  # fmt: skip
    # The oracle: the same rows analysed from scratch give the same figures, to the cent.
    live_row = RunAnalysis.objects.get(run=run)
    state_forget(run)
    scratch = run_analyze(run_id=run.pk)
    assert scratch is not None
    differ = [name for name, a, b in cent_figures(live_row, scratch) if a != b]
    same = not differ
    print(f"incremental equals a from-scratch analysis of the same rows, to the cent: {same} {differ or ''}")

    none_wall, none_cpu = [], []
    for i in range(args.repeat):
        sample_t = t0 + next_step * step_ns + i * 1000
        samples_ingest(run=run, rank=0, host="node-0", samples={"t_ns": [sample_t], "cpu_other_pct": [3.0]})
        _, wall, cpu = timed(lambda: run_analyze(run_id=run.pk))
        none_wall.append(wall)
        none_cpu.append(cpu)
    samples_ingest(run=run, rank=0, host="node-0", samples={"t_ns": [t0 + next_step * step_ns + 10**6], "cpu_other_pct": [3.0]})
    no_new = {**summary(none_wall, none_cpu), "queries": queries_of(lambda: run_analyze(run_id=run.pk))}
    print(line("re-analysis with no new steps (a sample)", no_new))

    sweeps[str(args.ranks)] = sweep_case(run, args.database_url)
    for s in sweeps.values():
        f = s["fresh_process"]
        print(f"sweep with nothing dirty, the one live run has {s['ranks']:,} ranks, {s['n']} sweeps: in a fresh process "
              f"p50 {f['p50']:.1f}, p99 {f['p99']:.1f}, max {f['max']:.1f} ms (target <= 10 ms); in this process p50 "
              f"{s['p50']:.1f}, p99 {s['p99']:.1f}, max {s['max']:.1f} ms, the collector inside the slowest "
              f"{', '.join(f'{x:.1f}' for x in s['gc_ms_in_slowest'])} ms")  # fmt: skip

    small = small_run_case(project, start, args.repeat)
    print(line("small run (8 ranks, 30 s of new steps per rank)", small, " (target <= 10 ms CPU)"))

    out = {
        "benchmark": "big_job",
        "ranks": args.ranks,
        "steps_per_rank": args.steps,
        "rows": args.ranks * args.steps,
        "full_analysis_s": {"first": fulls[0], "repeats": fulls[1:], "cpu": full_cpu},
        "incremental_one_step_per_rank_ms": incremental,
        "incremental_equals_full": same,
        "reanalysis_no_new_steps_ms": no_new,
        "sweep_nothing_dirty_ms": sweeps,
        "state_bytes": {"after_full": full_state, "after_incremental": live_state},
        "small_run_8_ranks_30s_ms": small,
        "model_side_by_side_s": model,
        "targets": {"incremental_p99_ms": 200, "sweep_nothing_dirty_ms": 10, "small_run_cpu_ms": 10},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_1min": os.getloadavg()[0]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

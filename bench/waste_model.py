"""Time the waste model on a synthetic run: 1,000,000 step rows over 8 ranks.

Prints the figures and writes bench/results/waste_model.json (or --out). Not part of `make test`.
Usage: python bench/waste_model.py [--rows N] [--ranks R] [--repeat K] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import orjson

from phantomhub.waste.core.model import (
    Phase,
    PriceSegment,
    RunAccumulator,
    RunConfig,
    RunInputs,
    StepColumns,
    SystemSamples,
    analysis_from,
    analyze,
)
from phantomhub.waste.core.state import StateParts, arrays_pack, arrays_unpack, state_pack, state_unpack

RESULTS = Path(__file__).resolve().parent / "results" / "waste_model.json"
S = 10**9


def synthetic_run(rows: int, ranks: int, seed: int = 0) -> RunInputs:
    """An H100-like data-parallel run: ~300 ms steps with jitter, the last rank 15% slower in
    compute (so the others wait for it at the all-reduce), an eval phase and a price change."""
    rng = np.random.default_rng(seed)
    n = rows // ranks
    start = 1_700_000_000 * S
    slow = np.ones((ranks, 1))
    slow[-1] = 1.15
    fwd = (rng.normal(80e6, 4e6, (ranks, n)) * slow).astype(np.int64)
    bwd = (rng.normal(150e6, 6e6, (ranks, n)) * slow).astype(np.int64)
    opt = rng.normal(12e6, 1e6, (ranks, n)).astype(np.int64)
    data = np.abs(rng.normal(15e6, 8e6, (ranks, n))).astype(np.int64)
    host = rng.integers(2_000_000, 6_000_000, (ranks, n))
    arrival = data + fwd + bwd + opt + host
    transfer = rng.integers(8_000_000, 12_000_000, n)
    # Everyone leaves the all-reduce together: exposed comm = wait for the last rank + transfer.
    dur = arrival.max(axis=0) + transfer
    comm = dur[None, :] - arrival
    t0 = start + 120 * S + np.concatenate(([0], np.cumsum(dur)[:-1]))
    end = int(t0[-1] + dur[-1] + 60 * S)
    batches = [
        StepColumns(
            rank=r,
            host=f"node-{r // 8}",
            step=np.arange(n),
            t_start_ns=t0,
            dur_ns=dur,
            data_ns=data[r],
            forward_ns=fwd[r],
            backward_ns=bwd[r],
            optimizer_ns=opt[r],
            comm_ns=comm[r],
            flops=np.full(n, 9.0e13),
            tokens=np.full(n, 8192),
            samples=np.full(n, 4),
            mem_allocated=rng.integers(50 * 2**30, 60 * 2**30, n),
            mem_reserved=np.full(n, 70 * 2**30),
            mem_peak=rng.integers(60 * 2**30, 72 * 2**30, n),
            alloc_retries=(rng.random(n) < 0.001).astype(np.int64),
        )
        for r in range(ranks)
    ]
    mid = (start + end) // 2
    n_samples = (end - start) // S
    t = start + np.arange(n_samples, dtype=np.int64) * S
    samples = [
        SystemSamples(
            host="node-0",
            t_ns=t,
            gpu_util_pct=rng.uniform(85, 100, n_samples),
            cpu_other_pct=rng.uniform(0, 20, n_samples),
            cpu_steal_pct=rng.uniform(0, 1, n_samples),
        )
    ]
    config = RunConfig(
        gpu_count=ranks,
        world_size=ranks,
        allocation_start_ns=start,
        price_segments=(
            PriceSegment(start - 3600 * S, mid, 6.88),
            PriceSegment(mid, end + 3600 * S, 3.40),
        ),
        phases=(Phase("eval", mid + 7 * S, mid + 67 * S),),
        peak_flops_per_gpu=989.4e12,
        target_mfu=0.5,
        gpu_memory_bytes=80 * 2**30,
        dtype="bf16",
    )
    return RunInputs(config=config, end_ns=end, steps=batches, samples=samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    run = synthetic_run(args.rows, args.ranks)

    full = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = analyze(run)
        full.append(time.perf_counter() - t0)

    # Live run: the first 99% of every rank arrives in interleaved batches of 5,000 rows (as the
    # agents send them); then time the state stored and read back (the three parts of state.py as
    # bytes, as the service stores them), the last 1% and the analysis.
    acc = RunAccumulator(run.config)
    cut = int(len(run.steps[0]) * 0.99)
    for lo in range(0, cut, 5_000):
        for batch in run.steps:
            acc.add_steps(batch.take(np.arange(lo, min(lo + 5_000, cut))))
    tails = [batch.take(np.arange(cut, len(batch))) for batch in run.steps]
    t0 = time.perf_counter()
    parts = state_pack(acc)
    stored = (orjson.dumps(parts.header), arrays_pack(parts.ranks), arrays_pack(parts.windows))
    acc = state_unpack(StateParts(orjson.loads(stored[0]), arrays_unpack(stored[1]), arrays_unpack(stored[2])))
    for batch in tails:
        acc.add_steps(batch)
    for samples in run.samples:
        acc.add_samples(samples)
    live = analysis_from(acc, end_ns=run.end_ns)
    incremental_s = time.perf_counter() - t0
    assert live.cost_cents == result.cost_cents
    assert [c.usd_cents for c in live.categories] == [c.usd_cents for c in result.categories]

    figures = {
        "rows": args.rows,
        "ranks": args.ranks,
        "analyze_seconds_best": min(full),
        "analyze_seconds_median": sorted(full)[len(full) // 2],
        "rows_per_second": args.rows / min(full),
        "incremental_append_1pct_seconds": incremental_s,
        "state_stored_bytes": sum(map(len, stored)),
        "cost_usd": result.cost_usd,
        "mfu": result.mfu,
        "mfu_step_time": result.mfu_step_time,
        "window_width_s": result.windows.width_ns / S,
        "windows": len(result.windows),
        "window_mfu_max": max((m for m in result.windows.mfu if m is not None), default=None),
        "stragglers": [s.rank for s in result.stragglers],
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "processor": platform.processor() or platform.machine(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    for key, value in figures.items():
        print(f"{key:34} {value}")


if __name__ == "__main__":
    main()

"""The pure model's incremental pass for a 1,024-rank run, without a database: what the worker's
Python does between reading the rows and writing the result.

A run of ``--ranks`` ranks x ``--steps`` steps is folded into an accumulator and packed, then each
pass: unpack the state, add one step from every rank (as the analysis reads them: one set of
columns, ``StepBatches``), pack the state, finish and build the analysis. CPU ms per part,
p50 / p90 over ``--passes`` (and the whole pass's p99), the minor page faults of a pass (p50),
with the garbage collector off as in a worker's pass, and the
SHA-256 of the last analysis's JSON: run in a worktree of older code (copy this file there) to
compare the speed and to check that the analysis bytes are the same.

    .venv/bin/python bench/pass_model.py [--ranks 1024] [--steps 200] [--passes 30]

Prints only (no JSON: the database bench, bench/big_job.py, is the recording).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NS = 10**9


def main() -> None:
    from phantomhub.waste.core import accumulator
    from phantomhub.waste.core.accumulator import RunAccumulator
    from phantomhub.waste.core.inputs import StepColumns
    from phantomhub.waste.core.model import PriceSegment, RunConfig, analysis_from
    from phantomhub.waste.core.state import state_pack, state_unpack

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--passes", type=int, default=30)
    args = parser.parse_args()
    n_ranks = args.ranks
    cfg = RunConfig(gpu_count=n_ranks, world_size=n_ranks, allocation_start_ns=0,
                    price_segments=(PriceSegment(0, 10**6 * NS, 3),), peak_flops_per_gpu=989.4e12)  # fmt: skip

    def batch(rank: int, first: int, n: int) -> StepColumns:
        rng = np.random.default_rng(rank * 1_000_003 + first)
        compute = rng.normal(600e6, 10e6, n) * (1.1 if rank == 7 else 1.0)
        steps = np.arange(first, first + n)
        return StepColumns(
            rank=rank, host=f"node-{rank // 8}", step=steps, t_start_ns=steps * NS + NS, dur_ns=np.full(n, NS),
            data_ns=rng.integers(10_000_000, 40_000_000, n), forward_ns=(compute / 3).astype(np.int64),
            backward_ns=(compute * 2 / 3).astype(np.int64), optimizer_ns=np.full(n, 20_000_000),
            comm_ns=(750e6 - compute).clip(0).astype(np.int64), flops=np.full(n, 0.4 * 989.4e12 * 0.6),
            tokens=np.full(n, 8192),
        )  # fmt: skip

    def as_read(raw: list[StepColumns]) -> list[StepColumns]:
        """The batches as the analysis hands them on from one read (older code: as they are)."""
        batches_cls = getattr(accumulator, "StepBatches", None)
        if batches_cls is None:
            return raw
        filled = accumulator._filled_many(raw)
        present = raw[0].present()
        names = ["step", "t_start_ns", "dur_ns", *present]
        cols = [StepColumns.trusted(rank=b.rank, host=b.host, columns={c: filled[c][i : i + 1] for c in names}, present=present)
                for i, b in enumerate(raw)]  # fmt: skip
        lengths = [np.ones(len(raw), dtype=np.int64)] if "lengths" in batches_cls.__init__.__code__.co_varnames else []
        return batches_cls(cols, filled, *lengths)  # type: ignore[no-any-return]

    acc = RunAccumulator(cfg)
    acc.add_steps_many([batch(r, 0, args.steps) for r in range(n_ranks)], align=True)
    parts = state_pack(acc)
    gc.collect()
    gc.freeze()
    gc.disable()
    times: dict[str, list[float]] = {k: [] for k in ("unpack", "add", "pack", "analysis", "total")}
    faults: list[int] = []  # minor page faults (memory the kernel handed the process) per pass
    nxt = args.steps
    analysis = None
    for _ in range(args.passes):
        new = as_read([batch(r, nxt, 1) for r in range(n_ranks)])
        nxt += 1
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        c0 = time.process_time()
        live = state_unpack(parts)
        c1 = time.process_time()
        live.add_steps_many(new, align=True)
        c2 = time.process_time()
        parts = state_pack(live)
        c3 = time.process_time()
        analysis = analysis_from(live, end_ns=(nxt + 2) * NS, consume=True)
        c4 = time.process_time()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        for key, value in zip(times, (c1 - c0, c2 - c1, c3 - c2, c4 - c3, c4 - c0), strict=True):
            times[key].append(value * 1000)
    gc.enable()
    assert analysis is not None
    digest = hashlib.sha256(analysis.to_json_bytes()).hexdigest()[:16]
    print(f"{n_ranks} ranks, {args.passes} passes, CPU ms p50 / p90: "
          + ", ".join(f"{k} {np.percentile(v, 50):.1f} / {np.percentile(v, 90):.1f}" for k, v in times.items())
          + f", p99 {np.percentile(times['total'], 99):.1f}; page faults a pass p50 {np.percentile(faults, 50):,.0f}; "
          + f"last analysis sha256 {digest}")  # fmt: skip


if __name__ == "__main__":
    main()

"""Hypothesis strategies: random but valid runs, including awkward ones (overlapping rows, stages
longer than the step, rows before the allocation or after the end, phases, price gaps)."""

from __future__ import annotations

import dataclasses
import itertools
from decimal import Decimal
from typing import Any

import numpy as np
from hypothesis import strategies as st

from phantomhub.waste.core.model import Phase, PriceSegment, RunConfig, RunInputs, StepColumns, SystemSamples
from tests.waste.factories import MS, S

STAGES = ("data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns")


@st.composite
def rank_rows(draw: st.DrawFn, rank: int, first_ns: int, columns: tuple[str, ...]) -> StepColumns:
    n = draw(st.integers(1, 20))
    durs = draw(st.lists(st.integers(0, 3 * S), min_size=n, max_size=n))
    # Next start relative to this row's end: negative means the row overran into the next one.
    slack = draw(st.lists(st.integers(-S, 2 * S), min_size=n, max_size=n))
    starts = [first_ns]
    for d, g in zip(durs[:-1], slack[:-1], strict=True):
        starts.append(starts[-1] + max(1, d + g))
    cols: dict[str, Any] = {
        "step": np.arange(n) + draw(st.integers(0, 3)),
        "t_start_ns": np.array(starts, dtype=np.int64),
        "dur_ns": np.array(durs, dtype=np.int64),
    }
    for name in columns:
        if name == "flops":
            cols[name] = np.array(draw(st.lists(st.floats(0, 2e12), min_size=n, max_size=n)))
        else:
            cols[name] = np.array(draw(st.lists(st.integers(0, 2 * S), min_size=n, max_size=n)))
    return StepColumns(rank=rank, host=f"node-{rank % 2}", **cols)


@st.composite
def runs(draw: st.DrawFn) -> RunInputs:
    gpu_count = draw(st.integers(1, 16))
    world_size = draw(st.integers(1, 5))
    start = draw(st.integers(0, 10**6)) * MS
    n_ranks = draw(st.integers(0, world_size))
    rank_ids = draw(st.permutations(range(world_size)))[:n_ranks]
    columns = tuple(draw(st.sets(st.sampled_from((*STAGES, "flops")))))
    batches = [draw(rank_rows(r, start + draw(st.integers(-2 * S, 5 * S)), columns)) for r in rank_ids]
    last = max(
        (int((b.t_start_ns + b.dur_ns).max()) for b in batches),
        default=start,
    )
    end = start + draw(st.integers(0, max(last - start, 0) + 5 * S))

    def instant() -> int:
        return draw(st.integers(start - 2 * S, end + 2 * S))

    phases = []
    for i in range(draw(st.integers(0, 3))):
        a = instant()
        phases.append(Phase(f"p{i}", a, a + draw(st.integers(0, 5 * S))))
    cuts = sorted(instant() for _ in range(draw(st.integers(0, 4))))
    segments = []
    for a, b in itertools.pairwise(cuts):
        if b > a and draw(st.booleans()):  # sometimes leave a gap: unpriced time
            price = Decimal(draw(st.integers(0, 2000))) / 100
            segments.append(PriceSegment(a, b, price))
    if draw(st.booleans()):
        segments = [PriceSegment(start - S, end + S, Decimal("3.17"))]
    config = RunConfig(
        gpu_count=gpu_count,
        world_size=world_size,
        allocation_start_ns=start,
        price_segments=tuple(segments),
        phases=tuple(phases),
        peak_flops_per_gpu=draw(st.sampled_from((None, 1e12, 3.3e12))),
        target_mfu=draw(st.sampled_from((0.3, 0.5, 1.0))),
    )
    samples = []
    for host in draw(st.lists(st.sampled_from(("node-0", "node-1", "node-9")), max_size=2)):
        n = draw(st.integers(1, 10))
        t = np.sort(np.array(draw(st.lists(st.integers(start - S, end + S), min_size=n, max_size=n))))

        def pct(n: int = n) -> Any:
            return np.array(draw(st.lists(st.floats(0, 100), min_size=n, max_size=n)))

        samples.append(SystemSamples(host=host, t_ns=t, gpu_util_pct=pct(), cpu_other_pct=pct(), cpu_steal_pct=pct()))
    return RunInputs(config=config, end_ns=end, steps=batches, samples=samples)


def scaled(run: RunInputs, k: int) -> RunInputs:
    """Every time and duration times k (FLOPs too, so the FLOP rate is unchanged)."""
    cfg = run.config

    def t(x: int) -> int:
        return cfg.allocation_start_ns + (x - cfg.allocation_start_ns) * k

    config = dataclasses.replace(
        cfg,
        price_segments=tuple(PriceSegment(t(s.start_ns), t(s.end_ns), s.usd_per_gpu_hour) for s in cfg.price_segments),
        phases=tuple(Phase(p.name, t(p.start_ns), t(p.end_ns)) for p in cfg.phases),
    )
    batches = []
    for b in run.steps:
        cols: dict[str, Any] = {"step": b.step, "t_start_ns": np.array([t(int(x)) for x in b.t_start_ns])}
        cols["dur_ns"] = b.dur_ns * k
        for name in STAGES:
            if getattr(b, name) is not None:
                cols[name] = getattr(b, name) * k
        if b.flops is not None:
            cols["flops"] = b.flops * k
        batches.append(StepColumns(rank=b.rank, host=b.host, **cols))
    return RunInputs(config=config, end_ns=t(run.end_ns), steps=batches)

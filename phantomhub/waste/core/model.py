"""The waste model: every billed GPU-second of a run in exactly one category.

Pure numpy, no framework imports. Public API:

- ``analyze(run: RunInputs) -> Analysis``: from-scratch analysis of one run.
- ``RunAccumulator``: the same analysis, fed batch by batch (live runs);
  ``analysis_from(acc, end_ns=...)`` gives exactly what ``analyze`` gives for the same rows
  (integer figures bit for bit, float aggregates to rounding). Between passes its state is stored
  in the compact form of state.py (``state_pack`` / ``state_unpack``: a small JSON header, and the
  rank table and chart sums as raw binary arrays that round-trip bit for bit).

See docs/waste-model.md for the categories, formulas, defaults and a worked example.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from phantomhub.waste.core.accumulator import NotAppendable, RunAccumulator, StepBatches
from phantomhub.waste.core.evidence import NO_REFERENCES, Peer, References, RunProfile
from phantomhub.waste.core.finalize import HOURS_PER_MONTH, build_analysis
from phantomhub.waste.core.inputs import (
    CATEGORIES,
    DEFAULT_RECOVERABILITY,
    DEFAULT_TARGET_MFU,
    STEP_CATEGORIES,
    Phase,
    PriceSegment,
    RunConfig,
    RunInputs,
    StepColumns,
    SystemSamples,
    recoverability_check,
    world_size_for,
)
from phantomhub.waste.core.result import (
    Analysis,
    CategoryFigure,
    Explained,
    HostDiagnostics,
    HostFigure,
    IdleFigure,
    MemoryDiagnostics,
    RankFigure,
    Straggler,
    WindowSeries,
)

__all__ = [
    "CATEGORIES",
    "DEFAULT_RECOVERABILITY",
    "DEFAULT_TARGET_MFU",
    "HOURS_PER_MONTH",
    "NO_REFERENCES",
    "STEP_CATEGORIES",
    "Analysis",
    "CategoryFigure",
    "Explained",
    "HostDiagnostics",
    "HostFigure",
    "IdleFigure",
    "MemoryDiagnostics",
    "NotAppendable",
    "Peer",
    "Phase",
    "PriceSegment",
    "RankFigure",
    "References",
    "RunAccumulator",
    "RunConfig",
    "RunInputs",
    "RunProfile",
    "StepBatches",
    "StepColumns",
    "Straggler",
    "SystemSamples",
    "WindowSeries",
    "analysis_from",
    "analyze",
    "recoverability_check",
    "world_size_for",
]


def _merge_rank_batches(batches: list[StepColumns]) -> StepColumns:
    """One rank's batches as one, rows in start order (a from-scratch run has no arrival order)."""
    if len(batches) == 1:
        return batches[0]
    names = sorted({c for b in batches for c in b.present()})
    cols: dict[str, np.ndarray | None] = {}
    for name in ("step", "t_start_ns", "dur_ns", *names):
        parts = []
        for b in batches:
            arr = getattr(b, name)
            if arr is None:  # absent in this batch: same fill the accumulator would use
                fill = np.nan if name == "flops" else (-1 if name.startswith("mem_") else 0)
                arr = np.full(len(b), fill)
            parts.append(arr)
        cols[name] = np.concatenate(parts)
    merged = StepColumns.from_columns(rank=batches[-1].rank, host=batches[-1].host, columns=cols)
    return merged.take(np.argsort(merged.t_start_ns, kind="stable"))


def _clip_to_end(cols: StepColumns, end_ns: int) -> StepColumns:
    """Drop rows starting at or after the end and cut the rest at it (they are not billed)."""
    keep = cols.t_start_ns < end_ns
    if not keep.all():
        cols = cols.take(np.flatnonzero(keep))
    over = cols.t_start_ns + cols.dur_ns > end_ns
    if over.any():
        dur = np.where(over, end_ns - cols.t_start_ns, cols.dur_ns)
        cols = StepColumns(
            **{
                **{c: getattr(cols, c) for c in cols.__dataclass_fields__},
                "dur_ns": dur,
            }
        )
    return cols


def analysis_from(
    acc: RunAccumulator,
    *,
    end_ns: int,
    recoverability: Mapping[str, float] = DEFAULT_RECOVERABILITY,
    oom_count: int = 0,
    refs: References = NO_REFERENCES,
    dropped_rows: Mapping[str, int] | None = None,
    extra_warnings: tuple[str, ...] = (),
    consume: bool = False,
) -> Analysis:
    """Finish a copy of ``acc`` at ``end_ns`` and build the Analysis (``acc`` is unchanged;
    ``consume``: finish ``acc`` itself, cheaper for a caller that has already stored it).

    ``refs`` are the peer runs and project runs that may demonstrate better levels (evidence.py).
    """
    factors = recoverability_check(recoverability)
    done = acc.finished(end_ns, in_place=consume)
    return build_analysis(
        done, end_ns=end_ns, recoverability=factors, oom_count=oom_count, refs=refs,
        dropped_rows=dropped_rows, extra_warnings=extra_warnings,
    )  # fmt: skip


def analyze(run: RunInputs) -> Analysis:
    """From-scratch analysis of one run."""
    if run.end_ns < run.config.allocation_start_ns:
        raise ValueError("end_ns is before allocation_start_ns")
    by_rank: dict[int, list[StepColumns]] = defaultdict(list)
    for batch in run.steps:
        if len(batch):
            by_rank[batch.rank].append(batch)
    cfg = run.config
    world, notes = world_size_for(cfg.world_size, len(by_rank), cfg.gpu_count)
    acc = RunAccumulator(dataclasses.replace(cfg, world_size=world) if world != cfg.world_size else cfg)
    acc.add_steps_many([_clip_to_end(_merge_rank_batches(by_rank[rank]), run.end_ns) for rank in sorted(by_rank)], align=False)
    for samples in run.samples:
        acc.add_samples(samples)
    return analysis_from(
        acc, end_ns=run.end_ns, recoverability=run.recoverability, oom_count=run.oom_count, refs=run.refs or NO_REFERENCES,
        extra_warnings=notes,
    )  # fmt: skip

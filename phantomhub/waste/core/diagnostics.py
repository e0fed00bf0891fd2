"""Diagnostics beside the dollar split: memory, host CPU contention, stragglers, chart windows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

import numpy as np

from phantomhub.waste.core.accumulator import HostSamples, RankState, RankTotals, RunAccumulator
from phantomhub.waste.core.result import (
    HostDiagnostics,
    HostFigure,
    MemoryDiagnostics,
    Straggler,
    WindowSeries,
)
from phantomhub.waste.core.stragglers import STRAGGLER_MIN_SLOW_SHARE, StragglerCounters
from phantomhub.waste.core.windows import FIELDS

# Host contention thresholds (percent of the node's CPU; steal from /proc/stat).
CONTENDED_OTHER_MEAN_PCT = 25.0
CONTENDED_OTHER_P95_PCT = 50.0
CONTENDED_STEAL_MEAN_PCT = 5.0
# A host is only called contended over enough samples: the 95th percentile of a handful is just
# its largest, and one odd sample must not flag a calm host.
CONTENDED_MIN_SAMPLES = 10
# A rank is only called a straggler over enough aligned steps to be more than bad luck.
STRAGGLER_MIN_ALIGNED_STEPS = 3


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def _p95(hist: Sequence[int]) -> float | None:
    """95th percentile from 1%-wide bins (the lower edge of the bin that crosses 95%)."""
    n = sum(hist)
    if n == 0:
        return None
    cum = np.cumsum(hist)
    return float(np.searchsorted(cum, math.ceil(0.95 * n)))


def memory_diagnostics(
    ranks: Sequence[RankState], capacity_bytes: int | None, oom_count: int, totals: RankTotals | None = None
) -> MemoryDiagnostics:
    """``totals``: ``RankTotals.of(ranks)``, when the caller has it."""
    totals = totals or RankTotals.of(ranks)
    peak_rs = max(ranks, key=lambda r: r.mem_peak_max, default=None)
    peak = peak_rs.mem_peak_max if peak_rs is not None and peak_rs.mem_peak_max >= 0 else None
    reserved = max([r.mem_reserved_max for r in ranks], default=-1)
    allocated = max([r.mem_allocated_max for r in ranks], default=-1)
    frag_rows = totals.sums["frag_rows"]
    retries = totals.sums["alloc_retries"] if "alloc_retries" in totals.columns else None
    rows = totals.sums["rows"]
    return MemoryDiagnostics(
        capacity_bytes=capacity_bytes,
        peak_bytes_max=peak,
        peak_rank=peak_rs.rank if peak is not None and peak_rs is not None else None,
        peak_fraction_of_capacity=(peak / capacity_bytes if peak and capacity_bytes else None),
        headroom_bytes=(capacity_bytes - peak if peak is not None and capacity_bytes else None),
        reserved_bytes_max=reserved if reserved >= 0 else None,
        allocated_bytes_max=allocated if allocated >= 0 else None,
        fragmentation_mean=_mean(totals.frag_sum, frag_rows),
        alloc_retries_total=retries,
        alloc_retries_per_1k_steps=(retries * 1000 / rows if retries is not None and rows else None),
        oom_count=oom_count,
    )


def host_diagnostics(
    ranks: Sequence[RankState], hosts: dict[str, HostSamples], totals: RankTotals | None = None
) -> HostDiagnostics:
    """``totals``: ``RankTotals.of(ranks)``, when the caller has it."""
    totals = totals or RankTotals.of(ranks)
    # Per host, in one pass over the ranks: [its ranks, Σ nonphase_ns, Σ host_ns, Σ data_ns].
    by_host: dict[str, list[Any]] = {}
    for r in ranks:
        s = r.sums
        mine = by_host.get(r.host)
        if mine is None:
            mine = by_host[r.host] = [[], 0, 0, 0]
        mine[0].append(r.rank)
        mine[1] += s["nonphase_ns"]
        mine[2] += s["host_ns"]
        mine[3] += s["data_ns"]
    names = sorted(set(by_host) | set(hosts))
    figures = []
    for name in names:
        rank_ids, step_ns, host_ns, data_ns = by_host.get(name, ([], 0, 0, 0))
        hs = hosts.get(name, HostSamples())
        other_mean = _mean(hs.other_sum, hs.other_n)
        other_p95 = _p95(hs.other_hist)
        steal_mean = _mean(hs.steal_sum, hs.steal_n)
        enough_other, enough_steal = hs.other_n >= CONTENDED_MIN_SAMPLES, hs.steal_n >= CONTENDED_MIN_SAMPLES
        contended = (
            (enough_other and other_mean is not None and other_mean >= CONTENDED_OTHER_MEAN_PCT)
            or (enough_other and other_p95 is not None and other_p95 >= CONTENDED_OTHER_P95_PCT)
            or (enough_steal and steal_mean is not None and steal_mean >= CONTENDED_STEAL_MEAN_PCT)
        )
        figures.append(
            HostFigure(
                host=name,
                ranks=tuple(sorted(rank_ids)),
                samples=max(hs.other_n, hs.steal_n, hs.gpu_util_n),
                cpu_other_pct_mean=other_mean,
                cpu_other_pct_p95=other_p95,
                cpu_steal_pct_mean=steal_mean,
                cpu_steal_pct_p95=_p95(hs.steal_hist),
                gpu_util_pct_mean=_mean(hs.gpu_util_sum, hs.gpu_util_n),
                host_overhead_share=_mean(host_ns, step_ns),
                data_stall_share=_mean(data_ns, step_ns),
                contended=bool(contended),
            )
        )
    return HostDiagnostics(
        hosts=tuple(figures),
        gpu_util_pct_mean=_mean(sum(h.gpu_util_sum for h in hosts.values()), sum(h.gpu_util_n for h in hosts.values())),
        host_overhead_share=_mean(totals.sums["host_ns"], totals.sums["nonphase_ns"]),
    )


def _per_step(rs: RankState, key: str) -> float | None:
    return _mean(rs.sums[key], rs.sums["live_steps"])


# Where a slow rank's own extra time per step can sit, and the category it is priced in: extra
# compute for the same work is compute running below what the other ranks achieve.
_OWN_EXCESS_PARTS = (
    ("data_stall", ("data_ns",)),
    ("compute_inefficiency", ("useful_ns", "inefficiency_ns")),
    ("host_overhead", ("host_ns",)),
)


def _part_per_step(rs: RankState, keys: tuple[str, ...]) -> float:
    return sum(rs.sums[k] for k in keys) / rs.sums["live_steps"]


def stragglers_found(
    ranks: Sequence[RankState],
    counters: dict[int, StragglerCounters],
    gpu_ns_per_rank_ns: float,
    usd_per_gpu_ns: Mapping[str, float],
) -> tuple[Straggler, ...]:
    """Ranks persistently slower than the others, with what their slowness costs the job: the
    comm wait they cause the others (``usd_per_gpu_ns["comm_exposed"]``), and their own time
    ahead of the others, part by part, each at its category's rate."""
    flagged = []
    for rs in ranks:
        c = counters.get(rs.rank)
        if c is None or c.aligned_steps < STRAGGLER_MIN_ALIGNED_STEPS or c.blamed_steps == 0:
            continue
        share = c.slow_steps / c.aligned_steps
        if share >= STRAGGLER_MIN_SLOW_SHARE:
            flagged.append((rs, c, share))
    if not flagged:
        return ()
    live = [r for r in ranks if r.sums["live_steps"]]
    found = []
    for rs, c, share in flagged:
        # The lead is over the *other* ranks: with two ranks a median that holds the slow one
        # is the midpoint, half its real lead.
        others = [r for r in live if r.rank != rs.rank]
        caused_gpu_ns = c.caused_wait_ns * gpu_ns_per_rank_ns
        lead_ns = 0.0
        own_usd: dict[str, float] = {}
        own_gpu_ns = 0.0
        if rs.sums["live_steps"] and others:
            for category, keys in _OWN_EXCESS_PARTS:
                excess = _part_per_step(rs, keys) - median([_part_per_step(r, keys) for r in others])
                if excess <= 0:
                    continue
                lead_ns += excess
                gpu_ns = excess * rs.sums["live_steps"] * gpu_ns_per_rank_ns
                own_gpu_ns += gpu_ns
                own_usd[category] = gpu_ns * usd_per_gpu_ns.get(category, 0.0)
        compute_others = [_part_per_step(r, ("useful_ns", "inefficiency_ns")) for r in others]
        data_others = [_part_per_step(r, ("data_ns",)) for r in others]
        found.append(
            Straggler(
                rank=rs.rank,
                host=rs.host,
                aligned_steps=c.aligned_steps,
                slow_step_share=share,
                blamed_steps=c.blamed_steps,
                excess_ns_mean=c.excess2_ns / 2 / c.blamed_steps,
                compute_ns_mean=_mean(rs.sums["useful_ns"] + rs.sums["inefficiency_ns"], rs.sums["live_steps"]),
                median_rank_compute_ns_mean=median(compute_others) if compute_others else None,
                data_ns_mean=_per_step(rs, "data_ns"),
                median_rank_data_ns_mean=median(data_others) if data_others else None,
                caused_wait_gpu_seconds=caused_gpu_ns / 1e9,
                caused_wait_usd=caused_gpu_ns * usd_per_gpu_ns.get("comm_exposed", 0.0),
                lead_ns_mean=lead_ns,
                own_excess_gpu_seconds=own_gpu_ns / 1e9,
                own_excess_usd=own_usd,
            )
        )
    return tuple(sorted(found, key=lambda s: (-s.saving_usd, s.rank)))


def window_series(
    acc: RunAccumulator,
    end_ns: int,
    *,
    rank_scale: float,
    peak_total_flops: float | None,
) -> WindowSeries:
    """Per-window chart data; ``rank_scale`` (world_size / reporting ranks) extrapolates the
    reporting ranks' FLOPs, tokens and samples to the whole run."""
    start = acc.config.allocation_start_ns
    last = max(end_ns, (acc.max_t_seen or start) + 1)
    win = acc.windows.copy()
    win.fit(max(last - start - 1, 0))
    # No narrower than 9 in 10 steps: a window shorter than a step is mostly empty.
    win.coarsen_to(win.duration_level())
    width = win.width_ns
    n = max(math.ceil((last - start) / width), 0)
    sums = np.pad(win.sums, ((0, 0), (0, max(n - win.sums.shape[1], 0))))[:, :n]
    peak = np.pad(win.peak, (0, max(n - len(win.peak), 0)), constant_values=-1.0)[:n]
    t0 = start + width * np.arange(n, dtype=np.int64)
    length_s = np.clip(np.minimum(t0 + width, end_ns) - t0, 0, None) / 1e9
    fields = {name: sums[i] for i, name in enumerate(FIELDS)}
    steps = fields["steps"]

    def ratio(num: np.ndarray, den: np.ndarray, scale: float = 1.0) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num * scale / den, np.nan)  # NaN: nothing was counted

    if peak_total_flops is None or not acc_has_flops(fields["flops"]):
        mfu = np.full(n, np.nan)
    else:
        mfu = ratio(fields["flops"] * rank_scale, length_s * peak_total_flops)
    return WindowSeries(
        width,
        {
            "t_start_ns": t0,
            "steps": steps,
            "step_starts": fields["step_starts"].astype(np.int64),  # int() of each: whole counts
            "step_ms": ratio(fields["step_ns"], steps, 1e-6),
            "data_ms": ratio(fields["data_ns"], steps, 1e-6),
            "forward_ms": ratio(fields["forward_ns"], steps, 1e-6),
            "backward_ms": ratio(fields["backward_ns"], steps, 1e-6),
            "optimizer_ms": ratio(fields["optimizer_ns"], steps, 1e-6),
            "comm_ms": ratio(fields["comm_ns"], steps, 1e-6),
            "host_ms": ratio(fields["host_ns"], steps, 1e-6),
            "tokens_per_s": ratio(fields["tokens"] * rank_scale, length_s),
            "samples_per_s": ratio(fields["samples"] * rank_scale, length_s),
            "mfu": mfu,
            "mem_allocated_bytes": ratio(fields["mem_allocated_sum"], fields["mem_rows"]),
            "mem_reserved_bytes": ratio(fields["mem_reserved_sum"], fields["mem_rows"]),
            "mem_peak_bytes": np.where(peak >= 0, peak, np.nan),  # -1: no memory row
            "gpu_util_pct": ratio(fields["gpu_util_sum"], fields["gpu_util_samples"]),
            "alloc_retries": fields["alloc_retries"].astype(np.int64),
        },
    )


def acc_has_flops(flops: np.ndarray) -> bool:
    return bool(np.any(flops > 0))

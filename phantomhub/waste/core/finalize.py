"""From a finished accumulator to the Analysis: idle time, money, MFU, diagnostics, explanations.

Billed GPU-seconds B = gpu_count x (end - allocation_start). Each reporting rank stands for
gpu_count / ranks_reporting GPUs (when fewer ranks report than world_size, the missing ones are
assumed to look like the average reporting rank), and on each rank's clock every nanosecond of
[allocation_start, end) is in exactly one place: a step category, a phase, or idle (startup before
its first step, teardown after its last, gap in between). So the categories sum to B exactly.

Dollars are exact rationals per price piece; the cost is rounded to cents once, and the cents are
split over the categories by largest remainder, so they sum to the cost to the cent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from phantomhub.waste.core.accumulator import _SUM_KEYS, RankState, RankTotals, RunAccumulator
from phantomhub.waste.core.diagnostics import (
    host_diagnostics,
    memory_diagnostics,
    stragglers_found,
    window_series,
)
from phantomhub.waste.core.evidence import NO_REFERENCES, Recoverable, References, RunProfile, assess
from phantomhub.waste.core.inputs import CATEGORIES, STEP_CATEGORIES, RunConfig
from phantomhub.waste.core.ledger import LOST_CAUSES, Ledger, ledger_build
from phantomhub.waste.core.money import cents_allocate, cents_round
from phantomhub.waste.core.result import (
    Analysis,
    CategoryFigure,
    Explained,
    HostDiagnostics,
    IdleFigure,
    LostCause,
    LostWork,
    MemoryDiagnostics,
    RankFigure,
    Straggler,
)
from phantomhub.waste.core.stragglers import StragglerCounters

HOURS_PER_MONTH = 730  # 8,760 h / 12: the usual cloud-billing month
# Units of the counterfactuals' inputs whose names imply none (evidence.py).
_EVIDENCE_UNITS = {"reference_ms_per_step": "ms/step", "run_ms_per_step": "ms/step",
                   "run_mfu": "ratio", "reference_mfu": "ratio", "cap": "ratio"}  # fmt: skip


@dataclass(frozen=True)
class _Slots:
    """The ranks that reported steps (in rank order), their totals, and the rank slots the GPUs
    are split over: each reporting rank, or one virtual rank standing for every GPU of a run
    without step rows (all of it idle)."""

    reporting: list[RankState]
    totals: RankTotals
    slots: list[RankState | None]
    gpu_per_slot: Fraction
    ns_num: int  # rank-ns x ns_num / ns_den = GPU-seconds
    ns_den: int

    @property
    def n_rep(self) -> int:
        return len(self.reporting)

    def gpu_seconds(self, ns: int) -> float:
        """GPU-seconds of ``ns`` rank-nanoseconds. int / int true division is correctly rounded:
        the same float as float(Fraction(...)), without building a Fraction per figure (a
        1,024-rank run has thousands)."""
        return ns * self.ns_num / self.ns_den


@dataclass(frozen=True)
class _Money:
    """The run's time and money by category and idle cause: rank-nanoseconds, exact dollars, and
    whole cents that add up to the cost."""

    book: Ledger
    cat_ns: dict[str, int]
    cat_usd: dict[str, Fraction]
    cost_cents: int
    cat_cents: dict[str, int]
    idle_labels: list[str]
    idle_cents: dict[str, int]


@dataclass(frozen=True)
class _Efficiency:
    """FLOPs, MFU over billed, step and compute time, and throughput (None where unknown)."""

    span_s: float
    rank_scale: float  # world_size / ranks_reporting (0 without reporting ranks)
    peak: float | None
    peak_rank: float | None
    flops: float
    flops_known: bool
    achieved: float | None
    mfu: float | None
    mfu_step: float | None
    mfu_compute: float | None
    step_s: float
    compute_s: float
    tokens: int | None  # None: no rank reported tokens
    samples: int | None
    tokens_per_s: float | None
    samples_per_s: float | None


@dataclass(frozen=True)
class _RunFigures:
    """What the run-wide explanations read: the configuration, the span, the money, the
    efficiency and the category figures with their counterfactuals."""

    cfg: RunConfig
    end_ns: int
    n_rep: int
    money: _Money
    eff: _Efficiency
    categories: tuple[CategoryFigure, ...]
    recov: Mapping[str, Recoverable]
    recoverable_usd: float
    run_hours: float
    usd_per_month: float | None


def build_analysis(
    acc: RunAccumulator,
    *,
    end_ns: int,
    recoverability: Mapping[str, float],
    oom_count: int,
    refs: References = NO_REFERENCES,
    dropped_rows: Mapping[str, int] | None = None,
    extra_warnings: tuple[str, ...] = (),
) -> Analysis:
    """The Analysis of a finished accumulator at ``end_ns``: money, efficiency, recoverable
    dollars, per-rank figures, diagnostics and the explanation of every figure."""
    cfg = acc.config
    start = cfg.allocation_start_ns
    span_ns = end_ns - start
    s = _reporting_slots(acc)
    money = _money(acc, end_ns, s)
    billed = cfg.gpu_count * span_ns / 1e9
    eff = _efficiency(cfg, s.totals, s.n_rep, span_ns)
    counters_of = acc.stragglers
    stragglers = stragglers_found(s.reporting, counters_of, float(s.gpu_per_slot), _straggler_rates(money, s.gpu_per_slot))
    profile = _profile(s.n_rep, s.totals, money.book.total_ns, eff.mfu_compute, cfg)
    recov, idle_recov = _recoverable(acc, s.n_rep, money, eff, stragglers, profile, refs, recoverability)
    categories = _category_figures(s, money, billed, recoverability, recov)
    idle = _idle_figures(s, money, idle_recov)
    lost = _lost_work(s, money)
    ranks = _rank_figures(s, money.book, counters_of, eff.peak_rank)
    run_hours = span_ns / 3.6e12
    recoverable_usd = sum(c.recoverable_cents for c in categories) / 100
    warnings = _warnings(acc, s.reporting, s.totals, money.book.unpriced_ns, eff.mfu_step)
    memory = memory_diagnostics(s.reporting, cfg.gpu_memory_bytes, oom_count, s.totals)
    host = host_diagnostics(s.reporting, acc.hosts, s.totals)
    usd_per_month = money.cost_cents / 100 / run_hours * HOURS_PER_MONTH if run_hours > 0 else None
    figures = _RunFigures(cfg, end_ns, s.n_rep, money, eff, categories, recov, recoverable_usd, run_hours, usd_per_month)
    explain = {**_explanations(acc, figures, s.totals, idle, memory, host, stragglers, counters_of), **_explain_lost(lost, money)}
    return Analysis(
        allocation_start_ns=start,
        end_ns=end_ns,
        gpu_count=cfg.gpu_count,
        world_size=cfg.world_size,
        ranks_reporting=s.n_rep,
        steps=s.totals.sums["rows"],
        billed_gpu_seconds=billed,
        cost_cents=money.cost_cents,
        unpriced_gpu_seconds=cfg.gpu_count * money.book.unpriced_ns / 1e9,
        categories=categories,
        idle=idle,
        waste_cents=money.cost_cents - money.cat_cents["useful_compute"],
        recoverable_usd=recoverable_usd,
        recoverable_low_usd=sum(c.recoverable_low_cents for c in categories) / 100,
        recoverable_high_usd=sum(c.recoverable_high_cents for c in categories) / 100,
        recoverability=dict(recoverability),
        target_mfu=cfg.target_mfu,
        dtype=cfg.dtype,
        peak_flops_per_gpu=eff.peak,
        peak_known=eff.peak is not None,
        flops_known=eff.flops_known,
        achieved_flops_per_gpu=eff.achieved,
        mfu=eff.mfu,
        mfu_step_time=eff.mfu_step,
        mfu_compute=eff.mfu_compute,
        tokens_per_s=eff.tokens_per_s,
        samples_per_s=eff.samples_per_s,
        run_hours=run_hours,
        usd_per_month_at_run_rate=usd_per_month,
        ranks=ranks,
        stragglers=stragglers,
        memory=memory,
        host=host,
        windows=window_series(
            acc,
            end_ns,
            rank_scale=eff.rank_scale,
            peak_total_flops=eff.peak * cfg.gpu_count if eff.peak is not None else None,
        ),
        explain=explain,
        warnings=(*warnings, *_dropped_warnings(dropped_rows or {}), *extra_warnings),
        profile=profile,
        dropped_rows=dict(dropped_rows or {}),
        lost=lost,
    )


def _reporting_slots(acc: RunAccumulator) -> _Slots:
    """The ranks with at least one step row, in rank order, and the GPUs each slot stands for."""
    table = acc.table
    rows = np.flatnonzero(table.sums[:, _SUM_KEYS.index("rows")] > 0)
    reporting = table.states(rows[np.argsort(table.rank[rows], kind="stable")])
    slots: list[RankState | None] = list(reporting) if reporting else [None]
    gpu_per_slot = Fraction(acc.config.gpu_count, len(slots))
    return _Slots(
        reporting, RankTotals.of(reporting), slots, gpu_per_slot, gpu_per_slot.numerator, gpu_per_slot.denominator * 10**9
    )


def _money(acc: RunAccumulator, end_ns: int, s: _Slots) -> _Money:
    """The ledger summed by category; the cost rounded to cents once, and its cents split over
    the categories, then idle's over its causes, by largest remainder (money.py)."""
    book = ledger_build(acc, end_ns, s.slots, s.gpu_per_slot)
    total_ns, usd_exact = book.total_ns, book.usd_exact
    idle_labels = [lbl for lbl in book.labels if lbl not in STEP_CATEGORIES]

    def cat_of(label: str) -> str:
        return label if label in STEP_CATEGORIES else "idle"

    cat_ns = {c: sum(ns for lbl, ns in total_ns.items() if cat_of(lbl) == c) for c in CATEGORIES}
    cat_usd = {c: sum((u for lbl, u in usd_exact.items() if cat_of(lbl) == c), Fraction(0)) for c in CATEGORIES}
    if sum(cat_usd.values()) != book.cost_exact:
        raise RuntimeError("category dollars do not add up to the run's cost")
    cost_cents = cents_round(book.cost_exact)
    cat_cents = cents_allocate(cost_cents, cat_usd)
    idle_cents = cents_allocate(cat_cents["idle"], {lbl: usd_exact[lbl] for lbl in idle_labels})
    return _Money(book, cat_ns, cat_usd, cost_cents, cat_cents, idle_labels, idle_cents)


def _efficiency(cfg: RunConfig, totals: RankTotals, n_rep: int, span_ns: int) -> _Efficiency:
    """FLOPs and MFU three ways, and tokens and samples per second, scaled from the reporting
    ranks to the world size."""
    sums = totals.sums
    rank_scale = cfg.world_size / n_rep if n_rep else 0.0
    flops = totals.flops
    flops_known = sums["flops_steps"] > 0
    peak = cfg.peak_flops_per_gpu
    span_s = span_ns / 1e9
    achieved = flops * rank_scale / (cfg.gpu_count * span_s) if flops_known and span_s > 0 else None
    step_s = sums["nonphase_ns"] / 1e9
    compute_s = (sums["useful_ns"] + sums["inefficiency_ns"]) / 1e9
    peak_rank = peak * cfg.gpus_per_rank if peak is not None else None
    mfu = achieved / peak if achieved is not None and peak is not None else None
    mfu_step = flops / (peak_rank * step_s) if flops_known and peak_rank and step_s > 0 else None
    mfu_compute = flops / (peak_rank * compute_s) if flops_known and peak_rank and compute_s > 0 else None
    tokens = sums["tokens"] if "tokens" in totals.columns else None
    samples = sums["samples"] if "samples" in totals.columns else None
    return _Efficiency(
        span_s=span_s,
        rank_scale=rank_scale,
        peak=peak,
        peak_rank=peak_rank,
        flops=flops,
        flops_known=flops_known,
        achieved=achieved,
        mfu=mfu,
        mfu_step=mfu_step,
        mfu_compute=mfu_compute,
        step_s=step_s,
        compute_s=compute_s,
        tokens=tokens,
        samples=samples,
        tokens_per_s=tokens * rank_scale / span_s if tokens is not None and span_s > 0 else None,
        samples_per_s=samples * rank_scale / span_s if samples is not None and span_s > 0 else None,
    )


def _straggler_rates(money: _Money, gpu_per_slot: Fraction) -> dict[str, float]:
    """Each category's dollars per GPU-ns: what a straggler's caused wait and own excess cost."""
    cat_cents, cat_ns = money.cat_cents, money.cat_ns
    return {
        c: float(cat_cents[c] / 100 / (cat_ns[c] * gpu_per_slot)) if cat_ns[c] else 0.0
        for c in ("comm_exposed", "data_stall", "compute_inefficiency", "host_overhead")
    }


def _recoverable(
    acc: RunAccumulator,
    n_rep: int,
    money: _Money,
    eff: _Efficiency,
    stragglers: tuple[Straggler, ...],
    profile: RunProfile,
    refs: References,
    recoverability: Mapping[str, float],
) -> tuple[dict[str, Recoverable], dict[str, Recoverable]]:
    """Recoverable cents per category and per idle cause: counterfactuals against demonstrated
    references (evidence.py), the stragglers' measured cost among them."""
    return assess(
        windows=acc.windows,
        start_ns=acc.config.allocation_start_ns,
        ranks=n_rep,
        peak_flops_per_rank=eff.peak_rank,
        cat_cents=money.cat_cents,
        idle_cents={lbl: money.idle_cents[lbl] for lbl in money.idle_labels},
        profile=profile,
        straggler_cents=math.floor(sum(st.caused_wait_usd for st in stragglers) * 100 + 1e-9),
        straggler_own_cents={
            c: math.floor(sum(st.own_excess_usd.get(c, 0.0) for st in stragglers) * 100 + 1e-9)
            for c in ("data_stall", "compute_inefficiency", "host_overhead")
        },
        target_mfu=acc.config.target_mfu,
        refs=refs,
        caps=recoverability,
    )


def _category_figures(
    s: _Slots, money: _Money, billed: float, recoverability: Mapping[str, float], recov: Mapping[str, Recoverable]
) -> tuple[CategoryFigure, ...]:
    """Each category's GPU-seconds, cents, share of billed time and recoverable cents."""
    gpu_s = s.gpu_seconds
    return tuple(
        CategoryFigure(
            category=c,
            gpu_seconds=gpu_s(money.cat_ns[c]),
            usd_cents=money.cat_cents[c],
            share=(gpu_s(money.cat_ns[c]) / billed) if billed else 0.0,
            cap=recoverability[c],
            recoverable_cents=recov[c].cents,
            recoverable_low_cents=recov[c].low_cents,
            recoverable_high_cents=recov[c].high_cents,
            evidence=recov[c].evidence,
        )
        for c in CATEGORIES
    )


def _idle_figures(s: _Slots, money: _Money, idle_recov: Mapping[str, Recoverable]) -> tuple[IdleFigure, ...]:
    """Each idle cause's GPU-seconds, cents and recoverable cents."""
    return tuple(
        IdleFigure(
            label=lbl,
            gpu_seconds=s.gpu_seconds(money.book.total_ns[lbl]),
            usd_cents=money.idle_cents[lbl],
            recoverable_cents=idle_recov[lbl].cents,
            evidence=idle_recov[lbl].evidence,
        )
        for lbl in money.idle_labels
    )


def _lost_work(s: _Slots, money: _Money) -> LostWork:
    """The attempt's lost work by cause: each cause's labels' GPU-seconds, and their cents in
    idle's largest-remainder split (so causes, idle and the cost add up exactly)."""
    causes = []
    for cause, labels in LOST_CAUSES.items():
        present = [lbl for lbl in labels if lbl in money.idle_cents]
        ns = sum(money.book.total_ns[lbl] for lbl in present)
        causes.append(LostCause(cause, labels, s.gpu_seconds(ns), sum(money.idle_cents[lbl] for lbl in present)))
    sides = money.book.restart_sides
    restart = next(c for c in causes if c.cause == "restart")
    return LostWork(
        causes=tuple(causes),
        gpu_seconds=sum(c.gpu_seconds for c in causes),
        usd_cents=sum(c.usd_cents for c in causes),
        restart_gpu_seconds={k: s.gpu_seconds(ns) for k, (ns, _) in sides.items()},
        restart_cents=cents_allocate(restart.usd_cents, {k: usd for k, (_, usd) in sides.items()}),
    )


def _explain_lost(lost: LostWork, money: _Money) -> dict[str, Explained]:
    """The lost work's dollars: each cause's labels' share of idle's cents, and their sum."""
    out: dict[str, Explained] = {}
    for c in lost.causes:
        out[f"lost.{c.cause}.usd"] = Explained(
            c.usd,
            "USD",
            "Σ over the cause's idle labels (" + ", ".join(c.labels) + ") of their largest-remainder share of "
            "the idle category's cents",
            {
                **{f"{lbl}_usd": money.idle_cents.get(lbl, 0) / 100 for lbl in c.labels},
                "idle_cents": money.cat_cents["idle"],
                "gpu_seconds": c.gpu_seconds,
            },
        )
    out["lost_usd"] = Explained(
        lost.usd,
        "USD",
        "Σ lost causes' usd (rework + restart + checkpoint): work a job's attempts lost, part of idle",
        {f"{c.cause}_usd": c.usd for c in lost.causes},
    )
    return out


def _rank_figures(
    s: _Slots, book: Ledger, counters_of: Mapping[int, StragglerCounters], peak_rank: float | None
) -> tuple[RankFigure, ...]:
    """Each reporting rank's categories, means per live step, MFU and straggler counters."""
    gpu_s = s.gpu_seconds
    ranks = []
    for rs, ns_row, usd_row, lost_ns, lost_usd in zip(
        s.slots, book.rank_ns, book.rank_usd, book.rank_lost_ns, book.rank_lost_usd, strict=True
    ):
        if rs is None:
            continue
        sums = rs.sums
        live = sums["live_steps"]
        compute_ns = sums["useful_ns"] + sums["inefficiency_ns"]
        counters = counters_of.get(rs.rank)
        ranks.append(
            RankFigure(
                rank=rs.rank,
                host=rs.host,
                steps=sums["rows"],
                gpu_seconds=dict(zip(CATEGORIES, map(gpu_s, ns_row), strict=True)),
                usd=dict(zip(CATEGORIES, usd_row, strict=True)),
                step_ns_mean=sums["nonphase_ns"] / live if live else None,
                compute_ns_mean=compute_ns / live if live else None,
                data_ns_mean=sums["data_ns"] / live if live else None,
                comm_ns_mean=sums["comm_ns"] / live if live else None,
                host_ns_mean=sums["host_ns"] / live if live else None,
                mfu_step_time=(
                    rs.flops / (peak_rank * sums["nonphase_ns"] / 1e9)
                    if peak_rank and sums["flops_steps"] and sums["nonphase_ns"]
                    else None
                ),
                tokens=sums["tokens"],
                flops=rs.flops,
                mem_peak_bytes=rs.mem_peak_max if rs.mem_peak_max >= 0 else None,
                slow_step_share=(counters.slow_steps / counters.aligned_steps if counters and counters.aligned_steps else None),
                caused_wait_gpu_seconds=(gpu_s(counters.caused_wait_ns) if counters is not None else 0.0),
                lost_gpu_seconds={k: gpu_s(v) for k, v in lost_ns.items()},
                lost_usd=dict(lost_usd),
            )
        )
    return tuple(ranks)


def _profile(n: int, totals: RankTotals, total_ns: Mapping[str, int], mfu_compute: float | None, cfg: RunConfig) -> RunProfile:
    """Per-rank step signature, per-step figures and the job's shape: what this run shows its
    future peers (``totals`` over its ``n`` reporting ranks)."""
    sums = totals.sums
    live = sums["live_steps"]
    flops_steps = sums["flops_steps"]

    def per_step(total: float, seen: bool = True) -> float | None:
        return total / live if live and seen else None

    def per_rank_s(label: str) -> float | None:
        return total_ns.get(label, 0) / n / 1e9 if n else None

    return RunProfile(
        live_steps=live,
        ranks=n,
        flops_per_step=totals.flops / flops_steps if flops_steps else None,
        tokens_per_step=per_step(sums["tokens"], "tokens" in totals.columns),
        samples_per_step=per_step(sums["samples"], "samples" in totals.columns),
        data_ns_per_step=per_step(sums["data_ns"]),
        comm_ns_per_step=per_step(sums["comm_ns"]),
        host_ns_per_step=per_step(sums["host_ns"]),
        gap_ns_per_step=per_step(total_ns.get("gap", 0)),
        mfu_compute=mfu_compute,
        # A restart's start-up (or a failed attempt's tear-down) is no reference for a run's own.
        startup_s=None if cfg.restart_before_first_step else per_rank_s("startup"),
        teardown_s=None if cfg.restart_after_last_step else per_rank_s("teardown"),
        world_size=cfg.world_size,
        gpu_count=cfg.gpu_count,
        dtype=cfg.dtype or None,
    )


def _dropped_warnings(dropped: Mapping[str, int]) -> list[str]:
    """What the rows left out at ingest mean for the figures."""
    out = []
    if dropped.get("non_rising_start"):
        out.append(
            f"{dropped['non_rising_start']:,} step row(s) were left out because they started no later than the "
            "rank's previous row (a clock jump or a restart reusing step numbers): their time counts as idle"
        )
    if dropped.get("reused_step"):
        out.append(
            f"{dropped['reused_step']:,} step row(s) were refused because their step number was already stored "
            "with another start time (a restart that numbered steps from 0 again): their time counts as idle"
        )
    return out


def _warnings(
    acc: RunAccumulator,
    reporting: list[RankState],
    totals: RankTotals,
    unpriced_ns: int,
    mfu_step: float | None,
) -> list[str]:
    """What the reader should know about the figures: ranks missing, FLOPs or peak unknown or
    implausible, stages not reported, rows cut, time without a price."""
    cfg = acc.config
    flops_steps, live_steps = totals.sums["flops_steps"], totals.sums["live_steps"]
    out: list[str] = []
    n_rep = len(reporting)
    if n_rep == 0:
        out.append("no step rows: every billed GPU-second is idle (no_steps)")
    elif n_rep != cfg.world_size:
        out.append(
            f"{n_rep} of {cfg.world_size} ranks reported steps: each reporting rank stands for {cfg.gpu_count / n_rep:g} GPUs"
        )
    if n_rep and cfg.gpu_count < cfg.world_size:
        out.append(
            f"gpu_count {cfg.gpu_count} is below the {cfg.world_size} ranks: each rank is taken to drive "
            f"{cfg.gpus_per_rank:g} GPU (check gpu_count: usually one GPU per rank)"
        )
    if cfg.peak_flops_per_gpu is None:
        out.append(
            "peak FLOP/s unknown (GPU model or dtype not in the catalog): MFU is unknown and all "
            "compute time counts as useful_compute"
        )
    zero_flops = totals.sums["zero_flops_steps"]
    if n_rep and flops_steps == 0 and zero_flops:
        out.append(
            f"FLOPs were reported as 0 on {'every' if zero_flops >= live_steps else f'{zero_flops:,}'} step(s) (a FLOP "
            "counter that recognised no operation?): treated as not measured, so MFU is unknown and compute "
            "counts as useful compute"
        )
    elif n_rep and flops_steps == 0:
        out.append("no FLOPs reported: MFU is unknown and all compute counts as useful_compute")
    elif zero_flops:
        out.append(f"FLOPs were reported as 0 on {zero_flops:,} step(s): those steps are treated as not measured")
    elif 0 < flops_steps < live_steps:
        out.append(
            f"FLOPs reported for {flops_steps} of {live_steps} steps: steps without FLOPs count "
            "as useful_compute and MFU is understated"
        )
    for stage in ("data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns"):
        if stage in totals.common:
            continue
        lacking = [rs.rank for rs in reporting if stage not in rs.columns]
        if lacking:
            out.append(f"{stage} not reported by {len(lacking)} rank(s): that time shows as host_overhead")
    over_peak = totals.sums["over_peak_steps"]
    if over_peak or (mfu_step is not None and mfu_step > 1):
        mfu_text = "unknown" if mfu_step is None else f"{mfu_step:.3g}"
        out.append(
            f"reported FLOPs exceed the GPU's dense peak: {over_peak} of {live_steps} step(s) claim more "
            "FLOP/s than peak_flops_per_gpu x gpus_per_rank over their step time (MFU over step time "
            f"{mfu_text}), which no GPU can do: check flops or dtype"
        )
    overrun = totals.sums["overrun_steps"]
    if overrun:
        out.append(f"{overrun} step(s) had stage times longer than the step: scaled down to fit")
    if unpriced_ns:
        out.append(f"{cfg.gpu_count * unpriced_ns / 3.6e12:.3f} GPU-hours fall outside every price segment and are counted at $0")
    return out


def _explanations(
    acc: RunAccumulator,
    f: _RunFigures,
    totals: RankTotals,
    idle: tuple[IdleFigure, ...],
    memory: MemoryDiagnostics,
    host: HostDiagnostics,
    stragglers: tuple[Straggler, ...],
    counters_of: Mapping[int, StragglerCounters],
) -> dict[str, Explained]:
    """Every figure's formula and inputs, keyed by where the figure is in the Analysis."""
    return {
        **_explain_cost(f),
        **_explain_categories(f),
        **_explain_outcome(f),
        **_explain_efficiency(f),
        **_explain_run_rate(f),
        **_explain_throughput(f),
        **_explain_idle(idle, f.money),
        **_explain_memory(memory, f.n_rep, totals),
        **_explain_gpu_util(host.gpu_util_pct_mean, acc),
        **_explain_stragglers(f, stragglers, counters_of),
    }


def _explain_cost(f: _RunFigures) -> dict[str, Explained]:
    """Billed GPU-seconds and the cost, segment by segment of the price."""
    cfg, start = f.cfg, f.cfg.allocation_start_ns
    seg_inputs: dict[str, float | int | str | None] = {"gpu_count": cfg.gpu_count}
    for i, (lo, hi, price) in enumerate(f.money.book.pieces):
        seg_inputs[f"segment_{i}_seconds"] = max(hi - lo, 0) / 1e9
        seg_inputs[f"segment_{i}_usd_per_gpu_hour"] = None if price is None else float(price)
    seg_inputs["exact_usd"] = float(f.money.book.cost_exact)
    return {
        "billed_gpu_seconds": Explained(
            cfg.gpu_count * (f.end_ns - start) / 1e9,
            "GPU-s",
            "gpu_count * (end_ns - allocation_start_ns) / 1e9",
            {"gpu_count": cfg.gpu_count, "end_ns": f.end_ns, "allocation_start_ns": start},
        ),
        "cost_usd": Explained(
            f.money.cost_cents / 100,
            "USD",
            "round_half_up(Σ_segments gpu_count * seconds_in_segment * usd_per_gpu_hour / 3600, cents)",
            seg_inputs,
        ),
    }


def _explain_categories(f: _RunFigures) -> dict[str, Explained]:
    """Each category's GPU-seconds, dollars and recoverable dollars."""
    out: dict[str, Explained] = {}
    for fig in f.categories:
        c = fig.category
        out[f"categories.{c}.gpu_seconds"] = Explained(
            fig.gpu_seconds,
            "GPU-s",
            "Σ_ranks " + c + "_ns * (gpu_count / ranks_reporting) / 1e9",
            {f"{c}_rank_ns": f.money.cat_ns[c], "gpu_count": f.cfg.gpu_count, "ranks_reporting": max(f.n_rep, 1)},
        )
        out[f"categories.{c}.usd"] = Explained(
            fig.usd,
            "USD",
            "largest-remainder share of cost_cents in proportion to exact_usd "
            "(= Σ_segments GPU-seconds in segment * usd_per_gpu_hour / 3600)",
            {"exact_usd": float(f.money.cat_usd[c]), "cost_cents": f.money.cost_cents},
        )
        rec = f.recov[c]
        out[f"categories.{c}.recoverable_usd"] = Explained(
            fig.recoverable_usd,
            "USD",
            (rec.formula or "0: no evidence") + f"; evidence: {rec.evidence.summary}",
            dict(rec.inputs),
            {k: u for k, u in _EVIDENCE_UNITS.items() if k in rec.inputs},
        )
    return out


def _explain_outcome(f: _RunFigures) -> dict[str, Explained]:
    """What the run recovers and wastes in total, and its useful compute."""
    cfg, cost_cents = f.cfg, f.money.cost_cents
    useful = next(fig for fig in f.categories if fig.category == "useful_compute")
    return {
        "recoverable_usd": Explained(
            f.recoverable_usd,
            "USD",
            "Σ_categories recoverable_usd (each a counterfactual against a demonstrated reference)",
            {f"{fig.category}_recoverable_usd": fig.recoverable_usd for fig in f.categories},
        ),
        "waste_usd": Explained(
            (cost_cents - useful.usd_cents) / 100,
            "USD",
            "cost_usd - useful_compute usd",
            {"cost_usd": cost_cents / 100, "useful_compute_usd": useful.usd},
        ),
        "waste_share": Explained(
            (cost_cents - useful.usd_cents) / cost_cents if cost_cents else 0.0,
            "ratio",
            "waste_usd / cost_usd (0 when the run cost nothing)",
            {"waste_usd": (cost_cents - useful.usd_cents) / 100, "cost_usd": cost_cents / 100},
        ),
        "useful_compute": Explained(
            useful.gpu_seconds,
            "GPU-s",
            "Σ_steps min(compute_ns, flops / (target_mfu * peak_flops_per_gpu * gpus_per_rank)) "
            "* (gpu_count / ranks_reporting) / 1e9, with each step's flops credited in proportion to its "
            "measured work kept after cuts (all of it unless the step was cut)",
            {
                "target_mfu": cfg.target_mfu,
                "peak_flops_per_gpu": cfg.peak_flops_per_gpu,
                "gpus_per_rank": cfg.gpus_per_rank,
            },
        ),
    }


def _explain_efficiency(f: _RunFigures) -> dict[str, Explained]:
    """Achieved FLOP/s and MFU over billed, step and compute time."""
    cfg, eff = f.cfg, f.eff
    return {
        "achieved_flops_per_gpu": Explained(
            eff.achieved,
            "FLOP/s",
            "Σ flops * (world_size / ranks_reporting) / (gpu_count * billed seconds)",
            {
                "flops_reported": eff.flops,
                "world_size": cfg.world_size,
                "ranks_reporting": f.n_rep,
                "gpu_count": cfg.gpu_count,
                "billed_seconds": (f.end_ns - cfg.allocation_start_ns) / 1e9,
            },
        ),
        "mfu": Explained(
            eff.mfu,
            "ratio",
            "achieved_flops_per_gpu / peak_flops_per_gpu (dense, at the run's dtype)",
            {
                "achieved_flops_per_gpu": eff.achieved,
                "peak_flops_per_gpu": cfg.peak_flops_per_gpu,
                "dtype": cfg.dtype,
            },
        ),
        "mfu_step_time": Explained(
            eff.mfu_step,
            "ratio",
            "Σ flops / (peak_flops_per_gpu * gpus_per_rank * Σ step seconds)",
            {
                "flops_reported": eff.flops,
                "peak_flops_per_gpu": cfg.peak_flops_per_gpu,
                "gpus_per_rank": cfg.gpus_per_rank,
                "step_seconds": eff.step_s,
            },
        ),
        "mfu_compute": Explained(
            eff.mfu_compute,
            "ratio",
            "Σ flops / (peak_flops_per_gpu * gpus_per_rank * Σ compute seconds); compute = forward + "
            "backward + optimizer as measured, so timers that miss GPU work can push it above 1",
            {
                "flops_reported": eff.flops,
                "peak_flops_per_gpu": cfg.peak_flops_per_gpu,
                "gpus_per_rank": cfg.gpus_per_rank,
                "compute_seconds": eff.compute_s,
            },
        ),
    }


def _explain_run_rate(f: _RunFigures) -> dict[str, Explained]:
    """GPU-hours, run hours, the monthly cost at the run's rate, and the unpriced time."""
    gpu_count, start_ns, end_ns = f.cfg.gpu_count, f.cfg.allocation_start_ns, f.end_ns
    unpriced_ns = f.money.book.unpriced_ns
    billed = gpu_count * (end_ns - start_ns) / 1e9
    return {
        "gpu_hours": Explained(
            billed / 3600,
            "GPU-h",
            "billed_gpu_seconds / 3600 = gpu_count * (end_ns - allocation_start_ns) / 3.6e12",
            {"billed_gpu_seconds": billed, "gpu_count": gpu_count},
        ),
        "run_hours": Explained(
            f.run_hours,
            "h",
            "(end_ns - allocation_start_ns) / 3.6e12",
            {"end_ns": end_ns, "allocation_start_ns": start_ns},
        ),
        "usd_per_month_at_run_rate": Explained(
            f.usd_per_month,
            "USD/month",
            "cost_usd / run_hours * hours_per_month: what the run would cost over a month at its "
            "current rate (None for a zero-length run)",
            {"cost_usd": f.money.cost_cents / 100, "run_hours": f.run_hours, "hours_per_month": HOURS_PER_MONTH},
        ),
        "unpriced_gpu_seconds": Explained(
            gpu_count * unpriced_ns / 1e9,
            "GPU-s",
            "gpu_count * unpriced_ns / 1e9: billed time no price segment covers, counted at $0",
            {"gpu_count": gpu_count, "unpriced_ns": unpriced_ns},
        ),
    }


def _explain_throughput(f: _RunFigures) -> dict[str, Explained]:
    """Tokens and samples per second, for those the ranks reported."""
    eff = f.eff
    out: dict[str, Explained] = {}
    for name, total, rate in (("tokens", eff.tokens, eff.tokens_per_s), ("samples", eff.samples, eff.samples_per_s)):
        if total is None:
            continue
        out[f"{name}_per_s"] = Explained(
            rate,
            f"{name}/s",
            f"Σ {name} * (world_size / ranks_reporting) / billed seconds",
            {name: total, "world_size": f.cfg.world_size, "ranks_reporting": f.n_rep, "billed_seconds": eff.span_s},
        )
    return out


def _explain_idle(idle: tuple[IdleFigure, ...], money: _Money) -> dict[str, Explained]:
    """Each idle cause's dollars: its share of the idle category's cents."""
    return {
        f"idle.{fig.label}.usd": Explained(
            fig.usd_cents / 100,
            "USD",
            "largest-remainder share of the idle category's cents in proportion to exact_usd "
            "(= Σ_segments GPU-seconds of this cause in segment * usd_per_gpu_hour / 3600)",
            {
                "exact_usd": float(money.book.usd_exact[fig.label]),
                "idle_cents": money.cat_cents["idle"],
                "gpu_seconds": fig.gpu_seconds,
            },
        )
        for fig in idle
    }


def _explain_stragglers(
    f: _RunFigures, stragglers: tuple[Straggler, ...], counters_of: Mapping[int, StragglerCounters]
) -> dict[str, Explained]:
    """Each straggler's caused wait (GPU-seconds and dollars) and its own excess dollars."""
    comm_fig = next(c for c in f.categories if c.category == "comm_exposed")
    out: dict[str, Explained] = {}
    for st in stragglers:
        counters = counters_of[st.rank]
        out[f"stragglers.{st.rank}.caused_wait_gpu_seconds"] = Explained(
            st.caused_wait_gpu_seconds,
            "GPU-s",
            "caused_wait_rank_ns * (gpu_count / ranks_reporting) / 1e9; caused wait = Σ over straggling "
            "steps where this rank arrived last of the other ranks' min(comm_ns, its arrival - their "
            "arrival), split evenly between ranks arriving last together",
            {
                "caused_wait_rank_ns": counters.caused_wait_ns,
                "gpu_count": f.cfg.gpu_count,
                "ranks_reporting": f.n_rep,
                "blamed_steps": st.blamed_steps,
            },
        )
        out[f"stragglers.{st.rank}.caused_wait_usd"] = Explained(
            st.caused_wait_usd,
            "USD",
            "caused_wait_gpu_seconds * comm_exposed_usd / comm_exposed_gpu_seconds (the run's average "
            "price of a GPU-second of exposed communication)",
            {
                "caused_wait_gpu_seconds": st.caused_wait_gpu_seconds,
                "comm_exposed_usd": comm_fig.usd,
                "comm_exposed_gpu_seconds": comm_fig.gpu_seconds,
                "blamed_steps": st.blamed_steps,
            },
        )
        out[f"stragglers.{st.rank}.own_excess_usd"] = Explained(
            sum(st.own_excess_usd.values()),
            "USD",
            "Σ over data wait, compute and host overhead of max(0, this rank's mean per step - the other ranks' "
            "median per step) * its live steps * (gpu_count / ranks_reporting), each at its category's average "
            "price of a GPU-second: the time this rank itself would not spend without its slowness",
            {
                "lead_per_step_ns": st.lead_ns_mean,
                "own_excess_gpu_seconds": st.own_excess_gpu_seconds,
                **{f"{c}_usd": usd for c, usd in st.own_excess_usd.items()},
            },
        )
    return out


def _explain_memory(mem: MemoryDiagnostics, n_rep: int, totals: RankTotals) -> dict[str, Explained]:
    """The memory diagnostics the run's rows support: fragmentation, peak, headroom, retries, OOMs."""
    out: dict[str, Explained] = {}
    frag_rows = totals.sums["frag_rows"]
    if mem.fragmentation_mean is not None:
        out["memory.fragmentation_mean"] = Explained(
            mem.fragmentation_mean,
            "ratio",
            "Σ_steps (1 - mem_allocated / mem_reserved) / allocator_rows, over the step rows that "
            "report both (clipped to [0, 1])",
            {"fragmentation_sum": totals.frag_sum, "allocator_rows": frag_rows},
            {"fragmentation_sum": "ratio"},
        )
    if mem.peak_bytes_max is not None:
        out["memory.peak_bytes_max"] = Explained(
            mem.peak_bytes_max,
            "bytes",
            "max over ranks and steps of mem_peak (the allocator's peak at step end)",
            {"peak_rank": mem.peak_rank, "memory_rows": totals.sums["mem_rows"]},
        )
    if mem.peak_fraction_of_capacity is not None:
        out["memory.peak_fraction_of_capacity"] = Explained(
            mem.peak_fraction_of_capacity,
            "ratio",
            "peak_bytes_max / capacity_bytes (the GPU's memory from the catalog)",
            {"peak_bytes_max": mem.peak_bytes_max, "capacity_bytes": mem.capacity_bytes},
        )
    if mem.headroom_bytes is not None:
        out["memory.headroom_bytes"] = Explained(
            mem.headroom_bytes,
            "bytes",
            "capacity_bytes - peak_bytes_max",
            {"capacity_bytes": mem.capacity_bytes, "peak_bytes_max": mem.peak_bytes_max},
        )
    rows = totals.sums["rows"]
    if mem.alloc_retries_total is not None:
        out["memory.alloc_retries_total"] = Explained(
            mem.alloc_retries_total,
            "count",
            "Σ over ranks and steps of alloc_retries (each forces a device sync)",
            {"ranks_reporting": n_rep, "steps": rows},
        )
    if mem.alloc_retries_per_1k_steps is not None:
        out["memory.alloc_retries_per_1k_steps"] = Explained(
            mem.alloc_retries_per_1k_steps,
            "per 1k steps",
            "alloc_retries_count * 1000 / steps (step rows over all reporting ranks)",
            {"alloc_retries_count": mem.alloc_retries_total, "steps": rows},
        )
    out["memory.oom_count"] = Explained(
        mem.oom_count,
        "count",
        "OOM events recorded for the run (passed to the model: an OOM usually kills the process before a step row can report it)",
        {"oom_events_count": mem.oom_count},
    )
    return out


def _explain_gpu_util(mean: float | None, acc: RunAccumulator) -> dict[str, Explained]:
    """The hosts' mean GPU utilisation (NVML), when any host sampled it."""
    if mean is None:
        return {}
    hosts = acc.hosts.values()
    return {
        "host.gpu_util_pct_mean": Explained(
            mean,
            "%",
            "Σ gpu_util_pct over every sample of every host / gpu_util_samples (NVML utilisation, "
            "about once a second; busy is not the same as efficient, compare MFU)",
            {
                "gpu_util_sum_pct": sum(h.gpu_util_sum for h in hosts),
                "gpu_util_samples": sum(h.gpu_util_n for h in hosts),
                "hosts_with_samples": sum(1 for h in hosts if h.gpu_util_n),
            },
        )
    }

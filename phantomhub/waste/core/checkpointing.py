"""Checkpoint advice for a job: how often to save, and whether to save asynchronously.

Pure (the standard library and numpy; docs/waste-model.md, "Jobs: rework, restarts and
checkpoints"). The inputs are measured on the job's attempts by the service (waste/jobs.py):

- ``C`` (``checkpoint_s``): seconds a save blocks the job (the mean ``checkpoint`` phase);
- ``R`` (``restart_s``): seconds each failure costs before work resumes (the restart time);
- ``M`` (``mtbf_s``): mean time between failures, in seconds of the job's wall time;
- ``tau0`` (``interval_s``): the current seconds of work between two saves;
- the job's cost rate, USD per wall-second of the whole job (all its GPUs).

**Expected wall time per unit of work** for exponential failures with rate 1/M, saving every τ
seconds of work (Daly 2006, "A higher order estimate of the optimum checkpoint interval for
restart dumps", eq. 13 with the restart time R)::

    W(τ) = M · e^{R/M} · (e^{(τ+C)/M} − 1) / τ        (≥ 1; 1 = no overhead at all)

**Optimum.** Young (1974) / Daly's first-order optimum is ``τ* = sqrt(2·C·M)``. The exact
minimiser of W solves ``dW/dτ = 0``, i.e. ``e^{(τ+C)/M}·(τ/M − 1) + 1 = 0``, whose one root in
(0, M] is ``τ_exact = M·(1 + W₀(−e^{−1−C/M}))`` (W₀: the Lambert function's principal branch);
it is found here by bisection on that equation (the left side rises with τ), independent of R.
For C ≪ M, τ_exact ≈ τ* (to first order in sqrt(C/M)).

**Saving per month.** A month is 730 hours of the job's wall time at today's settings: it does
``730·3600 / W(τ0)`` seconds of work. At the best interval the same work takes ``W(τ_best)`` per
second of work, so::

    saving_usd_per_month = (W(τ0) − W(τ_best)) · cost_rate · 730·3600 / W(τ0)
                         = cost_per_month · (1 − W(τ_best) / W(τ0))

It is ≥ 0 (τ_best minimises W) and 0 when τ0 = τ_best.

**Asynchronous saves.** When the saves block synchronously and ``C / τ0`` exceeds
``ASYNC_THRESHOLD`` (2%), saving asynchronously is advised: only the staging copy ``C'`` still
blocks (measured when the job has asynchronous saves; else assumed ``ASYNC_STAGE_SHARE`` = 10% of
C, and the advice says so). The two savings are a sequence, so no dollar is claimed twice::

    W0 = W(τ0; C)   W1 = W(τ0; C')   W2 = W(τ_best'; C'),  τ_best' the optimum for C'
    async    = cost_per_month · (W0 − W1) / W0
    interval = cost_per_month · (W1 − W2) / W0
    async + interval = cost_per_month · (1 − W2 / W0)

Without a failure rate (too little evidence) there is no interval advice and the asynchronous
saving is the blocking share alone: ``cost_per_month · (C − C') / (τ0 + C)``.

**Cap.** The claimed savings never exceed the job's lost dollars scaled to the month (its
rework, restart and checkpoint dollars over its wall hours × 730): the asynchronous advice is
cut first to fit, then the interval advice to what is left (``capped``).

**Failure rate and minimum evidence.** The job's own failures (attempts that ended other than
``finished``) over its wall time when there are at least ``OWN_MIN_FAILURES`` (2); else the
project's failures per GPU-hour on the same GPU model, times the job's GPU count, when they are
at least ``PROJECT_MIN_FAILURES`` (3) over at least ``PROJECT_MIN_GPU_HOURS`` (100); else none,
and no interval advice (the reason says which evidence was missing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SECONDS_PER_MONTH = 730 * 3600  # the 730-hour month of the recommendations (finalize.HOURS_PER_MONTH)
ASYNC_THRESHOLD = 0.02  # C / τ0 above this: advise asynchronous saves
ASYNC_STAGE_SHARE = 0.10  # assumed blocking share of an asynchronous save when none was measured
OWN_MIN_FAILURES = 2
PROJECT_MIN_FAILURES = 3
PROJECT_MIN_GPU_HOURS = 100.0
CURVE_POINTS = 61
_EXP_MAX = 700.0  # e^x overflows a float past ~709


@dataclass(frozen=True)
class FailureRate:
    """The mean time between failures used for the advice, and where it comes from.

    ``source``: ``own`` (the job's failures over its wall time), ``project`` (the project's
    failures per GPU-hour on the same GPU model, times the job's GPUs) or ``None`` (too little
    evidence: ``reason`` says why, and ``mtbf_s`` is None)."""

    mtbf_s: float | None
    source: str | None
    failures: int
    exposure: float  # wall seconds (own) or GPU-hours (project)
    exposure_unit: str  # "s" or "GPU-h"
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def failure_rate(
    *,
    own_failures: int,
    own_wall_s: float,
    project_failures: int = 0,
    project_gpu_hours: float = 0.0,
    gpu_count: int = 1,
) -> FailureRate:
    """The job's mean time between failures, from its own failures if it has enough, else from
    its project's on the same GPU model (per GPU-hour, scaled by the job's ``gpu_count``)."""
    if own_failures >= OWN_MIN_FAILURES and own_wall_s > 0:
        return FailureRate(
            own_wall_s / own_failures, "own", own_failures, own_wall_s, "s",
            f"{own_failures} failures of this job over {own_wall_s / 3600:,.1f} h of its wall time",
        )  # fmt: skip
    if project_failures >= PROJECT_MIN_FAILURES and project_gpu_hours >= PROJECT_MIN_GPU_HOURS and gpu_count > 0:
        per_gpu_hour = project_failures / project_gpu_hours
        mtbf = 3600.0 / (per_gpu_hour * gpu_count)
        return FailureRate(
            mtbf, "project", project_failures, project_gpu_hours, "GPU-h",
            f"this job has {own_failures} failure(s), fewer than {OWN_MIN_FAILURES}: the project's jobs on this GPU model "
            f"failed {project_failures} times over {project_gpu_hours:,.0f} GPU-hours, times this job's {gpu_count} GPU(s)",
        )  # fmt: skip
    return FailureRate(
        None, None, own_failures, own_wall_s, "s",
        f"too little evidence of how often this job fails: {own_failures} failure(s) of its own (at least "
        f"{OWN_MIN_FAILURES} needed), and the project's jobs on this GPU model {project_failures} over "
        f"{project_gpu_hours:,.0f} GPU-hours (at least {PROJECT_MIN_FAILURES} over {PROJECT_MIN_GPU_HOURS:,.0f} needed)",
    )  # fmt: skip


def wall_per_work(tau: float | np.ndarray, *, checkpoint_s: float, restart_s: float, mtbf_s: float) -> Any:
    """Daly's W(τ) = M·e^{R/M}·(e^{(τ+C)/M} − 1)/τ: expected wall seconds per second of work
    (inf where it overflows; τ must be > 0)."""
    t = np.asarray(tau, dtype=np.float64)
    x = (t + checkpoint_s) / mtbf_s
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out = np.where(
            x + restart_s / mtbf_s < _EXP_MAX,
            mtbf_s * np.exp(np.minimum(restart_s / mtbf_s, _EXP_MAX)) * np.expm1(np.minimum(x, _EXP_MAX)) / t,
            np.inf,
        )
    return float(out) if np.ndim(out) == 0 else out


def young_daly(checkpoint_s: float, mtbf_s: float) -> float:
    """First-order optimum interval τ* = sqrt(2·C·M)."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def optimum_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """The τ > 0 minimising W: the root of e^{(τ+C)/M}·(τ/M − 1) + 1 = 0 in (0, M], by bisection
    (written with expm1 so a tiny C/M keeps its digits). R does not move it. C = 0 gives 0."""
    c = checkpoint_s / mtbf_s
    if c <= 0:
        return 0.0

    def f(x: float) -> float:  # e^{x+c}(x−1) + 1, rising in x > 0: f(0) < 0 < f(1)
        return (x - 1.0) * math.expm1(min(x + c, _EXP_MAX)) + x

    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi) * mtbf_s


@dataclass(frozen=True)
class IntervalAdvice:
    """How often to save: the intervals, W at each, the saving per month and the chart curve."""

    checkpoint_s: float  # C the interval is computed for (after asynchronous saves, when advised)
    restart_s: float
    mtbf_s: float
    interval_s: float  # τ0, today
    young_daly_s: float  # τ* = sqrt(2CM)
    optimum_s: float  # τ_exact
    wall_per_work_now: float  # W(τ0; C): with async advice, W1 (τ0 at the staging cost)
    wall_per_work_best: float
    saving_usd_per_month: float
    curve: tuple[dict[str, float], ...]  # {"interval_s", "wall_per_work", "overhead_share"}
    capped: bool = False

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["curve"] = [dict(p) for p in self.curve]
        return out


@dataclass(frozen=True)
class AsyncAdvice:
    """Save asynchronously: the blocking share today and what removing it saves per month."""

    checkpoint_s: float  # C today (synchronous)
    staged_s: float  # C' still blocking with asynchronous saves
    staged_measured: bool  # C' measured on this job's asynchronous saves, else assumed
    blocking_share: float  # C / (τ0 + C)
    saving_usd_per_month: float
    assumption: str
    capped: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CheckpointAdvice:
    """The job's checkpoint advice: asynchronous saves, the interval, their sum and why not."""

    async_advice: AsyncAdvice | None
    interval: IntervalAdvice | None
    saving_usd_per_month: float  # async + interval, ≤ lost_usd_per_month
    lost_usd_per_month: float  # the cap: the job's lost dollars over its wall hours × 730
    cost_usd_per_month: float  # the job's cost rate × the 730-hour month
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "async": None if self.async_advice is None else self.async_advice.to_json(),
            "interval": None if self.interval is None else self.interval.to_json(),
            "saving_usd_per_month": self.saving_usd_per_month,
            "lost_usd_per_month": self.lost_usd_per_month,
            "cost_usd_per_month": self.cost_usd_per_month,
            "notes": list(self.notes),
        }


def curve(
    checkpoint_s: float, restart_s: float, mtbf_s: float, around_s: float, also_s: float | None = None
) -> tuple[dict[str, float], ...]:
    """W on a geometric grid from a quarter to four times ``around_s`` (widened to hold
    ``also_s``, today's interval): ``interval_s``, ``wall_per_work``, ``overhead_share`` = 1 − 1/W."""
    lo, hi = around_s / 4, around_s * 4
    if also_s is not None and also_s > 0:
        lo, hi = min(lo, also_s / 1.5), max(hi, also_s * 1.5)
    if not (lo > 0 and math.isfinite(hi)):
        return ()
    grid = np.geomspace(lo, hi, CURVE_POINTS)
    w = wall_per_work(grid, checkpoint_s=checkpoint_s, restart_s=restart_s, mtbf_s=mtbf_s)
    return tuple(
        {"interval_s": float(t), "wall_per_work": float(v), "overhead_share": float(1 - 1 / v) if math.isfinite(v) else 1.0}
        for t, v in zip(grid.tolist(), np.asarray(w).tolist(), strict=True)
    )


def checkpoint_advice(
    *,
    checkpoint_s: float | None,
    interval_s: float | None,
    restart_s: float,
    rate: FailureRate,
    cost_usd_per_s: float,
    lost_usd_per_month: float,
    saves_async: bool = False,
    staged_s: float | None = None,
    async_threshold: float = ASYNC_THRESHOLD,
) -> CheckpointAdvice:
    """The advice for a job (module doc): asynchronous saves when synchronous saves block more
    than ``async_threshold`` of the interval, then the interval at the (new) save cost, their
    savings added without overlap and capped by the job's lost dollars per month.

    ``checkpoint_s``: C, the mean blocking time of a save (None: no saves measured);
    ``interval_s``: τ0 (None: fewer than two saves in an attempt); ``staged_s``: C' measured
    on asynchronous saves (None: assumed ``ASYNC_STAGE_SHARE`` of C)."""
    month_cost = max(cost_usd_per_s, 0.0) * SECONDS_PER_MONTH
    cap = max(lost_usd_per_month, 0.0)
    notes: list[str] = []
    if checkpoint_s is None or checkpoint_s <= 0 or interval_s is None or interval_s <= 0:
        notes.append(
            "no checkpoint advice: the job reported no checkpoint saves"
            if checkpoint_s is None or checkpoint_s <= 0
            else "no checkpoint advice: the interval between saves is unknown (fewer than two saves in any attempt)"
        )
        return CheckpointAdvice(None, None, 0.0, cap, month_cost, tuple(notes))
    c, tau0, m = checkpoint_s, interval_s, rate.mtbf_s
    advise_async = not saves_async and c / tau0 > async_threshold
    c_after = c
    async_advice: AsyncAdvice | None = None
    if advise_async:
        measured = staged_s is not None and 0 <= staged_s < c
        c_after = float(staged_s) if measured and staged_s is not None else ASYNC_STAGE_SHARE * c
        assumption = (
            f"asynchronous saves still block for {c_after:.3g} s each, as this job's asynchronous saves measured"
            if measured
            else f"asynchronous saves assumed to block for {ASYNC_STAGE_SHARE:.0%} of a synchronous save "
            f"({c_after:.3g} s: the device-to-host staging copy); no asynchronous save of this job was measured"
        )
        if m is None:
            saving = month_cost * (c - c_after) / (tau0 + c)
        else:
            w0 = wall_per_work(tau0, checkpoint_s=c, restart_s=restart_s, mtbf_s=m)
            w1 = wall_per_work(tau0, checkpoint_s=c_after, restart_s=restart_s, mtbf_s=m)
            saving = month_cost * (w0 - w1) / w0 if math.isfinite(w0) and w0 > 0 else 0.0
        capped = saving > cap
        async_advice = AsyncAdvice(c, c_after, measured, c / (tau0 + c), min(max(saving, 0.0), cap), assumption, capped)
    else:
        notes.append(
            "saves are already asynchronous"
            if saves_async
            else f"saves block {c / tau0:.1%} of the interval, at most {async_threshold:.0%}: asynchronous saves not advised"
        )
    interval: IntervalAdvice | None = None
    if m is None:
        notes.append(f"no interval advice: {rate.reason}")
    else:
        w0 = wall_per_work(tau0, checkpoint_s=c, restart_s=restart_s, mtbf_s=m)
        w1 = wall_per_work(tau0, checkpoint_s=c_after, restart_s=restart_s, mtbf_s=m)
        best = optimum_interval(c_after, m)
        w2 = wall_per_work(best, checkpoint_s=c_after, restart_s=restart_s, mtbf_s=m) if best > 0 else w1
        if not (math.isfinite(w0) and math.isfinite(w2)):
            notes.append("no interval advice: failures are so frequent that the expected wall time per unit of work overflows")
        else:
            saving = month_cost * (w1 - w2) / w0
            left = cap - (async_advice.saving_usd_per_month if async_advice else 0.0)
            capped = saving > left
            interval = IntervalAdvice(
                checkpoint_s=c_after, restart_s=restart_s, mtbf_s=m, interval_s=tau0,
                young_daly_s=young_daly(c_after, m), optimum_s=best, wall_per_work_now=w1, wall_per_work_best=w2,
                saving_usd_per_month=min(max(saving, 0.0), max(left, 0.0)),
                curve=curve(c_after, restart_s, m, best, tau0), capped=capped,
            )  # fmt: skip
    total = (async_advice.saving_usd_per_month if async_advice else 0.0) + (interval.saving_usd_per_month if interval else 0.0)
    return CheckpointAdvice(async_advice, interval, total, cap, month_cost, tuple(notes))

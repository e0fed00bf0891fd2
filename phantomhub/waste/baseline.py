"""Project baselines: what a run's step usually looks like, and what this run's difference costs.

A run's **baseline** is the rolling median of the step composition of the project's recent
finished runs that did the same work on the same GPU model:

- same project, same GPU model (``RunAnalysis.gpu_key``), finished (``Run.status``), analysed to
  the end (``RunAnalysis.complete``), finished before this run finished (before now while it
  runs): a CI gate's run counts a peer that started after it and finished first;
- the same job shape (world size, and GPU count and dtype where both say) and a comparable step:
  FLOPs, tokens and samples per step per rank within ``PEER_TOLERANCE`` where both report them —
  the peers' notion of comparability (``RunProfile.signature_matches`` in waste/evidence.py),
  reused as is;
- the ``BASELINE_RUNS`` most recent such runs; each figure is the median over them, figure by
  figure (so the parts' medians need not add up to the median step).

A run's step composition comes from its stored analysis alone (``RunAnalysis.result``, the
windowed series and MFU), never from raw step rows: the mean per step of the step time and of each
part of it (data wait, forward, backward, optimizer, exposed communication, host overhead), each
part's share of the step, and MFU over step time.

The difference is priced at the project's recent volume: the project's GPU-hours over the trailing
``RECURRENCE_DAYS`` days of ``recurrence`` in selectors.py (as of reading for a live project, else
before the run ended; RunDay rows), the window the recommendations' monthly figures use, at
the project's average price over those days::

    delta_usd_per_month = (run_ms - baseline_ms) / baseline_step_ms
                          x project_gpu_hours_30d x usd_per_gpu_hour_30d

that is, if every step of the project's work took as long as this run's, the same work would need
that much more GPU time. A part's figure is its own excess over the baseline step; MFU is not
priced separately (its change is the step time's, for the same work per step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db.models import Sum
from django.utils import timezone

from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste.core.evidence import PEER_TOLERANCE, PEERS_MAX, RunProfile
from phantomhub.waste.models import RunAnalysis, RunDay
from phantomhub.waste.selectors import RECURRENCE_DAYS, project_usd_exact, recurrence_as_of

BASELINE_RUNS = 10  # the most recent comparable finished runs the median is taken over
NO_SIGNATURE = "The run reports no FLOPs, tokens or samples per step: nothing says which runs did the same work."

# The parts of a step, in the order the run page shows them, and the windowed series they come from.
PARTS: tuple[str, ...] = ("data", "forward", "backward", "optimizer", "comm", "host")
PART_LABELS: Mapping[str, str] = {
    "step": "Step time",
    "data": "Data wait",
    "forward": "Forward",
    "backward": "Backward",
    "optimizer": "Optimizer",
    "comm": "Exposed communication",
    "host": "Host overhead",
}
SIGNATURE: tuple[str, ...] = ("flops_per_step", "tokens_per_step", "samples_per_step")

DELTA_FORMULA = (
    "delta_usd_per_month = (run_ms - baseline_ms) / baseline_step_ms * project_gpu_hours_30d * usd_per_gpu_hour_30d; "
    "usd_per_gpu_hour_30d = project_usd_30d / project_gpu_hours_30d"
)


@dataclass(frozen=True)
class Composition:
    """Mean per step of the step time and of each part (ms), and MFU over step time."""

    step_ms: float
    parts_ms: Mapping[str, float]
    mfu_step_time: float | None

    def share(self, part: str) -> float | None:
        return self.parts_ms[part] / self.step_ms if self.step_ms > 0 else None


def composition_from_result(result: Mapping[str, Any]) -> Composition | None:
    """A run's composition from its stored analysis (``RunAnalysis.result``): the windowed series
    hold, per window, the mean per step and the step-equivalents in it, so
    ``Σ mean x steps / Σ steps`` is the run's mean per step. None when no step ran."""
    windows = result.get("windows") or {}
    steps = windows.get("steps") or []
    if not steps:
        return None
    weights = np.asarray(steps, dtype=float)
    total = float(weights.sum())
    if not total > 0:
        return None

    def mean(name: str) -> float:
        values = np.asarray([np.nan if v is None else v for v in windows.get(f"{name}_ms") or [None] * len(weights)], float)
        used = (weights > 0) & np.isfinite(values)
        return float((values[used] * weights[used]).sum() / total)

    step = mean("step")
    if not step > 0:
        return None
    mfu = result.get("mfu_step_time")
    return Composition(step, {p: mean(p) for p in PARTS}, float(mfu) if isinstance(mfu, (int, float)) else None)


def median_composition(compositions: Sequence[Composition]) -> Composition:
    """Figure by figure, the median over the runs (MFU over the runs that know it)."""
    assert compositions, "a median of no runs"
    mfus = [c.mfu_step_time for c in compositions if c.mfu_step_time is not None]
    return Composition(
        float(np.median([c.step_ms for c in compositions])),
        {p: float(np.median([c.parts_ms[p] for c in compositions])) for p in PARTS},
        float(np.median(mfus)) if mfus else None,
    )


@dataclass(frozen=True)
class BaselineRun:
    run_id: str
    name: str
    started_at: datetime | None
    composition: Composition


@dataclass(frozen=True)
class Baseline:
    gpu_key: str
    signature: Mapping[str, float | None]  # the run's own step signature, per rank
    runs: tuple[BaselineRun, ...]  # most recent first
    candidates: int  # finished runs of the project on this GPU model that were looked at
    composition: Composition  # the medians


@dataclass(frozen=True)
class _Lookup:
    """A baseline, or why there is none (``reason``), and the run's own analysis."""

    row: RunAnalysis | None
    profile: RunProfile | None
    baseline: Baseline | None
    reason: str
    candidates: int = 0


def _row(run: Run) -> RunAnalysis | None:
    unread = ("state", "rank_rows", "rank_last_step", "result", "rank_figures", "recommendations")
    row = RunAnalysis.objects.filter(run=run).defer(*unread).first()
    return row if row is not None and row.analysed_at is not None else None


def _signature(profile: RunProfile) -> dict[str, float | None]:
    return {name: getattr(profile, name) for name in SIGNATURE}


def _lookup(run: Run) -> _Lookup:
    row = _row(run)
    if row is None:
        return _Lookup(None, None, None, "The run has not been analysed yet.")
    profile = RunProfile.from_json(row.profile) if isinstance(row.profile, dict) else None
    if profile is None:
        return _Lookup(row, None, None, "The run has no step rows yet: it has no step to compare.")
    if not any(v is not None and v > 0 for v in _signature(profile).values()):
        return _Lookup(row, profile, None, NO_SIGNATURE)
    gpu = row.gpu_key or "an unknown GPU model"
    candidates = RunAnalysis.objects.filter(
        project_id=row.project_id, gpu_key=row.gpu_key, complete=True, profile__isnull=False, run__status=RunStatus.FINISHED
    ).exclude(run_id=run.pk)
    candidates = candidates.filter(run__finished_at__lt=run.finished_at or timezone.now())
    rows = list(candidates.order_by("-run__finished_at").values_list("run_id", "profile")[: PEERS_MAX * 4])
    matching: list[str] = []
    same_shape = 0
    for run_id, raw in rows:
        peer = RunProfile.from_json(raw) if isinstance(raw, dict) else None
        if peer is None or not profile.shape_matches(peer):
            continue
        same_shape += 1
        if profile.signature_matches(peer):
            matching.append(str(run_id))
        if len(matching) == BASELINE_RUNS:
            break
    if not matching:
        return _Lookup(
            row, profile, None, f"No comparable finished runs: {_none_comparable(profile, gpu, len(rows), same_shape)}", len(rows)
        )
    # Only the two keys of each stored result that a composition needs (a big run's result holds
    # every rank's figures): the database extracts them.
    found = {
        str(rid): (name, started, windows, mfu)
        for rid, name, started, windows, mfu in RunAnalysis.objects.filter(run_id__in=matching).values_list(
            "run_id", "run__name", "started_at", "result__windows", "result__mfu_step_time"
        )
    }
    runs: list[BaselineRun] = []
    for rid in matching:
        name, started, windows, mfu = found[rid]
        comp = composition_from_result({"windows": windows, "mfu_step_time": mfu}) if isinstance(windows, dict) else None
        if comp is not None:
            runs.append(BaselineRun(rid, name, started, comp))
    if not runs:
        return _Lookup(row, profile, None, "No comparable finished runs with step time in their analysis.", len(rows))
    baseline = Baseline(
        row.gpu_key, _signature(profile), tuple(runs), len(rows), median_composition([r.composition for r in runs])
    )
    return _Lookup(row, profile, baseline, "", len(rows))


def _shape_text(profile: RunProfile) -> str:
    world, gpus, dtype = profile.shape()
    parts = [f"{world} rank{'' if world == 1 else 's'}"]
    if gpus is not None:
        parts.append(f"{gpus} GPU{'' if gpus == 1 else 's'}")
    if dtype is not None:
        parts.append(dtype)
    return ", ".join(parts)


def _none_comparable(profile: RunProfile, gpu: str, finished: int, same_shape: int) -> str:
    """Why no finished run of the project is a baseline, naming the first test they all failed."""
    if not finished:
        return f"this project has no finished run on {gpu} before this one."
    runs_text = f"{finished} finished run{'' if finished == 1 else 's'}"
    if not same_shape:
        return f"this project has {runs_text} on {gpu} before this one, none of this run's shape ({_shape_text(profile)})."
    return (
        f"this project has {runs_text} on {gpu} before this one, {same_shape} of this run's shape "
        f"({_shape_text(profile)}), none with a step within ±{PEER_TOLERANCE:.0%} of this run's FLOPs, tokens "
        "and samples per step."
    )


def baseline_for(run: Run) -> Baseline | None:
    """The run's project baseline, or None (``run_vs_baseline`` says why)."""
    return _lookup(run).baseline


@dataclass(frozen=True)
class Volume:
    project_gpu_hours_30d: float
    project_usd_30d: float
    project_usd_exact_30d: float | None = None  # unrounded: the rate comes from it (money arithmetic once)

    @property
    def usd_per_gpu_hour_30d(self) -> float | None:
        usd = self.project_usd_30d if self.project_usd_exact_30d is None else self.project_usd_exact_30d
        return usd / self.project_gpu_hours_30d if self.project_gpu_hours_30d > 0 else None


def project_volume(*, run: Run, row: RunAnalysis) -> Volume:
    """The project's GPU-hours and cost over the trailing 30 days of ``recurrence`` in selectors.py
    (as of now for a live project, else before the run's end), from the same figures as
    leaderboards and finance, so the baseline's monthly figure and the recommendations' agree."""
    end, _ = recurrence_as_of(run=run, row=row)
    since = (end - timedelta(days=RECURRENCE_DAYS)).date()
    agg = RunDay.objects.filter(project_id=row.project_id, day__gt=since, day__lte=end.date()).aggregate(
        gpu_seconds=Sum("gpu_seconds"), cost=Sum("cost_usd")
    )
    exact = project_usd_exact(project_id=row.project_id, since=since, until=end.date())
    return Volume(float(agg["gpu_seconds"] or 0.0) / 3600, float(agg["cost"] or 0), exact)


def delta_usd_per_month(*, run_ms: float, baseline_ms: float, baseline_step_ms: float, volume: Volume) -> float | None:
    """What the difference would cost a month at the project's recent volume (module docstring)."""
    if not baseline_step_ms > 0 or volume.usd_per_gpu_hour_30d is None:
        return None
    return (run_ms - baseline_ms) / baseline_step_ms * volume.project_gpu_hours_30d * volume.usd_per_gpu_hour_30d


def _pct(run: float | None, base: float | None) -> float | None:
    if run is None or base is None or base == 0:
        return None
    return run / base - 1


def _metric(metric: str, run_c: Composition, base: Composition, volume: Volume) -> dict[str, Any]:
    run_ms = run_c.step_ms if metric == "step" else run_c.parts_ms[metric]
    base_ms = base.step_ms if metric == "step" else base.parts_ms[metric]
    usd = delta_usd_per_month(run_ms=run_ms, baseline_ms=base_ms, baseline_step_ms=base.step_ms, volume=volume)
    out: dict[str, Any] = {
        "metric": f"{metric}_ms",
        "label": PART_LABELS[metric],
        "unit": "ms",
        "baseline": base_ms,
        "run": run_ms,
        "delta": run_ms - base_ms,
        "delta_pct": _pct(run_ms, base_ms),
        "baseline_share": None if metric == "step" else base.share(metric),
        "run_share": None if metric == "step" else run_c.share(metric),
        "delta_usd_per_month": usd,
        "explain": {
            "value": usd,
            "unit": "USD/month",
            "formula": DELTA_FORMULA,
            "inputs": {
                "run_ms": run_ms,
                "baseline_ms": base_ms,
                "baseline_step_ms": base.step_ms,
                "project_gpu_hours_30d": volume.project_gpu_hours_30d,
                "project_usd_30d": volume.project_usd_30d,
                "usd_per_gpu_hour_30d": volume.usd_per_gpu_hour_30d,
            },
            "input_units": {
                "run_ms": "ms",
                "baseline_ms": "ms",
                "baseline_step_ms": "ms",
                "project_gpu_hours_30d": "GPU-h",
                "project_usd_30d": "USD",
                "usd_per_gpu_hour_30d": "USD/GPU-h",
            },
        },
    }
    return out


def _mfu_metric(run_c: Composition, base: Composition) -> dict[str, Any]:
    run, b = run_c.mfu_step_time, base.mfu_step_time
    return {
        "metric": "mfu_step_time",
        "label": "MFU over step time",
        "unit": "ratio",
        "baseline": b,
        "run": run,
        "delta": None if run is None or b is None else run - b,
        "delta_pct": _pct(run, b),
        "baseline_share": None,
        "run_share": None,
        "delta_usd_per_month": None,  # its cost is the step time's: not priced twice
        "explain": {
            "value": None if run is None or b is None else run - b,
            "unit": "ratio",
            "formula": "delta = run_mfu_step_time - baseline_mfu_step_time; baseline = median over the baseline runs; "
            "not priced on its own (for the same work per step its change is the step time's)",
            "inputs": {"run_mfu_step_time": run, "baseline_mfu_step_time": b},
            "input_units": {"run_mfu_step_time": "ratio", "baseline_mfu_step_time": "ratio"},
        },
    }


def summary_text(delta_pct: float | None, usd: float | None) -> str:
    """ "+7% step time ≈ +$4,100/month at this project's recent volume"."""
    if delta_pct is None:
        return ""
    text = f"{delta_pct:+.0%} step time" if abs(delta_pct) >= 0.01 else f"{delta_pct:+.1%} step time"
    if usd is None:
        return text + " (the project's recent volume is unpriced)"
    sign = "+" if usd >= 0 else "−"
    amount = abs(usd)
    money = f"${amount:,.0f}" if amount >= 10 else f"${amount:,.2f}"
    return f"{text} ≈ {sign}{money}/month at this project's recent volume"


def run_vs_baseline(run: Run) -> dict[str, Any]:
    """This run against its project baseline, for the run page, the API, the CI gate and alerts.

    ``status``: ``compared``; ``no_baseline`` (``reason`` says why: no comparable finished runs, no
    step signature); ``pending`` (not analysed yet). ``complete``: the run's analysis has seen all
    its telemetry and the run has ended (a CI gate waits for it)."""
    look = _lookup(run)
    row = look.row
    complete = bool(row is not None and row.complete and row.analysed_seq >= run.ingest_seq)
    out: dict[str, Any] = {
        "status": "pending" if row is None else "no_baseline",
        "reason": look.reason or None,
        "complete": complete,
        "gpu_key": row.gpu_key if row is not None else None,
        "signature": _signature(look.profile) if look.profile is not None else None,
        "tolerance": PEER_TOLERANCE,
        "candidates": look.candidates,
        "baseline_runs": [],
        "volume": None,
        "metrics": [],
        "delta_usd_per_month": None,
        "summary": "",
    }
    if row is None or look.baseline is None:
        return out
    stored = RunAnalysis.objects.filter(run=run).values_list("result__windows", "result__mfu_step_time").first()
    run_c = (
        composition_from_result({"windows": stored[0], "mfu_step_time": stored[1]})
        if stored is not None and isinstance(stored[0], dict)
        else None
    )
    if run_c is None:
        return out | {"reason": "The run's analysis has no step time yet."}
    base = look.baseline.composition
    volume = project_volume(run=run, row=row)
    metrics = [_metric(m, run_c, base, volume) for m in ("step", *PARTS)] + [_mfu_metric(run_c, base)]
    step = metrics[0]
    return out | {
        "status": "compared",
        "reason": None,
        "baseline_runs": [
            {
                "id": r.run_id,
                "name": r.name,
                "started_at": r.started_at.isoformat() if r.started_at else None,
                "step_ms": r.composition.step_ms,
                "mfu_step_time": r.composition.mfu_step_time,
            }
            for r in look.baseline.runs
        ],
        "volume": {
            "days": RECURRENCE_DAYS,
            "project_gpu_hours_30d": volume.project_gpu_hours_30d,
            "project_usd_30d": volume.project_usd_30d,
            "usd_per_gpu_hour_30d": volume.usd_per_gpu_hour_30d,
        },
        "metrics": metrics,
        "delta_usd_per_month": step["delta_usd_per_month"],
        "summary": summary_text(step["delta_pct"], step["delta_usd_per_month"]),
    }

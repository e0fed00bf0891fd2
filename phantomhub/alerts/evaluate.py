"""What each rule sees now: one Observation per subject, from stored analyses only."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from phantomhub.alerts import selectors
from phantomhub.alerts.figures import recent_figures, run_usd_per_hour
from phantomhub.alerts.liveness import RUN_HOLD_S, hold_s
from phantomhub.alerts.models import AlertRule, RuleKind
from phantomhub.periods import month_period
from phantomhub.planning import selectors as planning
from phantomhub.telemetry.models import Run, RunStatus
from phantomhub.waste.models import RunAnalysis

log = logging.getLogger(__name__)


@dataclass
class Observation:
    subject: str
    label: str
    breached: bool
    figure: str  # what `value` is: waste_share, waste_usd_per_hour, mfu, tokens_per_s, ...
    value: float | None
    threshold: float | None
    usd_per_hour: float | None
    evidence: dict[str, Any] = field(default_factory=dict)
    run: Run | None = None
    # When the breach began, where the rule's own figure says so (silence, idle-held since); None:
    # the first evaluation that sees it breached.
    breached_since: datetime | None = None
    # The figure could not be read this time: the subject's state is left as it is.
    unknown: bool = False


def run_link(run_id: Any) -> str:
    return f"{settings.PUBLIC_URL.rstrip('/')}/runs/{run_id}"


def _run_label(row: RunAnalysis) -> str:
    return f"{row.run.name or row.run_id} ({row.project.slug})"


def _waste(rule: AlertRule, row: RunAnalysis) -> Observation | None:
    result = row.result
    fig = recent_figures(result, window_s=rule.window_s, target_mfu=float(result.get("target_mfu") or 0.5))
    if fig is None:
        return None
    rate = run_usd_per_hour(result)
    waste_rate = fig.waste_share * rate
    usd_max, share_max = rule.params.get("usd_per_hour"), rule.params.get("share")
    over_usd = usd_max is not None and waste_rate > usd_max
    over_share = share_max is not None and fig.waste_share > share_max
    by_usd = usd_max is not None and (over_usd or share_max is None)
    return Observation(
        subject=f"run:{row.run_id}",
        label=_run_label(row),
        breached=over_usd or over_share,
        figure="waste_usd_per_hour" if by_usd else "waste_share",
        value=waste_rate if by_usd else fig.waste_share,
        threshold=usd_max if by_usd else share_max,
        usd_per_hour=waste_rate,
        evidence={
            "window_from_ns": fig.from_ns,
            "window_to_ns": fig.to_ns,
            "window_seconds": round(fig.seconds, 3),
            "steps": round(fig.steps, 2),
            "waste_share": fig.waste_share,
            "shares": {name: round(share, 4) for name, share in fig.shares.items()},
            "useful_basis": fig.useful_basis,
            "run_usd_per_hour": rate,
            "mfu": fig.mfu,
            "priced": rate > 0,
            "formula": "waste $/h = (1 - useful share of the last window_s of telemetry) x the run's cost / billed hours",
        },
        run=row.run,
    )


def _efficiency(rule: AlertRule, row: RunAnalysis) -> Observation | None:
    metric = str(rule.params["metric"])
    result = row.result
    fig = recent_figures(result, window_s=rule.window_s, target_mfu=float(result.get("target_mfu") or 0.5))
    if fig is None:
        return None
    current = fig.mfu if metric == "mfu" else fig.tokens_per_s
    if current is None:
        return None
    base = selectors.project_baseline(row=row, metric=metric)
    if base is None:
        return None
    drop_pct = (1 - current / base["value"]) * 100
    rate = run_usd_per_hour(result)
    # The spend that buys nothing compared with the baseline: the same work would need
    # current / baseline of the time.
    shortfall = max(1 - current / base["value"], 0.0) * rate
    return Observation(
        subject=f"run:{row.run_id}",
        label=_run_label(row),
        breached=drop_pct > float(rule.params["drop_pct"]),
        figure=f"{metric}_drop_pct",
        value=drop_pct,
        threshold=float(rule.params["drop_pct"]),
        usd_per_hour=shortfall,
        evidence={
            "metric": metric,
            "current": current,
            "baseline": base["value"],
            "baseline_basis": base["basis"],
            "baseline_run_ids": base["runs"],
            "window_seconds": round(fig.seconds, 3),
            "run_usd_per_hour": rate,
            "formula": "drop % = (1 - current / baseline) x 100; $/h = max(1 - current / baseline, 0) x the run's $/h",
        },
        run=row.run,
    )


def _stragglers(rule: AlertRule, row: RunAnalysis) -> list[Observation]:
    result = row.result
    hours = float(result.get("run_hours") or 0.0)
    if hours <= 0:
        return []
    limit = float(rule.params["usd_per_hour"])
    out = []
    for s in result.get("stragglers") or []:
        rate = float(s["caused_wait_usd"]) / hours
        out.append(
            Observation(
                subject=f"run:{row.run_id}:rank:{s['rank']}",
                label=f"rank {s['rank']} on {s['host'] or 'an unnamed host'} of {_run_label(row)}",
                breached=rate > limit,
                figure="caused_wait_usd_per_hour",
                value=rate,
                threshold=limit,
                usd_per_hour=rate,
                evidence={
                    "rank": s["rank"],
                    "host": s["host"],
                    "slow_step_share": s["slow_step_share"],
                    "excess_ms_mean": s["excess_ns_mean"] / 1e6,
                    "caused_wait_usd": s["caused_wait_usd"],
                    "caused_wait_gpu_seconds": s["caused_wait_gpu_seconds"],
                    "run_hours": hours,
                    "formula": "others' comm wait this rank caused, in $, / the run's billed hours so far",
                },
                run=row.run,
            )
        )
    return out


def _silent(rule: AlertRule, now: datetime, up_since: datetime | None = None) -> list[Observation]:
    runs = Run.objects.filter(status=RunStatus.RUNNING, project__in=selectors.rule_projects(rule)).select_related("project")
    rows = {a.run_id: a for a in RunAnalysis.objects.filter(run__in=runs).only("run_id", "result", "cost_usd")}
    out = []
    clock = timezone.now()  # the server's own clock, as its beats are
    for run in runs:
        if up_since is not None and run.last_seen_at < up_since and (clock - up_since).total_seconds() < RUN_HOLD_S:
            # Not heard from since the server came back, within the time its agent's replay may
            # take: the server's downtime is not the run's silence (liveness.py). Left as it is.
            out.append(Observation(f"run:{run.pk}", run.name, False, "", None, None, None, run=run, unknown=True))
            continue
        silence = (now - run.last_seen_at).total_seconds()
        row = rows.get(run.pk)
        rate = run_usd_per_hour(row.result) if row is not None else None
        out.append(
            Observation(
                subject=f"run:{run.pk}",
                label=f"{run.name or run.pk} ({run.project.slug})",
                breached=silence >= rule.for_s,
                figure="silent_seconds",
                value=silence,
                threshold=rule.for_s,
                usd_per_hour=rate,
                evidence={
                    "last_seen_at": run.last_seen_at.isoformat(),
                    "status": run.status,
                    "run_usd_per_hour": rate,
                    "formula": "now - the run's last telemetry, while it is still running (billed)",
                },
                run=run,
                breached_since=run.last_seen_at,
            )
        )
    return out


def _nodes_catching_up(up_since: datetime | None) -> list[Observation]:
    """The nodes not judged yet after the server's restart (liveness.py): no sample of theirs
    taken since it came back, within their hold. Their GPUs' alerts are left as they are."""
    if up_since is None:
        return []
    try:
        node_model = importlib.import_module("phantomhub.fleet.models").Node
    except (ImportError, AttributeError):
        return []
    clock = timezone.now()  # the server's own clock, as its beats are
    since_ns = int(up_since.timestamp() * 1e9)
    out = []
    for hostname, last_t_ns, interval_s in node_model.objects.values_list("hostname", "last_t_ns", "interval_s"):
        behind = last_t_ns is None or last_t_ns < since_ns
        if behind and (clock - up_since).total_seconds() < hold_s(interval_s):
            out.append(Observation(f"gpu:{hostname}", hostname, False, "", None, None, None, unknown=True))
    return out


def _idle_gpus(rule: AlertRule, now: datetime, up_since: datetime | None = None) -> list[Observation] | None:
    """None when the fleet collector is not installed (the rule is skipped, with a note)."""
    try:
        fleet = importlib.import_module("phantomhub.fleet.selectors")
        idle_held_now = fleet.idle_held_now
    except (ImportError, AttributeError):
        return None
    teams = projects = None
    if rule.scope == "team" and rule.team is not None:
        teams = {rule.team.slug}
    if rule.scope == "project" and rule.project is not None:
        projects = {rule.project.slug}
    out = []
    try:
        gpus = idle_held_now(min_minutes=0, now=now)
    except TypeError:  # the signature first agreed on
        gpus = idle_held_now(org_slug=None, min_minutes=0)
    for gpu in gpus:
        if teams is not None and gpu.get("team") not in teams:
            continue
        if projects is not None and gpu.get("project") not in projects:
            continue
        since = gpu["since"]
        held = (now - since).total_seconds()
        out.append(
            Observation(
                subject=f"gpu:{gpu['node']}:{gpu['gpu_index']}",
                label=f"GPU {gpu['gpu_index']} on {gpu['node']} held by {gpu.get('holder') or 'unknown'}",
                # Idle-held at all is a breach since `since`: pending until held for for_s.
                breached=True,
                figure="idle_held_seconds",
                value=held,
                threshold=rule.for_s,
                usd_per_hour=float(gpu.get("usd_per_hour") or 0.0),
                evidence={k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in gpu.items()},
                breached_since=since,
            )
        )
    return out + _nodes_catching_up(up_since)


def _budgets(rule: AlertRule, now: datetime) -> list[Observation]:
    """Each budget the rule covers that is in force this month (UTC): breached while its
    month-end forecast (planning/forecast.py) lies above the budget by more than over_pct."""
    month = month_period(f"{now.astimezone(UTC):%Y-%m}")
    budgets = planning.rule_budgets(scope=rule.scope, team_id=rule.team_id, project_id=rule.project_id)
    over_pct = float(rule.params.get("over_pct") or 0.0)
    out = []
    for status in planning.budgets_status(budgets=budgets, month=month, now=now):
        forecast = status.forecast
        if forecast is None:
            continue
        limit = status.budget_usd * (1 + over_pct / 100)
        out.append(
            Observation(
                subject=f"budget:{status.budget.pk}:{month.label}",
                label=f"{planning.budget_label(status.budget)} budget for {month.label}",
                breached=forecast.point_usd > limit,
                figure="forecast_usd",
                value=round(forecast.point_usd, 2),
                threshold=round(limit, 2),
                usd_per_hour=round(status.burn_usd_per_hour, 2),
                evidence={
                    "budget_id": status.budget.pk,
                    "month": month.label,
                    "budget_usd": round(status.budget_usd, 2),
                    "spent_usd": round(status.spent_usd, 2),
                    "forecast_p10_usd": round(forecast.p10_usd, 2),
                    "forecast_p90_usd": round(forecast.p90_usd, 2),
                    "over_by_usd": round(status.over_by_usd, 2),
                    "recoverable_usd": round(status.recoverable_usd, 2),
                    "recoverable_ahead_usd": round(status.recoverable_ahead_usd, 2),
                    "cut_usd": round(status.cut_usd, 2),
                    "cut_enough": status.cut_enough,
                    "live_runs": status.live_runs,
                    "formula": "forecast = spent + live burn x hours left today + days left x mean closed day "
                    "(docs/budgets.md); cut = the rest of the month's recoverable dollars that bring it under",
                },
            )
        )
    return out


def observe(rule: AlertRule, now: datetime, up_since: datetime | None = None) -> list[Observation] | None:
    """Every subject the rule covers now (None: the rule cannot be evaluated here, see notes).
    `up_since`: when the server came back after its own downtime (liveness.py), if it did."""
    if rule.kind == RuleKind.SILENT_RUN:
        return _silent(rule, now, up_since)
    if rule.kind == RuleKind.IDLE_GPU:
        return _idle_gpus(rule, now, up_since)
    if rule.kind == RuleKind.FORECAST_OVER_BUDGET:
        return _budgets(rule, now)
    out: list[Observation] = []
    for row in selectors.live_analyses(rule):
        try:
            if rule.kind == RuleKind.WASTE_RATE:
                got = _waste(rule, row)
                out.extend([got] if got else [])
            elif rule.kind == RuleKind.EFFICIENCY_DROP:
                got = _efficiency(rule, row)
                out.extend([got] if got else [])
            elif rule.kind == RuleKind.STRAGGLER:
                out.extend(_stragglers(rule, row))
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            # One run's unreadable analysis: its alerts stay as they are (neither fired nor
            # resolved), and the rule's other runs are evaluated.
            log.exception("alert rule %s: the analysis of run %s could not be read", rule.pk, row.run_id)
            out.append(Observation(f"run:{row.run_id}", _run_label(row), False, "", None, None, None, unknown=True))
    return out

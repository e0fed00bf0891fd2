"""Reads: rules people may see or change, the live analyses a rule covers, project baselines."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import Membership, Project, Role, Team
from phantomhub.accounts.permissions import is_org_admin
from phantomhub.accounts.selectors import projects_visible, user_sees_everything
from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState, DeliveryEvent, Scope
from phantomhub.telemetry.models import RunStatus
from phantomhub.waste.models import RunAnalysis

BASELINE_RUNS = 10  # the project's most recent finished runs a baseline is the median of


def rules_visible(principal: Any) -> QuerySet[AlertRule]:
    """Organization rules for every signed-in person; a team's or project's rules for those who
    see that team's projects (finance and organization admins see all)."""
    if isinstance(principal, ProjectPrincipal) or principal is None:
        return AlertRule.objects.none()
    rules = AlertRule.objects.select_related("team", "project", "project__team")
    if user_sees_everything(principal):
        return rules.all()
    projects = projects_visible(principal)
    return rules.filter(
        Q(scope=Scope.ORG) | Q(scope=Scope.TEAM, team__projects__in=projects) | Q(scope=Scope.PROJECT, project__in=projects)
    ).distinct()


def teams_administered(user: Any) -> set[int]:
    return set(Membership.objects.filter(user=user, role=Role.ADMIN).values_list("team_id", flat=True))


def rule_writable(*, user: Any, scope: str, team_id: int | None, project: Project | None) -> bool:
    """Organization admins write every rule; a team's admins write its team's and projects' rules."""
    if isinstance(user, ProjectPrincipal) or not getattr(user, "is_authenticated", False):
        return False
    if is_org_admin(user):
        return True
    if scope == Scope.ORG:
        return False
    team = project.team_id if project is not None else team_id
    return team is not None and team in teams_administered(user)


def rule_projects(rule: AlertRule) -> QuerySet[Project]:
    if rule.scope == Scope.PROJECT and rule.project_id is not None:
        return Project.objects.filter(pk=rule.project_id)
    if rule.scope == Scope.TEAM and rule.team_id is not None:
        return Project.objects.filter(team_id=rule.team_id)
    return Project.objects.all()


# The keys of RunAnalysis.result the rules read (evaluate.py, figures.py): the database extracts
# them, so a 1,024-rank run's per-rank figures are not read every 20 s.
RESULT_KEYS = ("windows", "end_ns", "ranks_reporting", "run_hours", "cost_usd", "target_mfu", "tokens_per_s", "stragglers")


def live_analyses(rule: AlertRule) -> list[RunAnalysis]:
    """Analyses of the running runs a rule covers (the only subjects of run rules), each with
    `result` holding only RESULT_KEYS."""
    rows = list(
        RunAnalysis.objects.filter(run__status=RunStatus.RUNNING, project__in=rule_projects(rule), analysed_at__isnull=False)
        .select_related("run", "project", "team")
        .defer("state", "rank_rows", "rank_last_step", "result", "rank_figures", "recommendations", "profile")
    )
    if not rows:
        return rows
    parts = RunAnalysis.objects.filter(run_id__in=[r.run_id for r in rows]).values_list(
        "run_id", *(f"result__{key}" for key in RESULT_KEYS)
    )
    results = {run_id: dict(zip(RESULT_KEYS, values, strict=True)) for run_id, *values in parts}
    for row in rows:
        row.result = {k: v for k, v in results.get(row.run_id, {}).items() if v is not None}
    return rows


def project_baseline(*, row: RunAnalysis, metric: str) -> dict[str, Any] | None:
    """The project's baseline of MFU over step time or tokens/s for this run.

    The comparable runs are the project baselines' (phantomhub/waste/baseline.py: the project's
    last finished runs on the same GPU model with a step of the same work): MFU is their median
    MFU over step time, tokens/s the median of their result.tokens_per_s. Where that module is
    not installed, the project's last complete runs on the same GPU model stand in."""
    try:
        from phantomhub.waste.baseline import baseline_for
    except ImportError:
        return _baseline_same_gpu(project_id=row.project_id, gpu_key=row.gpu_key, metric=metric, exclude_run_id=row.run_id)
    base = baseline_for(row.run)
    if base is None:
        return None
    ids = [r.run_id for r in base.runs]
    basis = f"median of the project's {len(ids)} comparable finished runs on {base.gpu_key or 'this GPU'} (project baseline)"
    if metric == "mfu":
        value = base.composition.mfu_step_time
        return None if value is None or value <= 0 else {"value": value, "runs": ids, "metric": "mfu_step_time", "basis": basis}
    rates = [
        float(v)
        for v in RunAnalysis.objects.filter(run_id__in=ids).values_list("result__tokens_per_s", flat=True)
        if isinstance(v, (int, float)) and v > 0
    ]
    if not rates:
        return None
    return {"value": statistics.median(rates), "runs": ids, "metric": "tokens_per_s", "basis": basis}


def _baseline_same_gpu(*, project_id: int, gpu_key: str, metric: str, exclude_run_id: Any) -> dict[str, Any] | None:
    """The median over the project's last BASELINE_RUNS complete analyses of the same GPU of
    MFU over time inside steps (result.mfu_step_time) or tokens/s (result.tokens_per_s)."""
    field = "mfu_step_time" if metric == "mfu" else "tokens_per_s"
    rows = (
        RunAnalysis.objects.filter(project_id=project_id, gpu_key=gpu_key, complete=True)
        .exclude(run_id=exclude_run_id)
        .order_by("-started_at")
        .values_list("run_id", f"result__{field}")[:BASELINE_RUNS]
    )
    got = [(str(run_id), float(v)) for run_id, v in rows if isinstance(v, (int, float)) and v > 0]
    if not got:
        return None
    return {
        "value": statistics.median(v for _, v in got),
        "runs": [run_id for run_id, _ in got],
        "metric": field,
        "basis": f"median of the project's last {len(got)} finished runs on {gpu_key or 'this GPU'}",
    }


def states_visible(principal: Any) -> QuerySet[AlertState]:
    """Alert states of the rules the principal sees, each decided by its subject too: a run's
    state only where the run's project is visible to them (an org-wide rule watches every team's
    runs), an idle GPU's only where its holder's team is theirs or it has no team."""
    states = AlertState.objects.filter(rule__in=rules_visible(principal)).select_related("rule", "rule__project", "run")
    if isinstance(principal, ProjectPrincipal) or principal is None or user_sees_everything(principal):
        return states
    teams = list(Team.objects.filter(memberships__user=principal).values_list("slug", flat=True))
    unattributed = Q(evidence__team__isnull=True) | Q(evidence__team=None)
    return states.filter(
        Q(run__isnull=False, run__project__in=projects_visible(principal))
        | Q(run__isnull=True) & (unattributed | Q(evidence__team__in=teams))
    )


def deliveries_visible(principal: Any) -> QuerySet[AlertDelivery]:
    """Deliveries of the alerts the principal sees (states_visible), and those of no alert: tests,
    and a team's or project's rule's whose alert was pruned. An org-wide rule's delivery whose
    alert is gone cannot say whose run it was about, so only those who see everything see it."""
    items = AlertDelivery.objects.filter(rule__in=rules_visible(principal)).select_related("rule", "rule__project", "alert")
    if isinstance(principal, ProjectPrincipal) or principal is None or user_sees_everything(principal):
        return items
    no_alert = Q(alert__isnull=True) & (Q(event=DeliveryEvent.TEST) | ~Q(rule__scope=Scope.ORG))
    return items.filter(Q(alert__in=states_visible(principal)) | no_alert)


@dataclass(frozen=True)
class Editor:
    """Which rules one person may change (rule_writable), read once for a whole listing."""

    org_admin: bool
    teams: frozenset[int]

    def may_edit(self, rule: AlertRule) -> bool:
        if self.org_admin:
            return True
        if rule.scope == Scope.ORG:
            return False
        team = rule.project.team_id if rule.project is not None else rule.team_id
        return team is not None and team in self.teams


def editor_of(principal: Any) -> Editor:
    if isinstance(principal, ProjectPrincipal) or not getattr(principal, "is_authenticated", False):
        return Editor(False, frozenset())
    return Editor(is_org_admin(principal), frozenset(teams_administered(principal)))


def request_editor(request: Any) -> Editor:
    """Who may change rules in this request: a signed-in person's rights. A token (even an org
    admin's personal token, which only reads) changes nothing, so it is shown no destination."""
    if getattr(request, "auth", None) is not None:
        return Editor(False, frozenset())
    return editor_of(request.user)

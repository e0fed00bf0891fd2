"""Reads: which budgets a person sees or sets, which are in force in a month, and each one's
status (spend to date, forecast with its interval, the recoverable dollars that would bring it
under). From the live daily rollups (waste.models ProjectDay, RunDay) and the running runs'
stored analyses; docs/budgets.md."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, QuerySet, Sum

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import Membership, Role, Team
from phantomhub.accounts.permissions import is_finance, is_org_admin
from phantomhub.accounts.selectors import user_sees_everything
from phantomhub.periods import Period
from phantomhub.planning.burn import run_usd_per_hour
from phantomhub.planning.forecast import Forecast, ForecastInput, month_forecast
from phantomhub.planning.models import Budget, BudgetScope
from phantomhub.telemetry.models import RunStatus
from phantomhub.waste.models import ProjectDay, RunAnalysis, RunDay


def budgets_visible(principal: Any) -> QuerySet[Budget]:
    """Finance and organization admins read every budget; a person, their teams' (the team's own
    and its projects'); a project token, none."""
    if isinstance(principal, ProjectPrincipal) or not getattr(principal, "is_authenticated", False):
        return Budget.objects.none()
    budgets = Budget.objects.select_related("team", "project", "project__team")
    if user_sees_everything(principal):
        return budgets.all()
    teams = Membership.objects.filter(user=principal).values("team_id")
    return budgets.filter(Q(scope=BudgetScope.TEAM, team_id__in=teams) | Q(scope=BudgetScope.PROJECT, project__team_id__in=teams))


def teams_seen(principal: Any) -> QuerySet[Team]:
    """The teams whose budgets `principal` reads: every one (finance, organization admins), their
    own teams (a person), none (a token of a project)."""
    if isinstance(principal, ProjectPrincipal) or not getattr(principal, "is_authenticated", False):
        return Team.objects.none()
    if user_sees_everything(principal):
        return Team.objects.all()
    return Team.objects.filter(pk__in=Membership.objects.filter(user=principal).values("team_id"))


def budget_writable(*, user: Any, scope: str, team_id: int | None, project_team_id: int | None) -> bool:
    """Organization admins and finance set any budget; a team's leads (its admins) set its
    projects' budgets, not the team's own."""
    if isinstance(user, ProjectPrincipal) or not getattr(user, "is_authenticated", False):
        return False
    if is_org_admin(user) or is_finance(user):
        return True
    if scope != BudgetScope.PROJECT or project_team_id is None:
        return False
    return Membership.objects.filter(user=user, team_id=project_team_id, role=Role.ADMIN).exists()


def budgets_in_force(budgets: QuerySet[Budget], month: Period) -> QuerySet[Budget]:
    return budgets.filter(effective_from__lte=month.start).filter(Q(effective_to__isnull=True) | Q(effective_to__gte=month.start))


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    month: Period
    as_of: datetime
    state: str  # "closed" (the month is over), "open" (it is this month), "ahead" (not begun)
    spent_usd: float
    recoverable_usd: float  # the waste analysis's recoverable dollars of the month so far
    forecast: Forecast | None  # None for a month not begun
    burn_usd_per_hour: float
    live_runs: int

    @property
    def budget_usd(self) -> float:
        return float(self.budget.amount_usd)

    @property
    def over_by_usd(self) -> float:
        """How far the forecast's point lies above the budget (0: within it)."""
        if self.forecast is None:
            return 0.0
        return max(self.forecast.point_usd - self.budget_usd, 0.0)

    @property
    def recoverable_ahead_usd(self) -> float:
        """The recoverable dollars of the rest of the month: the spend still forecast, at the
        month's recoverable share so far. Spend already made cannot be recovered this month."""
        if self.forecast is None or self.spent_usd <= 0:
            return 0.0
        share = min(self.recoverable_usd / self.spent_usd, 1.0)
        return max(self.forecast.point_usd - self.spent_usd, 0.0) * share

    @property
    def cut_usd(self) -> float:
        """The recoverable dollars to recover to land on the budget (all there is, when that is
        not enough: see cut_enough)."""
        return min(self.over_by_usd, self.recoverable_ahead_usd)

    @property
    def cut_enough(self) -> bool:
        return self.recoverable_ahead_usd >= self.over_by_usd

    def as_dict(self) -> dict[str, Any]:
        b = self.budget
        forecast = self.forecast
        money = lambda x: round(x, 2)  # noqa: E731
        return {
            "budget": budget_dict(b),
            "month": self.month.label,
            "as_of": self.as_of.isoformat(),
            "state": self.state,
            "budget_usd": money(self.budget_usd),
            "spent_usd": money(self.spent_usd),
            "spent_share": round(self.spent_usd / self.budget_usd, 4) if self.budget_usd > 0 else None,
            "forecast": None
            if forecast is None
            else {
                "point_usd": money(forecast.point_usd),
                "p10_usd": money(forecast.p10_usd),
                "p90_usd": money(forecast.p90_usd),
                "daily_mean_usd": money(forecast.daily_mean_usd),
                "daily_sd_usd": money(forecast.daily_sd_usd),
                "basis": forecast.basis,
            },
            "over": self.over_by_usd > 0,
            "over_by_usd": money(self.over_by_usd),
            "burn_usd_per_hour": money(self.burn_usd_per_hour),
            "live_runs": self.live_runs,
            "recoverable_usd": money(self.recoverable_usd),
            "recoverable_ahead_usd": money(self.recoverable_ahead_usd),
            "cut_usd": money(self.cut_usd),
            "cut_enough": self.cut_enough,
        }


def budget_dict(b: Budget) -> dict[str, Any]:
    return {
        "id": b.pk,
        "scope": b.scope,
        "team": b.team.slug if b.team else (b.project.team.slug if b.project else None),
        "project": b.project.slug if b.project else None,
        "gpu_key": b.gpu_key,
        "amount_usd": str(b.amount_usd),
        "effective_from": f"{b.effective_from:%Y-%m}",
        "effective_to": f"{b.effective_to:%Y-%m}" if b.effective_to else None,
        "note": b.note,
        "updated_at": b.updated_at.isoformat() if b.updated_at else None,
    }


def _scope_filter(budget: Budget) -> dict[str, Any]:
    """The daily rows and runs a budget counts: its project's, or its team's projects' (by the
    project's team now, as the finance review groups them), of its GPU model if it names one."""
    where: dict[str, Any] = {"project_id": budget.project_id} if budget.project_id else {"project__team_id": budget.team_id}
    if budget.gpu_key:
        where["gpu_key"] = budget.gpu_key
    return where


def _daily(budget: Budget, start: date, end: date) -> dict[date, tuple[Decimal, Decimal]]:
    """Per day, the scope's billed dollars and recoverable dollars: ProjectDay (what finance
    totals), or RunDay for a GPU model's budget (ProjectDay has no GPU model)."""
    model = RunDay if budget.gpu_key else ProjectDay
    rows = (
        model.objects.filter(day__gte=start, day__lte=end, **_scope_filter(budget))
        .values("day")
        .annotate(cost=Sum("cost_usd"), recoverable=Sum("recoverable_usd"))
    )
    return {r["day"]: (r["cost"] or Decimal(0), r["recoverable"] or Decimal(0)) for r in rows}


# The parts of RunAnalysis.result run_usd_per_hour reads, extracted by the database.
_BURN_KEYS = {
    "run_hours": "result__run_hours",
    "gpu_count": "result__gpu_count",
    "unpriced_gpu_seconds": "result__unpriced_gpu_seconds",
    "cost_usd": "result__cost_usd",
    "exact_usd": "result__explain__cost_usd__inputs__exact_usd",
}


def live_burn(budget: Budget) -> tuple[float, int]:
    """The running runs' spend rate in the scope ($/h, their sum) and how many there are."""
    where = _scope_filter(budget)
    runs = RunAnalysis.objects.filter(run__status=RunStatus.RUNNING, analysed_at__isnull=False, **where)
    total, count = 0.0, 0
    for values in runs.values_list(*_BURN_KEYS.values()):
        got = dict(zip(_BURN_KEYS, values, strict=True))
        exact = got.pop("exact_usd")
        result = {k: v for k, v in got.items() if v is not None}
        if isinstance(exact, (int, float)):
            result["explain"] = {"cost_usd": {"inputs": {"exact_usd": exact}}}
        total += run_usd_per_hour(result)
        count += 1
    return total, count


def budget_status(*, budget: Budget, month: Period, now: datetime) -> BudgetStatus:
    """The budget's month as seen at `now` (UTC): a past month closed (its forecast is its total),
    this month forecast from its closed days, today so far and the live burn, a future month
    not begun (no forecast)."""
    today = now.astimezone(UTC).date()
    if month.start > today:
        return BudgetStatus(budget, month, now, "ahead", 0.0, 0.0, None, 0.0, 0)
    last = min(month.end, today)
    daily = _daily(budget, month.start, last)
    spent = sum((cost for cost, _ in daily.values()), Decimal(0))
    recoverable = sum((rec for _, rec in daily.values()), Decimal(0))
    if month.end < today:
        closed = [float(daily.get(d, (Decimal(0), 0))[0]) for d in month.each_day()]
        forecast = month_forecast(ForecastInput(closed_days_usd=closed))
        return BudgetStatus(budget, month, now, "closed", float(spent), float(recoverable), forecast, 0.0, 0)
    closed_days = [month.start + timedelta(days=i) for i in range((today - month.start).days)]
    burn, live = live_burn(budget)
    midnight = datetime.combine(today + timedelta(days=1), time(), tzinfo=UTC)
    forecast = month_forecast(
        ForecastInput(
            closed_days_usd=[float(daily.get(d, (Decimal(0), 0))[0]) for d in closed_days],
            today_usd=float(daily.get(today, (Decimal(0), 0))[0]),
            burn_usd_per_hour=burn,
            hours_left_today=max((midnight - now).total_seconds(), 0.0) / 3600,
            days_left=(month.end - today).days,
        )
    )
    return BudgetStatus(budget, month, now, "open", float(spent), float(recoverable), forecast, burn, live)


def budgets_status(*, budgets: QuerySet[Budget], month: Period, now: datetime) -> list[BudgetStatus]:
    """The status of each of `budgets` in force in `month`."""
    return [budget_status(budget=b, month=month, now=now) for b in budgets_in_force(budgets, month)]


def rule_budgets(*, scope: str, team_id: int | None, project_id: int | None) -> QuerySet[Budget]:
    """The budgets an alert rule of this scope covers: every one (org), a team's own and its
    projects' (team), a project's (project)."""
    budgets = Budget.objects.select_related("team", "project", "project__team")
    if scope == "project":
        return budgets.filter(project_id=project_id) if project_id is not None else budgets.none()
    if scope == "team":
        return budgets.filter(Q(team_id=team_id) | Q(project__team_id=team_id)) if team_id is not None else budgets.none()
    return budgets.all()


def budget_label(budget: Budget) -> str:
    target = f"team {budget.team.slug}" if budget.team else f"project {budget.project.slug if budget.project else '?'}"
    return f"{target}{f' ({budget.gpu_key})' if budget.gpu_key else ''}"

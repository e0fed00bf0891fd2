"""The budgets API (docs/portal-api.md, "Budgets"): list, create, change and delete budgets, and
each budget's status for a month (spend to date, forecast with its interval, recoverable dollars).

Reads: finance and organization admins every budget, a person their teams' (selectors.
budgets_visible); another team's budget is a 404. Writes: organization admins and finance any
budget, a team's leads its projects' budgets (selectors.budget_writable), signed in (personal
tokens only read, project and node tokens reach nothing here: accounts/permissions.py TokenScopes).
Bodies are bounded by the default parser (telemetry/parsers.py CappedJSONParser); every refused
field is named (services.BudgetError → the one error shape)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import Membership, Project, Role
from phantomhub.accounts.permissions import is_finance, is_org_admin
from phantomhub.errors import ApiError, invalid
from phantomhub.periods import month_period
from phantomhub.planning import selectors, services
from phantomhub.planning.models import Budget, BudgetScope
from phantomhub.schema import ErrorSerializer

OBJ = OpenApiTypes.OBJECT
FILTERS = [
    OpenApiParameter("team", str, description="a team's slug: its own budgets and its projects'"),
    OpenApiParameter("project", str, description="a project's slug: its budgets"),
]
MONTH = OpenApiParameter("month", str, description="YYYY-MM (default: this month, UTC)")


def _error(exc: services.BudgetError) -> ApiError:
    return ApiError(exc.code, str(exc), fields={exc.field: exc.message}, status_code=exc.status)


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise invalid("body", "must be a JSON object")
    return dict(request.data)


def _filtered(request: Request) -> Any:
    """The budgets the caller sees, narrowed by `?team=` and `?project=`. A team or project the
    caller does not see is answered as one that does not exist (400), so a filter never tells a
    member which other teams there are."""
    budgets = selectors.budgets_visible(request.user)
    team, project = request.query_params.get("team"), request.query_params.get("project")
    seen = selectors.teams_seen(request.user)
    if team:
        if not seen.filter(slug=team).exists():
            raise invalid("team", f"no team {team[:64]!r}")
        budgets = budgets.filter(Q(team__slug=team) | Q(project__team__slug=team))
    if project:
        if not Project.objects.filter(slug=project, team__in=seen).exists():
            raise invalid("project", f"no project {project[:64]!r}")
        budgets = budgets.filter(project__slug=project)
    return budgets


def _may_write(request: Request, fields: services.BudgetFields | Budget) -> None:
    project_team = fields.project.team_id if fields.project is not None else None
    team_id = fields.team.pk if fields.team is not None else None
    if not selectors.budget_writable(user=request.user, scope=fields.scope, team_id=team_id, project_team_id=project_team):
        who = "a team's leads set its projects' budgets; " if fields.scope == BudgetScope.PROJECT else ""
        raise ApiError("forbidden", f"{who}this budget needs an organization admin or finance", status_code=403)


def _writer_flags(user: Any) -> dict[str, Any]:
    """What the page offers the caller: every scope, or their led teams' projects."""
    if isinstance(user, ProjectPrincipal) or not getattr(user, "is_authenticated", False):
        return {"any": False, "teams": []}
    if is_org_admin(user) or is_finance(user):
        return {"any": True, "teams": []}
    led = Membership.objects.filter(user=user, role=Role.ADMIN).values_list("team__slug", flat=True)
    return {"any": False, "teams": sorted(led)}


class BudgetListApi(APIView):
    @extend_schema(parameters=FILTERS, responses=OBJ, summary="Budgets you may see", operation_id="budgets_list")
    def get(self, request: Request) -> Response:
        rows = [selectors.budget_dict(b) for b in _filtered(request)]
        return Response({"budgets": rows, "may_set": _writer_flags(request.user), "max_amount_usd": str(services.MAX_BUDGET_USD)})

    @extend_schema(request=OBJ, responses={201: OBJ, 400: ErrorSerializer, 409: ErrorSerializer}, operation_id="budgets_create")
    def post(self, request: Request) -> Response:
        data = _body(request)
        try:
            fields = services.budget_fields(data)
        except services.BudgetError as exc:
            raise _error(exc) from None
        _may_write(request, fields)
        try:
            budget = services.budget_create(fields=fields, actor=request.user)
        except services.BudgetError as exc:
            raise _error(exc) from None
        return Response(selectors.budget_dict(budget), status=status.HTTP_201_CREATED)


class BudgetDetailApi(APIView):
    def _budget(self, request: Request, budget_id: int) -> Budget:
        budget = selectors.budgets_visible(request.user).filter(pk=budget_id).first()
        if budget is None:
            raise ApiError("not_found", "budget not found", status_code=404)
        return budget

    @extend_schema(responses=OBJ, operation_id="budgets_read")
    def get(self, request: Request, budget_id: int) -> Response:
        return Response(selectors.budget_dict(self._budget(request, budget_id)))

    @extend_schema(request=OBJ, responses={200: OBJ, 400: ErrorSerializer, 409: ErrorSerializer}, operation_id="budgets_update")
    def patch(self, request: Request, budget_id: int) -> Response:
        budget = self._budget(request, budget_id)
        _may_write(request, budget)
        data = _body(request)
        try:
            fields = services.budget_fields(data, current=budget)
        except services.BudgetError as exc:
            raise _error(exc) from None
        try:
            budget = services.budget_update(budget=budget, fields=fields)
        except services.BudgetError as exc:
            raise _error(exc) from None
        return Response(selectors.budget_dict(budget))

    @extend_schema(responses={204: None}, operation_id="budgets_delete")
    def delete(self, request: Request, budget_id: int) -> Response:
        budget = self._budget(request, budget_id)
        _may_write(request, budget)
        services.budget_delete(budget=budget)
        return Response(status=status.HTTP_204_NO_CONTENT)


class BudgetStatusApi(APIView):
    @extend_schema(
        parameters=[MONTH, *FILTERS], responses=OBJ, summary="Each budget in force: spend, forecast, recoverable",
        operation_id="budgets_status",
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        now = timezone.now()
        text = request.query_params.get("month") or f"{now:%Y-%m}"
        month = month_period(text, field="month")
        rows = selectors.budgets_status(budgets=_filtered(request), month=month, now=now)
        return Response(
            {
                "month": month.as_dict(),
                "as_of": now.isoformat(),
                "rows": [row.as_dict() for row in rows],
                "may_set": _writer_flags(request.user),
            }
        )

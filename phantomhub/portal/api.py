"""The portal read API (docs/portal-api.md). Thin views over selectors and services."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate, login, logout
from django.http import HttpResponse, StreamingHttpResponse
from django.middleware.csrf import get_token
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import Membership, Profile, Project, Team
from phantomhub.accounts.oidc_session import logout_url, sign_in_methods
from phantomhub.accounts.passwords import PASSWORDS_OFF_CODE, PASSWORDS_OFF_MESSAGE
from phantomhub.accounts.permissions import ReadAnyoneWriteOrgAdmin, is_org_admin
from phantomhub.accounts.selectors import projects_visible, user_sees_everything
from phantomhub.errors import ApiError, query_int
from phantomhub.periods import Period, month_period, period_parse
from phantomhub.portal import exports, finance, people, run_list, run_page, selectors, services
from phantomhub.portal.finance_pdf import PdfContext, finance_pdf
from phantomhub.portal.jobs import run_job_link
from phantomhub.schema import ErrorSerializer
from phantomhub.telemetry.api import RunOutputSerializer
from phantomhub.telemetry.models import EventKind, RunEvent
from phantomhub.waste.baseline import run_vs_baseline
from phantomhub.waste.core.model import DEFAULT_RECOVERABILITY
from phantomhub.waste.models import OrgSettings
from phantomhub.waste.selectors import analysis_failure, analysis_series, analysis_view

OBJ = OpenApiTypes.OBJECT

# The query parameters the portal reads (docs/portal-api.md), so clients and the fuzzer know them.
PERIOD = OpenApiParameter("period", str, description="7d, 30d (default), 90d, a month YYYY-MM, or days YYYY-MM-DD..YYYY-MM-DD")
SORT = OpenApiParameter(
    "sort",
    str,
    description="recoverable_usd (default, descending), cost_usd, waste_usd, gpu_hours, mfu, waste_share, started_at; "
    "a leading '-' sorts descending",
)
RUN_FILTERS = [
    OpenApiParameter("team", str, description="team slug"),
    OpenApiParameter("project", str, description="project slug"),
    OpenApiParameter("status", str, description="running, finished, failed or crashed"),
    OpenApiParameter("gpu", str, description="GPU model, as analysed or as reported"),
    OpenApiParameter("tag", str, description="runs carrying this tag"),
    OpenApiParameter("from", OpenApiTypes.DATE, description="runs billed on this day (UTC) or later"),
    OpenApiParameter("to", OpenApiTypes.DATE, description="runs billed on this day (UTC) or earlier"),
    OpenApiParameter("q", str, description="part of the run's name"),
    OpenApiParameter("launched_by", str, description="runs launched by this identity (exactly as the agent reported it)"),
    SORT,
]
PAGE = [
    OpenApiParameter("page", int, description="page number, from 1"),
    OpenApiParameter("page_size", int, description="runs per page, 1 to 200 (default 50)"),
]


def _user_view(user: Any) -> dict[str, Any] | None:
    if user is None or not getattr(user, "is_authenticated", False) or isinstance(user, ProjectPrincipal):
        return None
    profile = Profile.objects.filter(user=user).first()
    memberships = Membership.objects.filter(user=user).select_related("team").order_by("team__slug")
    return {
        "username": user.get_username(),
        "is_finance": bool(profile and profile.is_finance),
        "is_org_admin": is_org_admin(user),
        "teams": [{"slug": m.team.slug, "name": m.team.label, "role": m.role} for m in memberships],
    }


class SessionApi(APIView):
    permission_classes = [AllowAny]

    class SignInInput(serializers.Serializer[Any]):
        username = serializers.CharField(max_length=150)
        password = serializers.CharField(max_length=256, trim_whitespace=False)

    def _view(self, request: Request) -> dict[str, Any]:
        user = _user_view(request.user)
        return {
            "authenticated": user is not None,
            "user": user,
            "csrf_token": get_token(request._request),
            "sign_in": sign_in_methods(),  # what the sign-in page offers (docs/identity.md)
        }

    @extend_schema(responses=OBJ, auth=[])
    def get(self, request: Request) -> Response:
        return Response(self._view(request))

    @method_decorator(csrf_protect)
    # 429: too many wrong passwords for this username from this address (accounts/signin.py).
    # 403: password sign-in is switched off (PHANTOMHUB_LOCAL_PASSWORDS=0).
    @extend_schema(request=SignInInput, responses={200: OBJ, 403: ErrorSerializer, 429: ErrorSerializer}, auth=[])
    def post(self, request: Request) -> Response:
        if not settings.LOCAL_PASSWORDS:
            raise ApiError(PASSWORDS_OFF_CODE, PASSWORDS_OFF_MESSAGE, status_code=status.HTTP_403_FORBIDDEN)
        data = self.SignInInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(request._request, **data.validated_data)
        if user is None:
            raise ApiError("invalid_credentials", "unknown username or wrong password", fields={"password": "does not match"})
        login(request._request, user)
        request.user = user
        return Response(self._view(request))

    # 200 {"logout_url"}: a single sign-on session; the browser goes there to end the provider's too.
    @extend_schema(responses={200: OBJ, 204: None})
    def delete(self, request: Request) -> Response:
        if request.auth is None:  # a session; a token has none to end (and is no user to sign out)
            provider_logout = logout_url(request._request)
            logout(request._request)
            if provider_logout:
                return Response({"logout_url": provider_logout})
        return Response(status=status.HTTP_204_NO_CONTENT)


def _page_params(request: Request) -> tuple[int, int]:
    params = request.query_params
    return query_int(params, "page", 1, 1, 10**6), query_int(params, "page_size", 50, 1, 200)


def _run_filters(request: Request) -> dict[str, str]:
    return run_list.run_filters(request.query_params)


def _csv_response(rows: Any, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(rows, content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class RunListApi(APIView):
    @extend_schema(
        parameters=[*RUN_FILTERS, *PAGE],
        responses=OBJ,
        summary="Runs, filtered, sorted and paged",
        operation_id="portal_runs_list",
    )
    def get(self, request: Request) -> Response:
        page, page_size = _page_params(request)
        filters = _run_filters(request)
        return Response(
            selectors.runs_list(
                principal=request.user,
                filters=filters,
                sort=request.query_params.get("sort"),
                page=page,
                page_size=page_size,
            )
        )


class RunListCsvApi(APIView):
    @extend_schema(parameters=RUN_FILTERS, responses={(200, "text/csv"): str}, summary="Every run of the filtered list, as CSV")
    def get(self, request: Request) -> StreamingHttpResponse:
        filters = _run_filters(request)
        rows = selectors.runs_all(principal=request.user, filters=filters, sort=request.query_params.get("sort"))
        return _csv_response(exports.runs_csv(rows, span=selectors.billed_span(filters)), "phantomhub-runs.csv")


class RunPageApi(APIView):
    @extend_schema(responses=OBJ, summary="Everything the run page shows")
    def get(self, request: Request, run_id: uuid.UUID) -> Response | HttpResponse:
        run, windows = run_page.run_for_page(principal=request.user, run_id=run_id)
        phases = RunEvent.objects.filter(run=run, kind=EventKind.PHASE).order_by("t_start_ns")
        # The analysis came with the run (one statement, its incremental state left out): the
        # same row analysis_row reads, which is read once here, not three times.
        stored = getattr(run, "analysis", None)
        row = stored if stored is not None and stored.analysed_at is not None else None
        analysis = analysis_view(run=run, explain=True, row=row) if row is not None else None
        failure = analysis_failure(run=run, row=stored) if stored is not None else None
        if analysis is not None:
            state = "analysed"
        else:
            state = "failed" if failure is not None else "pending"
        project = run.project
        body = {
            "run": RunOutputSerializer(run).data
            | {
                "gpu_key": getattr(getattr(run, "analysis", None), "gpu_key", run.gpu_model),
                "team_name": project.team.label,
                "project_name": project.label,
                # The run's time as every page uses it: its billed span (selectors.run_row).
                "billed_from": run.allocation_start.isoformat(),
                "billed_to": selectors.run_billed_end(run, getattr(run, "analysis", None)).isoformat(),
                # The job it is an attempt of, with its place among the attempts (portal/jobs.py).
                "job": run_job_link(run),
            },
            # As the analysis API says it: analysed, pending, or failed with the error (also
            # beside older figures when only the latest re-analysis failed).
            "analysis_status": state,
            "analysis_error": failure,
            "analysis": analysis,
            # This run against its project's baseline, priced at the project's volume (waste/baseline.py).
            "baseline": run_vs_baseline(run),
            "phases": [{"name": p.name, "t_start_ns": p.t_start_ns, "dur_ns": p.dur_ns, "rank": p.rank} for p in phases],
        }
        if row is not None and windows is not None:  # the chart windows as stored (run_page.py)
            return run_page.response_with(body, "series", windows)
        return Response(body | {"series": analysis_series(run=run, row=row) if row is not None else None})


BOARD_PAGE = [
    OpenApiParameter("page", int, description="page number, from 1"),
    OpenApiParameter("page_size", int, description="rows per page, 1 to 1000 (default 100)"),
]


class LeaderboardApi(APIView):
    @extend_schema(parameters=[PERIOD, SORT, *BOARD_PAGE], responses=OBJ, summary="Teams, projects, runs or people ranked")
    def get(self, request: Request, kind: str) -> Response:
        period = period_parse(request.query_params.get("period"))
        params = request.query_params
        page, page_size = query_int(params, "page", 1, 1, 10**6), query_int(params, "page_size", 100, 1, 1000)
        if kind == "people":  # a privacy setting decides whether it exists (portal/people.py)
            board = people.people_board(
                principal=request.user, period=period, sort=params.get("sort"), limit=page_size, page=page
            )
        else:
            board = selectors.leaderboard(
                principal=request.user, kind=kind, period=period, sort=params.get("sort"), limit=page_size, page=page
            )
        return Response(board | {"closed_month": _closed_note(request, period)})


class LeaderboardCsvApi(APIView):
    @extend_schema(parameters=[PERIOD, SORT], responses={(200, "text/csv"): str}, summary="Every row of a leaderboard, as CSV")
    def get(self, request: Request, kind: str) -> StreamingHttpResponse:
        period = period_parse(request.query_params.get("period"))
        sort = request.query_params.get("sort")
        if kind == "people":
            board = people.people_board(principal=request.user, period=period, sort=sort, limit=None)
        else:
            board = selectors.leaderboard(principal=request.user, kind=kind, period=period, sort=sort, limit=None)
        return _csv_response(exports.leaderboard_csv(kind, board), f"phantomhub-{kind}-{period.label}.csv")


def _closed_note(
    request: Request, period: Period, *, team_id: int | None = None, project_id: int | None = None
) -> dict[str, Any] | None:
    """For a period that is a closed month: its frozen figures are what the page shows; this says
    so, and what the live figures say now and why (portal/finance.py)."""
    closed = finance.month_closed(period)
    if closed is None:
        return None
    return finance.closed_note(closed=closed, principal=request.user, team_id=team_id, project_id=project_id)


class OverviewApi(APIView):
    @extend_schema(parameters=[PERIOD], responses=OBJ, summary="Organization overview for a period")
    def get(self, request: Request) -> Response:
        period = period_parse(request.query_params.get("period"))
        body = selectors.overview(principal=request.user, period=period)
        return Response(body | {"closed_month": _closed_note(request, period)})


class TeamListApi(APIView):
    @extend_schema(
        responses=inline_serializer(
            "TeamVisible",
            {
                "slug": serializers.CharField(),
                "name": serializers.CharField(),
                "projects": inline_serializer(
                    "ProjectVisible", {"slug": serializers.CharField(), "name": serializers.CharField()}, many=True
                ),
            },
            many=True,
        ),
        summary="Teams and projects you may see (for filters and navigation)",
        operation_id="portal_teams_list",
    )
    def get(self, request: Request) -> Response:
        return Response(selectors.teams_visible(principal=request.user))


class DisplayNameInput(serializers.Serializer[Any]):
    display_name = serializers.CharField(max_length=100, allow_blank=True, trim_whitespace=True)


def _team_visible(request: Request, slug: str) -> Team:
    team = Team.objects.filter(slug=slug, projects__in=projects_visible(request.user)).distinct().first()
    if team is None:
        raise ApiError("not_found", "team not found", status_code=404)
    return team


def _project_visible(request: Request, slug: str) -> Project:
    project = projects_visible(request.user).filter(slug=slug).select_related("team").first()
    if project is None:
        raise ApiError("not_found", "project not found", status_code=404)
    return project


def _may_rename(user: Any, team: Team) -> None:
    if isinstance(user, ProjectPrincipal) or not services.user_may_rename(user=user, team=team):
        raise ApiError("forbidden", "display names are set by organization admins and the team's admins", status_code=403)


class TeamPageApi(APIView):
    @extend_schema(parameters=[PERIOD], responses=OBJ)
    def get(self, request: Request, slug: str) -> Response:
        team = _team_visible(request, slug)
        period = period_parse(request.query_params.get("period"))
        summary = selectors.scope_summary(principal=request.user, period=period, team=team)
        closed = _closed_note(request, period, team_id=team.pk)
        return Response({"team": {"slug": team.slug, "name": team.label, "display_name": team.display_name}, **summary,
                         "closed_month": closed})  # fmt: skip

    @extend_schema(request=DisplayNameInput, responses=OBJ, summary="Set the team's display name (blank: its slug)")
    def patch(self, request: Request, slug: str) -> Response:
        team = _team_visible(request, slug)
        _may_rename(request.user, team)
        data = DisplayNameInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.display_name_set(entity=team, display_name=data.validated_data["display_name"])
        return Response({"slug": team.slug, "name": team.label, "display_name": team.display_name})


class ProjectPageApi(APIView):
    @extend_schema(parameters=[PERIOD], responses=OBJ)
    def get(self, request: Request, slug: str) -> Response:
        project = _project_visible(request, slug)
        period = period_parse(request.query_params.get("period"))
        summary = selectors.scope_summary(principal=request.user, period=period, project=project)
        body = {"slug": project.slug, "name": project.label, "display_name": project.display_name,
                "team": project.team.slug, "team_name": project.team.label, "target_mfu": project.target_mfu}  # fmt: skip
        return Response({"project": body, **summary, "closed_month": _closed_note(request, period, project_id=project.pk)})

    @extend_schema(request=DisplayNameInput, responses=OBJ, summary="Set the project's display name (blank: its slug)")
    def patch(self, request: Request, slug: str) -> Response:
        project = _project_visible(request, slug)
        _may_rename(request.user, project.team)
        data = DisplayNameInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.display_name_set(entity=project, display_name=data.validated_data["display_name"])
        return Response({"slug": project.slug, "name": project.label, "display_name": project.display_name})


def _finance_view(request: Request, month: str) -> dict[str, Any]:
    return finance.finance_page(period=month_period(month), principal=request.user, whole_org=_finance_or_admin(request.user))


class FinanceApi(APIView):
    @extend_schema(responses=OBJ, summary="Monthly cost review per team and project")
    def get(self, request: Request, month: str) -> Response:
        return Response(_finance_view(request, month))


class FinanceCsvApi(APIView):
    @extend_schema(responses={(200, "text/csv"): str})
    def get(self, request: Request, month: str) -> HttpResponse:
        review = _finance_view(request, month)
        response = HttpResponse(exports.finance_csv(review), content_type="text/csv")
        state = "closed" if review["closed"] else "open"
        response["Content-Disposition"] = f'attachment; filename="phantomhub-finance-{month}-{state}.csv"'
        return response


class FinancePdfApi(APIView):
    @extend_schema(responses={(200, "application/pdf"): OpenApiTypes.BINARY}, summary="The monthly review as a PDF for sign-off")
    def get(self, request: Request, month: str) -> HttpResponse:
        # The same review as the page and the CSV (the reader's rows only), drawn, not recomputed.
        review = _finance_view(request, month)
        context = PdfContext(
            org=settings.ORG_NAME, reader=request.user.get_username(), sees_everything=_finance_or_admin(request.user),
            generated_at=timezone.now(), currency=settings.CURRENCY, max_rows=settings.FINANCE_PDF_MAX_ROWS,
        )  # fmt: skip
        response = HttpResponse(finance_pdf(review, context), content_type="application/pdf")
        state = "closed" if review["closed"] else "open"
        response["Content-Disposition"] = f'attachment; filename="phantomhub-finance-{month}-{state}.pdf"'
        return response


def _finance_or_admin(user: Any) -> bool:
    return not isinstance(user, ProjectPrincipal) and user_sees_everything(user)


class FinanceCloseApi(APIView):
    @extend_schema(
        request=None, responses={200: OBJ, 400: ErrorSerializer, 409: ErrorSerializer}, summary="Close a month (finance or admin)"
    )
    def post(self, request: Request, month: str) -> Response:
        if not _finance_or_admin(request.user):
            raise ApiError("forbidden", "closing a month needs finance or an organization admin", status_code=403)
        services.month_close(period=month_period(month), actor=request.user)
        return Response(_finance_view(request, month))


class FinanceReopenApi(APIView):
    class ReopenInput(serializers.Serializer[Any]):
        reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    @extend_schema(
        request=ReopenInput,
        responses={200: OBJ, 400: ErrorSerializer, 409: ErrorSerializer},
        summary="Reopen a closed month (admin), saying why",
    )
    def post(self, request: Request, month: str) -> Response:
        if isinstance(request.user, ProjectPrincipal) or not is_org_admin(request.user):
            raise ApiError("forbidden", "reopening a month needs an organization admin", status_code=403)
        data = self.ReopenInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.month_reopen(month=month_period(month).start, actor=request.user, reason=data.validated_data["reason"])
        return Response(_finance_view(request, month))


class SettingsApi(APIView):
    permission_classes = [ReadAnyoneWriteOrgAdmin]

    class SettingsInput(serializers.Serializer[Any]):
        target_mfu = serializers.FloatField(min_value=0.01, max_value=1.0, required=False)
        recoverability = serializers.DictField(child=serializers.FloatField(min_value=0, max_value=1), required=False)
        crash_after_s = serializers.IntegerField(min_value=60, max_value=7 * 86_400, required=False)
        people_leaderboard = serializers.BooleanField(required=False)

    def _view(self) -> dict[str, Any]:
        row = OrgSettings.get()
        return {
            "target_mfu": row.target_mfu,
            "recoverability": {**DEFAULT_RECOVERABILITY, **row.recoverability},
            "crash_after_s": row.crash_after_s,
            "people_leaderboard": row.people_leaderboard,
            "defaults": {"target_mfu": 0.5, "recoverability": dict(DEFAULT_RECOVERABILITY)},
        }

    @extend_schema(responses=OBJ)
    def get(self, request: Request) -> Response:
        return Response(self._view())

    @extend_schema(request=SettingsInput, responses=OBJ)
    def put(self, request: Request) -> Response:
        data = self.SettingsInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.org_settings_update(changes=dict(data.validated_data), actor=request.user)
        return Response(self._view())

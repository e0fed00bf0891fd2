"""The fleet API: node telemetry ingest, the Fleet page's reads, attribution rules, FOCUS import."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.models import Project, Team, TokenKind
from phantomhub.accounts.permissions import OrgAdminOnly, ReadAnyoneWriteOrgAdmin, TokenScopes, is_finance, is_org_admin
from phantomhub.csvfile import csv_lines
from phantomhub.errors import ApiError, invalid
from phantomhub.fleet import focus, selectors, services
from phantomhub.fleet.models import AttributionJob, AttributionRule, InvoiceImport, MatchKind
from phantomhub.fleet.wire import node_batch_parse
from phantomhub.periods import period_parse
from phantomhub.pricing.api import CsvParser, csv_import_refused
from phantomhub.schema import ErrorSerializer

OBJ = OpenApiTypes.OBJECT
PERIOD = OpenApiParameter("period", str, description="7d, 30d (default), 90d, a month YYYY-MM, or days YYYY-MM-DD..YYYY-MM-DD")
MAX_NODE_BODY_BYTES = 8 * 1024 * 1024
MAX_RULES = 500

NodeIngestResult = inline_serializer(
    "NodeIngestResult",
    {
        "node": serializers.CharField(),
        "stored": inline_serializer("NodeStored", {"gpu": serializers.IntegerField(), "processes": serializers.IntegerField()}),
        "duplicates": serializers.IntegerField(help_text="entries already stored (a replay)"),
    },
)


def _within_retention(times_ns: list[int]) -> None:
    """Raw samples are kept FLEET_RAW_DAYS: an older one could not be re-derived with its day."""
    oldest = int(timezone.now().timestamp() - settings.FLEET_RAW_DAYS * 86_400) * 10**9
    for i, t in enumerate(times_ns):
        if t < oldest:
            raise invalid(f"gpus.t_ns[{i}]", f"older than the {settings.FLEET_RAW_DAYS} days raw node samples are kept")


class NodeSamplesApi(APIView):
    max_body_bytes = MAX_NODE_BODY_BYTES

    @extend_schema(
        request=OBJ,
        responses={200: NodeIngestResult, 400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 413: ErrorSerializer},
        summary="Store one node collector interval: GPU and process samples (columnar, idempotent); "
        "403 naming node.hostname when the node token does not name the node",
    )
    def post(self, request: Request) -> Response:
        if getattr(request.auth, "kind", None) != TokenKind.NODE:
            raise ApiError("forbidden", "node telemetry needs a node token", status_code=403)
        batch = node_batch_parse(request.data)
        _within_retention(batch.gpus["t_ns"])
        return Response(services.node_samples_ingest(batch=batch, token=request.auth).as_dict())


class FleetSummaryApi(APIView):
    @extend_schema(
        parameters=[PERIOD], responses=OBJ, summary="The Fleet page: coverage, classes, idle-held GPUs now, top nodes and holders"
    )
    def get(self, request: Request) -> Response:
        period = period_parse(request.query_params.get("period"))
        return Response(selectors.fleet_summary(period=period, visible=selectors.fleet_teams_visible(request.user)))


CSV_TABLES = {
    "nodes": (["node", "gpu_model", "gpu_count", "provider", "region", "billed_gpu_hours", "coverage", "cost_usd",
               "instrumented_usd", "busy_uninstrumented_usd", "idle_held_usd", "empty_usd", "unknown_gpu_hours",
               "collector_sent", "collector_spooled", "collector_dropped", "counters_at"],
              lambda period, visible: selectors.fleet_nodes(period)),
    "holders": (["holder", "kind", "team", "project", "gpu_hours", "busy_uninstrumented_usd", "idle_held_usd", "cost_usd"],
                lambda period, visible: selectors.fleet_holders(period, visible=visible)),
    "teams": (["team", "team_name", "instrumented_usd", "busy_uninstrumented_usd", "idle_held_usd", "empty_usd"],
              lambda period, visible: selectors.fleet_teams(period, visible=visible)),
}  # fmt: skip


class FleetCsvApi(APIView):
    @extend_schema(
        parameters=[PERIOD], responses={(200, "text/csv"): str}, summary="A Fleet table (nodes, holders, teams) as CSV"
    )
    def get(self, request: Request, table: str) -> StreamingHttpResponse:
        if table not in CSV_TABLES:
            raise ApiError("not_found", f"no fleet table {table!r} (nodes, holders, teams)", status_code=404)
        period = period_parse(request.query_params.get("period"))
        columns, read = CSV_TABLES[table]
        rows = read(period, selectors.fleet_teams_visible(request.user))  # holders and teams: the viewer's
        response = StreamingHttpResponse(
            csv_lines(columns, ([row.get(c) for c in columns] for row in rows)), content_type="text/csv"
        )
        response["Content-Disposition"] = f'attachment; filename="phantomhub-fleet-{table}-{period.label}.csv"'
        return response


def _rule_out(rule: AttributionRule) -> dict[str, Any]:
    return {
        "match": rule.match, "key": rule.key, "pattern": rule.pattern,
        "team": rule.team.slug if rule.team else None, "project": rule.project.slug if rule.project else None,
    }  # fmt: skip


def rules_from_body(body: Any) -> list[services.RuleInput]:
    """``{"rules": [...]}`` checked field by field (a 400 naming the first bad one), as the rules
    endpoints and the demo seeding read it."""
    if not isinstance(body, dict) or set(body) - {"rules"} or not isinstance(body.get("rules"), list):
        raise invalid("rules", 'send {"rules": [...]} (an ordered list)')
    raw = body["rules"]
    if len(raw) > MAX_RULES:
        raise invalid("rules", f"at most {MAX_RULES} rules")
    teams = {t.slug: t for t in Team.objects.all()}
    projects = {p.slug: p for p in Project.objects.select_related("team")}
    out = []
    for i, item in enumerate(raw):
        where = f"rules[{i}]"
        if not isinstance(item, dict):
            raise invalid(where, "must be an object")
        unknown = sorted(set(item) - {"match", "key", "pattern", "team", "project"})
        if unknown:
            raise invalid(f"{where}.{unknown[0]}", "unknown field")
        match = item.get("match")
        if match not in MatchKind.values:
            raise invalid(f"{where}.match", f"must be one of {', '.join(MatchKind.values)}")
        key = item.get("key") or ""
        if not isinstance(key, str) or len(key) > 128 or (match == MatchKind.K8S_LABEL and not key):
            raise invalid(f"{where}.key", "a k8s_label rule names its label (at most 128 characters)")
        pattern = item.get("pattern")
        if not isinstance(pattern, str) or not pattern or len(pattern) > 200:
            raise invalid(f"{where}.pattern", "must be a non-empty string of at most 200 characters")
        team_slug, project_slug = item.get("team"), item.get("project")
        for name, value in (("team", team_slug), ("project", project_slug)):
            if value is not None and not isinstance(value, str):
                raise invalid(f"{where}.{name}", "must be a slug or null")
        if team_slug is None and project_slug is None:
            raise invalid(f"{where}.team", "a rule names a team, a project, or both")
        team = teams.get(team_slug) if team_slug is not None else None
        if team_slug is not None and team is None:
            raise invalid(f"{where}.team", f"no team {team_slug!r}")
        project = projects.get(project_slug) if project_slug is not None else None
        if project_slug is not None and project is None:
            raise invalid(f"{where}.project", f"no project {project_slug!r}")
        if team and project and project.team_id != team.pk:
            raise invalid(f"{where}.project", f"project {project.slug!r} belongs to team {project.team.slug!r}")
        out.append(services.RuleInput(match, key, pattern, team, project))
    return out


def _job_out(job: AttributionJob) -> dict[str, Any]:
    return {
        "id": job.pk, "status": job.status, "owners_total": job.owners_total, "owners_done": job.owners_done,
        "owners_moved": job.owners_moved, "error": job.error or None, "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }  # fmt: skip


class AttributionRulesApi(APIView):
    permission_classes = [ReadAnyoneWriteOrgAdmin]

    @extend_schema(
        responses=OBJ,
        summary="The attribution rules, in order (first match wins); people other than organization admins and "
        "finance see the rules of their teams (`hidden`: how many others); admins also get the latest job",
    )
    def get(self, request: Request) -> Response:
        rules = list(AttributionRule.objects.select_related("team", "project").order_by("position"))
        visible = selectors.fleet_teams_visible(request.user)
        shown = [r for r in rules if visible is None or r.team_id in visible]
        body: dict[str, Any] = {"rules": [_rule_out(r) for r in shown], "hidden": len(rules) - len(shown)}
        if is_org_admin(request.user):
            job = AttributionJob.objects.order_by("-pk").first()
            body["job"] = _job_out(job) if job else None
        return Response(body)

    @extend_schema(
        request=OBJ,
        responses={202: OBJ},
        summary="Replace the attribution rules; the fleet's time is re-attributed by a background job (202, its id "
        "and status; progress at GET /api/v1/fleet/rules/jobs/{id})",
    )
    def put(self, request: Request) -> Response:
        job = services.rules_save(rules=rules_from_body(request.data), actor=request.user)
        rules = AttributionRule.objects.select_related("team", "project").order_by("position")
        body = {"rules": [_rule_out(r) for r in rules], "hidden": 0, "job": _job_out(job)}
        return Response(body, status=status.HTTP_202_ACCEPTED)


class AttributionJobApi(APIView):
    permission_classes = [OrgAdminOnly]

    @extend_schema(responses={200: OBJ, 404: ErrorSerializer}, summary="A re-attribution job: status and progress")
    def get(self, request: Request, job_id: int) -> Response:
        job = AttributionJob.objects.filter(pk=job_id).first()
        if job is None:
            raise ApiError("not_found", f"no attribution job {job_id}", status_code=404)
        return Response(_job_out(job))


class AttributionPreviewApi(APIView):
    permission_classes = [ReadAnyoneWriteOrgAdmin]

    @extend_schema(
        request=OBJ, responses=OBJ, summary="What the last day's fleet time would map to under these rules (nothing saved)"
    )
    def post(self, request: Request) -> Response:
        rules = [r.as_rule() for r in rules_from_body(request.data)]
        return Response(selectors.rules_preview(rules=rules))


class FinanceOrAdmin(TokenScopes):
    """Finance people and organization admins (importing the invoice is finance's job)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if is_org_admin(request.user) or is_finance(request.user):
            return True
        self.message = "this needs finance or an organization admin"
        return False


# `errors` cannot be a declared field of a Serializer subclass (it is the serializer's own): the
# schema's row is built by inline_serializer, and the list answers that same class, many.
InvoiceImportRow = inline_serializer(
    "InvoiceImportRow",
    {
        "id": serializers.IntegerField(),
        "filename": serializers.CharField(),
        "status": serializers.ChoiceField(choices=["queued", "running", "done", "failed"]),
        "lines": serializers.IntegerField(help_text="lines of the file (estimated from its newlines until checked)"),
        "lines_checked": serializers.IntegerField(help_text="progress of a running import"),
        "lines_new": serializers.IntegerField(),
        "matched_lines": serializers.IntegerField(),
        "errors": serializers.ListField(child=serializers.CharField(), help_text="a failed import's first errors"),
        "error_count": serializers.IntegerField(help_text="all of a failed import's errors"),
        "imported_at": serializers.DateTimeField(),
        "updated_at": serializers.DateTimeField(),
        "sha256": serializers.CharField(),
    },
)


class InvoiceImportApi(APIView):
    permission_classes = [FinanceOrAdmin]
    parser_classes = [CsvParser]

    @property
    def max_csv_bytes(self) -> int:
        return int(settings.FOCUS_MAX_BYTES)

    @extend_schema(
        responses=type(InvoiceImportRow)(many=True),
        summary="Invoice imports (FOCUS CSV), newest first: status, progress, errors",
    )
    def get(self, request: Request) -> Response:
        rows = InvoiceImport.objects.defer("text").order_by("-imported_at", "-pk")[:200]
        return Response([focus.invoice_import_view(r) for r in rows])

    @extend_schema(
        request={"text/csv": str},
        parameters=[OpenApiParameter("filename", str, description="the file's name, kept with the import")],
        responses={201: OBJ, 200: OBJ, 202: InvoiceImportRow, 400: ErrorSerializer, 413: ErrorSerializer},
        summary=(
            "Import a FOCUS CSV invoice: all or nothing, idempotent (201 imported, 200 already imported; "
            "202 queued: a file over PHANTOMHUB_FOCUS_INLINE_LINES lines is a background job, listed by GET)"
        ),
    )
    def post(self, request: Request) -> Response:
        text, filename = str(request.data), request.query_params.get("filename", "")
        if focus.lines_estimate(text) > settings.FOCUS_INLINE_LINES:
            try:
                job, queued = focus.invoice_import_queue(text=text, filename=filename, actor=request.user)
            except ValueError as exc:  # a NUL character: refused before the job would store the file
                raise csv_import_refused([str(exc)], 1) from None
            body = focus.invoice_import_view(job) | {"duplicate_file": not queued}
            return Response(body, status=status.HTTP_202_ACCEPTED if queued else status.HTTP_200_OK)
        result = focus.focus_import(text=text, filename=filename, actor=request.user)
        if result.errors:
            raise csv_import_refused(result.errors, result.error_count)
        return Response(result.as_dict(), status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK)

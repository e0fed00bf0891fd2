"""Analysis read API for a run."""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.telemetry.selectors import run_get_visible
from phantomhub.waste.selectors import analysis_failure, analysis_series, analysis_view

PENDING = {"status": "pending", "analysed_at": None, "complete": False}


# The response shape, for the OpenAPI schema (the view answers the selector's dict as it is).
class StretchWindowSerializer(serializers.Serializer[dict]):
    t_start_ns = serializers.IntegerField()
    t_end_ns = serializers.IntegerField()
    steps = serializers.FloatField(help_text="steps per rank in the stretch")


class EvidenceSerializer(serializers.Serializer[dict]):
    kind = serializers.ChoiceField(
        ["own_stretch", "peers", "straggler", "project_median", "none"],
        help_text="what demonstrated the reference; none: nothing did, and nothing is called recoverable",
    )
    summary = serializers.CharField(help_text="the evidence in one or two plain sentences")
    unit = serializers.CharField(help_text="unit of the values below: ms/step, MFU or s")
    run_value = serializers.FloatField(allow_null=True, help_text="this run's own figure")
    reference_value = serializers.FloatField(allow_null=True, help_text="the reference recoverable_usd is priced at")
    low_reference = serializers.FloatField(allow_null=True, help_text="the conservative reference (recoverable_low_usd)")
    high_reference = serializers.FloatField(allow_null=True, help_text="the best reference (recoverable_high_usd)")
    window = StretchWindowSerializer(allow_null=True, help_text="own_stretch: the stretch of the run used")
    peer_run_ids = serializers.ListField(child=serializers.UUIDField(), help_text="peers: the runs compared")
    peer_runs = serializers.ListField(child=serializers.DictField(), help_text="the same runs as {id, name}")
    capped = serializers.BooleanField(help_text="the organization's cap cut the figure")


class CategorySerializer(serializers.Serializer[dict]):
    gpu_seconds = serializers.FloatField()
    usd = serializers.FloatField()
    share = serializers.FloatField(help_text="of billed GPU-seconds")
    cap = serializers.FloatField(help_text="the organization's cap on the share called recoverable (default 1)")
    recoverable_usd = serializers.FloatField(help_text="what the run would not have spent at the reference")
    recoverable_low_usd = serializers.FloatField()
    recoverable_high_usd = serializers.FloatField()
    evidence = EvidenceSerializer()


class RecurrenceSerializer(serializers.Serializer[dict]):
    kind = serializers.ChoiceField(["recurring", "one_off"])
    project_gpu_hours_30d = serializers.FloatField(help_text="the project's GPU-hours in the 30 days before the run ended")
    other_runs_30d = serializers.IntegerField()
    run_gpu_hours = serializers.FloatField()


class RecommendationSerializer(serializers.Serializer[dict]):
    code = serializers.CharField()
    title = serializers.CharField()
    category = serializers.CharField()
    severity = serializers.ChoiceField(["high", "medium", "low", "info"])
    evidence = serializers.ListField(child=serializers.DictField())
    fixes = serializers.ListField(child=serializers.CharField())
    saving_usd = serializers.FloatField(
        allow_null=True, help_text="what this run would have saved: the recoverable dollars it claims (null: not priced)"
    )
    claims = serializers.DictField(child=serializers.FloatField(), help_text="category -> recoverable USD claimed")
    saving_usd_per_month = serializers.FloatField(
        allow_null=True,
        help_text="saving_usd / run GPU-hours x the project's GPU-hours over the trailing 30 days; null for a one-off run",
    )
    recurrence = RecurrenceSerializer()
    explain = serializers.DictField(allow_null=True)


class DroppedRowsSerializer(serializers.Serializer[dict]):
    non_rising_start = serializers.IntegerField(help_text="rows left out: start not after the rank's previous row")
    reused_step = serializers.IntegerField(help_text="rows refused: step number stored before with another start")


class AnalysisSerializer(serializers.Serializer[dict]):
    run_id = serializers.UUIDField()
    cost_usd = serializers.FloatField()
    gpu_seconds = serializers.FloatField()
    gpu_hours = serializers.FloatField()
    mfu = serializers.FloatField(allow_null=True)
    waste_usd = serializers.FloatField()
    recoverable_usd = serializers.FloatField(help_text="Σ categories' recoverable_usd")
    recoverable_low_usd = serializers.FloatField()
    recoverable_high_usd = serializers.FloatField()
    categories = serializers.DictField(child=CategorySerializer())
    recommendations = RecommendationSerializer(many=True)
    dropped_rows = DroppedRowsSerializer()
    warnings = serializers.ListField(child=serializers.CharField())
    analysed_at = serializers.DateTimeField()
    analysis_error = serializers.DictField(
        allow_null=True, help_text="the last re-analysis failed: {message, failures, retry_at}; the figures are older"
    )
    complete = serializers.BooleanField()
    explain = serializers.DictField(required=False, help_text="with ?explain=1: formula and inputs of each figure")


class RunAnalysisApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("explain", OpenApiTypes.BOOL, description="add formula and inputs of each figure")],
        responses={200: AnalysisSerializer, 202: OpenApiTypes.OBJECT},
        summary="The run's waste analysis (202 while the first analysis is pending, or failed: status and error say so)",
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = run_get_visible(principal=request.user, run_id=run_id)
        explain = request.query_params.get("explain", "").lower() in ("1", "true", "yes")
        view = analysis_view(run=run, explain=explain)
        if view is None:
            failure = analysis_failure(run=run)
            if failure is not None:  # not analysed yet because it failed: say why, and when it retries
                return Response({**PENDING, "status": "failed", "error": failure}, status=status.HTTP_202_ACCEPTED)
            return Response(PENDING, status=status.HTTP_202_ACCEPTED)
        return Response(view)


class RunSeriesApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT}, summary="Windowed chart series")
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = run_get_visible(principal=request.user, run_id=run_id)
        series = analysis_series(run=run)
        if series is None:
            return Response(PENDING, status=status.HTTP_202_ACCEPTED)
        return Response(series)

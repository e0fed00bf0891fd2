"""Analysis read API for a run."""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.telemetry.selectors import run_get_visible
from phantomhub.waste.selectors import analysis_series, analysis_view

PENDING = {"status": "pending", "analysed_at": None, "complete": False}


class RunAnalysisApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("explain", OpenApiTypes.BOOL, description="add formula and inputs of each figure")],
        responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT},
        summary="The run's waste analysis (202 while the first analysis is pending)",
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = run_get_visible(principal=request.user, run_id=run_id)
        explain = request.query_params.get("explain", "").lower() in ("1", "true", "yes")
        view = analysis_view(run=run, explain=explain)
        if view is None:
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

"""Price book and GPU catalog API: read for everyone signed in, write for organization admins."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.permissions import OrgAdminOrFinanceReads, ReadAnyoneWriteOrgAdmin
from phantomhub.errors import ApiError
from phantomhub.pricing import services
from phantomhub.pricing.catalog import gpu_catalog
from phantomhub.pricing.models import PriceAudit, PriceEntry
from phantomhub.schema import ErrorSerializer
from phantomhub.telemetry.models import PricingTier


class PriceSerializer(serializers.ModelSerializer[PriceEntry]):
    class Meta:
        model = PriceEntry
        fields = [
            "id", "gpu", "provider", "region", "tier", "usd_per_gpu_hour", "effective_from", "effective_to",
            "is_example", "note", "updated_at",
        ]  # fmt: skip


class PriceInputSerializer(serializers.Serializer[Any]):
    gpu = serializers.CharField(max_length=128)
    usd_per_gpu_hour = serializers.DecimalField(
        max_digits=10, decimal_places=4, min_value=Decimal(0), max_value=services.MAX_USD_PER_GPU_HOUR
    )
    provider = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    region = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    tier = serializers.ChoiceField(choices=PricingTier.choices, required=False, default=PricingTier.ON_DEMAND)
    effective_from = serializers.DateTimeField(required=False)
    note = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


def _price_error(exc: services.PriceError) -> ApiError:
    return ApiError("invalid", str(exc), fields={exc.field: exc.message})


CONFIRM_CLOSED = OpenApiParameter(
    "confirm_closed",
    bool,
    description="1: go ahead although the change reaches into a closed finance month (otherwise 409 naming them)",
)


def _confirmed(request: Request) -> bool:
    """`?confirm_closed=1` or a body field `confirm_closed: true`."""
    flag = request.query_params.get("confirm_closed")
    if flag is None and isinstance(request.data, dict):
        flag = request.data.get("confirm_closed")
    return str(flag).strip().lower() in ("1", "true", "yes")


def _closed_reached(request: Request, months: list[str]) -> None:
    """Refuse a change that reprices a closed month unless confirmed: the month keeps its closed
    figures either way, and its pages show the live difference as an adjustment."""
    if months and not _confirmed(request):
        named = ", ".join(months)
        raise ApiError(
            "closed_month",
            f"this change reprices closed month{'s' if len(months) > 1 else ''} {named}: their closed figures stay, and "
            "finance shows the difference as an adjustment. Send confirm_closed=1 to go ahead",
            fields={"confirm_closed": f"required: reaches closed {named}"},
            status_code=status.HTTP_409_CONFLICT,
        )


class GpuListApi(APIView):
    @extend_schema(responses=inline_serializer("Gpu", {"key": serializers.CharField()}, many=True))
    def get(self, request: Request) -> Response:
        return Response(
            [
                {
                    "key": spec.key,
                    "vendor": spec.vendor,
                    "name": spec.name,
                    "memory_bytes": spec.memory_bytes,
                    "peak_tflops": dict(spec.peak_tflops),
                    "sources": list(spec.sources),
                    "notes": spec.notes,
                }
                for spec in gpu_catalog()
            ]
        )


class PriceListApi(APIView):
    permission_classes = [ReadAnyoneWriteOrgAdmin]

    @extend_schema(responses=PriceSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(PriceSerializer(PriceEntry.objects.all(), many=True).data)

    @extend_schema(
        request=PriceInputSerializer, parameters=[CONFIRM_CLOSED], responses={201: PriceSerializer, 409: ErrorSerializer}
    )
    def post(self, request: Request) -> Response:
        serializer = PriceInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = {k: serializer.validated_data.get(k) for k in ("gpu", "provider", "region", "tier", "effective_from")}
        _closed_reached(request, services.price_set_reach(**key))
        try:
            entry = services.price_set(**serializer.validated_data, actor=request.user, actor_label="api")
        except services.PriceError as exc:
            raise _price_error(exc) from None
        return Response(PriceSerializer(entry).data, status=status.HTTP_201_CREATED)


class PriceDetailApi(APIView):
    permission_classes = [ReadAnyoneWriteOrgAdmin]

    class PatchSerializer(serializers.Serializer[Any]):
        usd_per_gpu_hour = serializers.DecimalField(
            max_digits=10, decimal_places=4, min_value=Decimal(0), max_value=services.MAX_USD_PER_GPU_HOUR, required=False
        )
        effective_to = serializers.DateTimeField(required=False, allow_null=True)
        note = serializers.CharField(max_length=200, required=False, allow_blank=True)
        is_example = serializers.BooleanField(required=False)

    def _entry(self, price_id: int) -> PriceEntry:
        entry = PriceEntry.objects.filter(pk=price_id).first()
        if entry is None:
            raise ApiError("not_found", "price not found", status_code=404)
        return entry

    @extend_schema(responses=PriceSerializer)
    def get(self, request: Request, price_id: int) -> Response:
        return Response(PriceSerializer(self._entry(price_id)).data)

    @extend_schema(request=PatchSerializer, parameters=[CONFIRM_CLOSED], responses={200: PriceSerializer, 409: ErrorSerializer})
    def patch(self, request: Request, price_id: int) -> Response:
        entry = self._entry(price_id)
        serializer = self.PatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        to = serializer.validated_data.get("effective_to")
        if to is not None and to <= entry.effective_from:
            raise ApiError(
                "invalid",
                "effective_to: must be after effective_from",
                fields={"effective_to": "must be after effective_from"},
            )
        _closed_reached(request, services.price_update_reach(entry=entry, changes=serializer.validated_data))
        try:
            entry = services.price_update(entry=entry, changes=serializer.validated_data, actor=request.user, actor_label="api")
        except services.PriceError as exc:
            raise _price_error(exc) from None
        return Response(PriceSerializer(entry).data)

    @extend_schema(parameters=[CONFIRM_CLOSED], responses={204: None, 409: ErrorSerializer})
    def delete(self, request: Request, price_id: int) -> Response:
        entry = self._entry(price_id)
        _closed_reached(request, services.price_delete_reach(entry=entry))
        services.price_delete(entry=entry, actor=request.user, actor_label="api")
        return Response(status=status.HTTP_204_NO_CONTENT)


MAX_CSV_BYTES = 5 * 1024 * 1024
MAX_CSV_ERRORS = 20  # an error body names this many lines, then counts the rest


class CsvParser(BaseParser):
    """A UTF-8 CSV body, at most MAX_CSV_BYTES (or the view's `max_csv_bytes`), as text."""

    media_type = "text/csv"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        cap = int(getattr((parser_context or {}).get("view"), "max_csv_bytes", MAX_CSV_BYTES))
        raw = stream.read(cap + 1) if stream is not None else b""
        if len(raw) > cap:
            raise ApiError("payload_too_large", f"CSV over {cap / 2**20:g} MiB", status_code=413)
        try:
            return str(raw.decode("utf-8-sig"))
        except UnicodeDecodeError:
            raise ApiError("invalid", "body: CSV must be UTF-8", fields={"body": "not UTF-8"}) from None


def csv_import_refused(errors: list[str], count: int) -> ApiError:
    """A refused CSV import's 400: the first MAX_CSV_ERRORS errors (`line 7: ...`), each under its
    line in `fields`, and how many more there are, so a file wrong on every line answers a page,
    not megabytes."""
    shown = errors[:MAX_CSV_ERRORS]
    fields = {err.split(":", 1)[0]: err.split(":", 1)[1].strip() if ":" in err else err for err in shown}
    message = "; ".join(shown)
    if count > len(shown):
        message += f"; … and {count - len(shown):,} more"
    return ApiError("invalid", message, fields=fields)


class PriceCsvApi(APIView):
    permission_classes = [ReadAnyoneWriteOrgAdmin]
    parser_classes = [CsvParser]

    @extend_schema(responses={(200, "text/csv"): str})
    def get(self, request: Request) -> HttpResponse:
        response = HttpResponse(services.prices_export_csv(), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="phantomhub-prices.csv"'
        return response

    @extend_schema(
        request={"text/csv": str},
        parameters=[CONFIRM_CLOSED],
        responses={201: inline_serializer("PriceImport", {"created": serializers.IntegerField()}), 409: ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        _closed_reached(request, services.prices_import_reach(text=str(request.data)))
        result = services.prices_import_csv(text=str(request.data), actor=request.user, actor_label="csv import")
        if result.errors:
            raise csv_import_refused(result.errors, len(result.errors))
        return Response({"created": result.created}, status=status.HTTP_201_CREATED)


class PriceAuditApi(APIView):
    permission_classes = [OrgAdminOrFinanceReads]

    @extend_schema(responses=inline_serializer("PriceAudit", {"action": serializers.CharField()}, many=True))
    def get(self, request: Request) -> Response:
        rows = PriceAudit.objects.select_related("actor")[:500]
        return Response(
            [
                {
                    "id": row.pk,
                    "entry_id": row.entry_id,
                    "action": row.action,
                    "actor": row.actor.get_username() if row.actor else row.actor_label,
                    "at": row.at.isoformat(),
                    "before": row.before,
                    "after": row.after,
                }
                for row in rows
            ]
        )

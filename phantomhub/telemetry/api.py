"""Ingest and read-back API. Thin views: parse, authorise, call one service, answer."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.throttles import ingest_rows_charge
from phantomhub.errors import ApiError, fields_within, invalid, query_int
from phantomhub.schema import ErrorSerializer
from phantomhub.telemetry import selectors, services, storage
from phantomhub.telemetry.bounds import MAX_SPAN, BoundsError, counters_check, json_check, moment_check
from phantomhub.telemetry.columns import EPOCH_NS_MAX, EPOCH_NS_MIN, SAMPLE_COLUMNS, STEP_COLUMNS, columns_rows
from phantomhub.telemetry.gpus import rank_gpus_parse, rank_gpus_store
from phantomhub.telemetry.models import EndCause, EventKind, JobSource, PricingTier, Run, RunStatus

MAX_EVENTS = 1000
# Whole-body caps of the small endpoints, far above any real body (config and environment are
# at most 64 KiB each; 1,000 events), checked while reading and inflating: a compressed body
# holding millions of values is refused before it is parsed, not after.
MAX_RUN_BODY_BYTES = 1024 * 1024
MAX_EVENTS_BODY_BYTES = 4 * 1024 * 1024


IngestResultSerializer = inline_serializer(
    "IngestResult", {"accepted": serializers.IntegerField(), "duplicates": serializers.IntegerField()}
)
StepIngestResultSerializer = inline_serializer(
    "StepIngestResult",
    {
        "accepted": serializers.IntegerField(help_text="rows stored"),
        "duplicates": serializers.IntegerField(help_text="rows already stored with the same start (a replay)"),
        "reused_step": serializers.IntegerField(help_text="rows refused: step number stored with another start"),
    },
)
# Ingest is rate limited per token (phantomhub/accounts/throttles.py); the other errors every
# operation documents come from phantomhub.schema.
_ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer, 413: ErrorSerializer, 429: ErrorSerializer}


def _writer_project(request: Request) -> Any:
    if not isinstance(request.user, ProjectPrincipal):
        raise ApiError("forbidden", "writing telemetry needs a project token", status_code=403)
    return request.user.project


# What the write path reads of a run (its config and environment, up to 64 KiB of JSON each, are
# never decoded for a batch).
# In the model's field order, the order Model.from_db takes values in.
_WRITE_NAMES = {"id", "project_id", "status", "allocation_start"}
_WRITE_FIELDS = tuple(f.attname for f in Run._meta.concrete_fields if f.attname in _WRITE_NAMES)


def _run_for_write(request: Request, run_id: uuid.UUID) -> Run:
    project = _writer_project(request)
    # By id first, in one raw statement (every batch comes here: the ORM's query building cost
    # about 0.5 ms of CPU a request); else the id its client registered it by.
    sql = f"SELECT {', '.join(_WRITE_FIELDS)} FROM telemetry_run WHERE id = %s AND project_id = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [storage.run_param(run_id), project.pk])
        row = cursor.fetchone()
    run = _write_run_from_row(row) if row else None
    run = run or selectors.run_find(Run.objects.filter(project=project).only(*_WRITE_FIELDS), run_id)
    if run is None:
        raise services.run_not_found()
    return run


_WRITE_CONVERTERS: dict[str, list[tuple[int, list[Any], Any]]] = {}


def _write_run_from_row(row: tuple[Any, ...]) -> Run:
    """The Run of a row of _WRITE_FIELDS, through the converters the ORM applies to those fields:
    none on PostgreSQL (psycopg gives them their Python types: a plain cursor and from_db, ~0.15 ms
    less than a raw queryset's machinery), the uuid and datetime ones on SQLite. Resolved once."""
    converters = _WRITE_CONVERTERS.get(connection.alias)
    if converters is None:
        compiler = Run.objects.all().query.get_compiler(connection=connection)
        columns = [Run._meta.get_field(name).get_col(Run._meta.db_table) for name in _WRITE_FIELDS]  # type: ignore[union-attr]
        converters = [(i, fns, e) for i, (fns, e) in compiler.get_converters(columns).items()]
        _WRITE_CONVERTERS[connection.alias] = converters
    values = list(row)
    for i, functions, expression in converters:
        for convert in functions:
            values[i] = convert(values[i], expression, connection)
    return Run.from_db(connection.alias, _WRITE_FIELDS, values)


def _object(body: Any, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise invalid(unknown[0], f"unknown field (allowed: {', '.join(sorted(allowed))})")
    for name in sorted(required - set(body)):
        raise invalid(name, "this field is required")
    return body


def _int_field(body: dict[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(name, f"must be an integer in [{lo}, {hi}]")
    return value


def _host(body: dict[str, Any]) -> str | None:
    host = body.get("host")
    if host is not None and (not isinstance(host, str) or len(host) > 255):
        raise invalid("host", "must be a string of at most 255 characters")
    return host


class FastJSONRenderer(JSONRenderer):
    """JSON through orjson (several times faster than the standard library on the ingest answers);
    what orjson does not know (a Decimal, a lazy string) goes through DRF's encoder."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, default=self._fallback)

    def _fallback(self, value: Any) -> Any:
        return self.encoder_class().default(value)


class IngestApiView(APIView):
    renderer_classes = [FastJSONRenderer]


class RankBatchApiView(IngestApiView):
    """One rank's rows: inflated bodies capped at MAX_BATCH_INFLATED_BYTES (the agent's are at
    most its batch_max_bytes, 1 MiB; 10,000 steps and 10,000 samples as plain arrays ~5 MiB)."""

    @property
    def max_inflated_bytes(self) -> int:
        return int(settings.MAX_BATCH_INFLATED_BYTES)


def _rows_admit(request: Request, rows: int, field: str) -> None:
    """A request's rows (steps, samples, events) within MAX_REQUEST_ROWS (413 naming `field`),
    then counted against its token's rows budget (429 past it): before any row is checked."""
    limit = settings.MAX_REQUEST_ROWS
    if rows > limit:
        message = f"{rows:,} rows is over the limit of {limit:,} per request (send them in more requests)"
        raise ApiError("payload_too_large", f"{field}: {message}", fields={field: message}, status_code=413)
    ingest_rows_charge(request, rows)


def _rows_sent(body: Any) -> int:
    """Rows one rank's batch body claims: its steps, samples and events, unchecked."""
    if not isinstance(body, dict):
        return 0
    events = body.get("events")
    return columns_rows(body.get("steps")) + columns_rows(body.get("samples")) + (len(events) if isinstance(events, list) else 0)


class HealthApi(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(responses=inline_serializer("Health", {"status": serializers.CharField()}), auth=[])
    def get(self, request: Request) -> Response:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return Response({"status": "ok"})


class StrictSerializer(serializers.Serializer[Any]):
    """Refuses fields it does not know, so a typo is a 400 naming it, not silently dropped."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: ["unknown field"]})
        return super().to_internal_value(data)


def _bounds_error(exc: BoundsError) -> serializers.ValidationError:
    return serializers.ValidationError({exc.path: exc.message} if exc.path else exc.message)


class BoundedJSONObjectField(serializers.DictField):
    """A JSON object of bounded size, value count, numbers (finite, 64-bit integers)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        try:
            json_check(data)
        except BoundsError as exc:
            raise _bounds_error(exc) from None
        return super().to_internal_value(data)


class BoundedDateTimeField(serializers.DateTimeField):
    """A moment within the range of stored telemetry (2000-01-01 to 2100-01-01)."""

    def to_internal_value(self, value: Any) -> Any:
        moment = super().to_internal_value(value)
        try:
            moment_check(moment)
        except BoundsError as exc:
            raise _bounds_error(exc) from None
        return moment


class LauncherField(serializers.RegexField):
    """Who launched the run: a JSON string (a number is refused, not turned into a name) of 1 to
    128 printable characters, blanks around it removed."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string, not {type(data).__name__}")
        return super().to_internal_value(data)


class JobInputSerializer(StrictSerializer):
    key = serializers.RegexField(
        r"^[^\x00-\x1f\x7f]+$",
        max_length=200,
        error_messages={"invalid": "must be 1-200 printable characters"},
        help_text="the job's identity within the project: `job=` or the launcher's (torchrun rendezvous id, Slurm job id, ...)",
    )
    attempt = serializers.IntegerField(
        min_value=0, max_value=1_000_000, required=False, help_text="the launcher's restart count (0: the first attempt)"
    )
    source = serializers.ChoiceField(choices=JobSource.choices, required=False)  # type: ignore[assignment]  # the wire name


class RunInputSerializer(StrictSerializer):
    id = serializers.UUIDField(help_text="the client's id for the run, unique within the project (the run's client_id)")
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    project = serializers.SlugField(required=False)
    team = serializers.SlugField(required=False)
    tags = serializers.ListField(child=serializers.CharField(max_length=64), max_length=64, required=False)
    gpu_model = serializers.CharField(max_length=128, required=False, allow_blank=True)
    gpu_count = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    world_size = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    nodes = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
    provider = serializers.CharField(max_length=64, required=False, allow_blank=True)
    region = serializers.CharField(max_length=64, required=False, allow_blank=True)
    pricing_tier = serializers.ChoiceField(choices=PricingTier.choices, required=False)
    dtype = serializers.CharField(max_length=16, required=False, allow_blank=True)
    allocation_start = BoundedDateTimeField(required=False)
    started_at = BoundedDateTimeField(required=False)
    config = BoundedJSONObjectField(required=False)
    environment = BoundedJSONObjectField(required=False)
    job = JobInputSerializer(required=False, help_text="the job this run is an attempt of (docs/api.md, Jobs and attempts)")
    launched_by = LauncherField(
        r"^[^\x00-\x1f\x7f]+$",
        max_length=128,
        required=False,
        error_messages={"invalid": "must be 1-128 printable characters"},
        help_text="who launched the run: the Unix or Slurm user, a pod's owner label or service account (docs/agent.md)",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        alloc = attrs.get("allocation_start")
        if alloc is None:
            return attrs
        start = attrs.get("started_at")
        named = start is not None
        start = start or timezone.now()  # what the run will get
        after = "started_at" if named else "now (started_at defaults to now)"
        if alloc > start:
            raise serializers.ValidationError({"allocation_start": f"must not be after {after}"})
        if start - alloc > MAX_SPAN:
            raise serializers.ValidationError(
                {"allocation_start": f"must be at most {MAX_SPAN.days} days before {after} (the longest run analysed)"}
            )
        return attrs


class RunOutputSerializer(serializers.ModelSerializer[Run]):
    project: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team = serializers.CharField(source="project.team.slug", read_only=True)
    client_id = serializers.SerializerMethodField()
    ranks = serializers.SerializerMethodField()
    wire = serializers.SerializerMethodField()
    job = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id", "client_id", "name", "project", "team", "tags", "status", "gpu_model", "gpu_count", "world_size",
            "nodes", "provider", "region", "pricing_tier", "dtype", "allocation_start", "started_at",
            "finished_at", "last_seen_at", "config", "environment", "ranks", "wire", "job", "attempt", "end_cause",
            "end_detail", "launched_by",
        ]  # fmt: skip

    @extend_schema_field(
        inline_serializer(
            "RunJob",
            {"id": serializers.UUIDField(), "key": serializers.CharField(), "source": serializers.CharField()},
            allow_null=True,
        )
    )
    def get_job(self, run: Run) -> dict[str, str] | None:
        job = run.job
        return None if job is None else {"id": str(job.pk), "key": job.key, "source": job.source}

    @extend_schema_field(
        inline_serializer(
            "RunWire",
            {
                "packed_columns": serializers.BooleanField(
                    help_text='step and sample columns may be sent packed: {"i8" | "f8": base64 of little-endian values}'
                ),
                "batch_counters": serializers.BooleanField(
                    help_text="a batch may carry the rank's counters as `counters` instead of a counters event"
                ),
                "packed_nulls": serializers.BooleanField(
                    help_text='a packed column may carry nulls: {"i8" | "f8": ..., "null": base64 of one byte per row, 1 = null}'
                ),
                "node_batches": serializers.BooleanField(
                    help_text='POST /api/v1/runs/{id}/batches takes every local rank\'s batch in one request: {"batches": [...]}'
                ),
            },
        )
    )
    def get_wire(self, run: Run) -> dict[str, bool]:
        # What this server's ingest understands beyond plain arrays: the agent packs only after
        # the server said so, so an older server keeps getting arrays.
        return {"packed_columns": True, "batch_counters": True, "packed_nulls": True, "node_batches": True}

    @extend_schema_field(
        serializers.UUIDField(help_text="the id the run was registered by (its `id`, unless another project had it)")
    )
    def get_client_id(self, run: Run) -> str:
        return str(run.client_id or run.pk)

    @extend_schema_field(
        inline_serializer(
            "RunRankOut",
            {
                "rank": serializers.IntegerField(),
                "host": serializers.CharField(),
                "counters": serializers.DictField(child=serializers.IntegerField()),
                "last_step": serializers.IntegerField(allow_null=True, help_text="highest stored step number"),
                "reused_step_rows": serializers.IntegerField(help_text="rows refused for a reused step number"),
            },
            many=True,
        )
    )
    def get_ranks(self, run: Run) -> list[dict[str, Any]]:
        return [
            {
                "rank": r.rank,
                "host": r.host,
                "counters": r.counters,
                "last_step": r.last_step,
                "reused_step_rows": r.reused_step_rows,
            }
            for r in run.ranks.order_by("rank")
        ]


class RunCreateApi(IngestApiView):
    max_body_bytes = MAX_RUN_BODY_BYTES

    @extend_schema(
        request=RunInputSerializer,
        responses={201: RunOutputSerializer, 200: RunOutputSerializer, **_ERRORS},
        summary="Create a run, or resume it by id (201 created, 200 resumed)",
    )
    def post(self, request: Request) -> Response:
        project = _writer_project(request)
        serializer = RunInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        for field, actual in (("project", project.slug), ("team", project.team.slug)):
            given = data.pop(field, None)
            if given is not None and given != actual:
                raise ApiError(
                    "forbidden",
                    f"{field}: this token belongs to {field} {actual!r}, not {given!r}",
                    fields={field: f"token is for {actual!r}"},
                    status_code=403,
                )
        gpus = rank_gpus_parse(data.get("environment"))  # this rank's GPUs, for the fleet (gpus.py)
        with transaction.atomic():
            run, created = services.run_create_or_resume(project=project, run_id=data.pop("id"), data=data)
            if gpus is not None:
                rank_gpus_store(run=run, gpus=gpus)
        return Response(RunOutputSerializer(run).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RunDetailApi(APIView):
    @extend_schema(responses={200: RunOutputSerializer, 401: ErrorSerializer, 404: ErrorSerializer})
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = selectors.run_get_visible(principal=request.user, run_id=run_id)
        return Response(RunOutputSerializer(run).data)


def _columns_schema(name: str, columns: Any) -> Any:
    return inline_serializer(
        name,
        {c.name: serializers.ListField(child=serializers.FloatField(), required=c.required) for c in columns},
    )


StepBatchSerializer = inline_serializer(
    "StepBatch",
    {
        "rank": serializers.IntegerField(min_value=0),
        "host": serializers.CharField(required=False),
        "steps": _columns_schema("StepColumns", STEP_COLUMNS),
    },
)
SampleBatchSerializer = inline_serializer(
    "SampleBatch",
    {
        "rank": serializers.IntegerField(min_value=0),
        "host": serializers.CharField(required=False),
        "samples": _columns_schema("SampleColumns", SAMPLE_COLUMNS),
    },
)


class RunStepsApi(RankBatchApiView):
    @extend_schema(
        request=StepBatchSerializer,
        responses={200: StepIngestResultSerializer, **_ERRORS},
        summary="Store one rank's batch of steps (columnar, idempotent by (run, rank, step))",
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        run = _run_for_write(request, run_id)
        body = _object(request.data, {"rank", "host", "steps"}, {"rank", "steps"})
        _rows_admit(request, _rows_sent(body), "steps")
        rank = _int_field(body, "rank", 0, 1_000_000)
        result = services.steps_ingest(run=run, rank=rank, host=_host(body), steps=body["steps"])
        return Response(result.as_dict())

    @extend_schema(
        parameters=[
            OpenApiParameter("rank", OpenApiTypes.INT, description="one rank; all ranks when omitted"),
            OpenApiParameter("after_rank", OpenApiTypes.INT, description="cursor (all-ranks reads)"),
            OpenApiParameter("after_step", OpenApiTypes.INT, description="cursor: steps strictly after"),
            OpenApiParameter("limit", OpenApiTypes.INT, description="rows per page, at most 10000"),
        ],
        responses={200: OpenApiTypes.OBJECT, 401: ErrorSerializer, 404: ErrorSerializer},
        summary="Read steps back, columnar and paged",
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = selectors.run_get_visible(principal=request.user, run_id=run_id)
        params = request.query_params
        rank = query_int(params, "rank", -1, 0, 1_000_000)
        page = selectors.steps_read(
            run=run,
            rank=None if rank == -1 else rank,
            after_rank=query_int(params, "after_rank", -1, -1, 1_000_000),
            after_step=query_int(params, "after_step", -1, -1, 2**53),
            limit=query_int(params, "limit", 1000, 1, 10_000),
        )
        return Response(page)


class RunSamplesApi(RankBatchApiView):
    @extend_schema(
        request=SampleBatchSerializer,
        responses={200: IngestResultSerializer, **_ERRORS},
        summary="Store system samples (columnar, idempotent by (run, rank, device, t_ns))",
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        run = _run_for_write(request, run_id)
        body = _object(request.data, {"rank", "host", "samples"}, {"rank", "samples"})
        _rows_admit(request, _rows_sent(body), "samples")
        rank = _int_field(body, "rank", 0, 1_000_000)
        result = services.samples_ingest(run=run, rank=rank, host=_host(body), samples=body["samples"])
        return Response(result.as_dict())


def _field(name: str, path: str) -> str:
    return f"{name}.{path}" if path else name


class EventSerializer(StrictSerializer):
    id = serializers.CharField(max_length=64)
    kind = serializers.ChoiceField(choices=EventKind.choices)
    rank = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False, default=0)
    t_ns = serializers.IntegerField(min_value=EPOCH_NS_MIN, max_value=EPOCH_NS_MAX)
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    t_start_ns = serializers.IntegerField(min_value=EPOCH_NS_MIN, max_value=EPOCH_NS_MAX, required=False)
    dur_ns = serializers.IntegerField(min_value=0, max_value=365 * 86_400 * 10**9, required=False)
    status = serializers.ChoiceField(choices=[RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CRASHED], required=False)
    data = BoundedJSONObjectField(required=False)  # type: ignore[assignment]  # the wire name

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind = attrs["kind"]
        if kind == EventKind.PHASE:
            for name in ("name", "t_start_ns", "dur_ns"):
                if not attrs.get(name) and attrs.get(name) != 0:
                    raise serializers.ValidationError({name: "required for a phase event"})
        if kind == EventKind.FINISH and "status" not in attrs:
            raise serializers.ValidationError({"status": "required for a finish event"})
        if kind == EventKind.PHASE and attrs["name"] in CHECKPOINT_PHASES:
            _checkpoint_data_check(attrs.get("data"), attrs["name"])
        if kind == EventKind.FINISH and "data" in attrs:
            _finish_data_check(attrs["data"])
        if "t_start_ns" in attrs and attrs["t_start_ns"] + attrs.get("dur_ns", 0) > EPOCH_NS_MAX:
            raise serializers.ValidationError({"dur_ns": "the phase must end before 2100-01-01"})
        if kind == EventKind.COUNTERS:
            try:
                counters_check(attrs.get("data", {}))
            except BoundsError as exc:
                raise serializers.ValidationError({_field("data", exc.path): exc.message}) from None
        return attrs


# Phases the job analysis reads (docs/api.md, "Jobs and attempts"): their data is checked.
CHECKPOINT_PHASES = ("checkpoint", "restore")
_MAX_STEP = 2**62


def _checkpoint_data_check(data: dict[str, Any] | None, name: str) -> None:
    # Without a step (an older agent's `phase("checkpoint")`) the time still counts as
    # checkpointing; a step that is there must be one.
    data = data or {}
    step = data.get("step")
    if "step" in data and (type(step) is not int or not 0 <= step <= _MAX_STEP):
        raise serializers.ValidationError({"data.step": f"the step of the {name}: an integer >= 0"})
    size = data.get("bytes")
    if size is not None and (type(size) is not int or size < 0):
        raise serializers.ValidationError({"data.bytes": "bytes written or read: an integer >= 0"})
    if "async" in data and type(data["async"]) is not bool:
        raise serializers.ValidationError({"data.async": "true or false"})


def _finish_data_check(data: dict[str, Any]) -> None:
    cause = data.get("cause")
    reported = [c for c in EndCause.values if c != EndCause.SILENT]
    if cause is not None and cause not in reported:
        raise serializers.ValidationError({"data.cause": f"one of {', '.join(reported)}"})
    for key, most in (("exception", 200), ("message", 500)):
        if key in data and (not isinstance(data[key], str) or len(data[key]) > most):
            raise serializers.ValidationError({f"data.{key}": f"a string of at most {most} characters"})


class EventBatchSerializer(StrictSerializer):
    events = EventSerializer(many=True, allow_empty=False, max_length=MAX_EVENTS)  # type: ignore[call-arg]

    def validate_events(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ids = [event["id"] for event in events]
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError("event ids must be unique within a batch")
        return events


class RunEventsApi(IngestApiView):
    max_body_bytes = MAX_EVENTS_BODY_BYTES

    @extend_schema(
        request=EventBatchSerializer,
        responses={200: IngestResultSerializer, **_ERRORS},
        summary="Store run events: phases, finish, drop counters, OOMs (idempotent by event id)",
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        run = _run_for_write(request, run_id)
        _object(request.data, {"events"}, {"events"})
        _rows_admit(request, _rows_sent(request.data), "events")
        serializer = EventBatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = services.events_ingest(run=run, events=serializer.validated_data["events"])
        return Response(result.as_dict())


RankBatchSerializer = inline_serializer(
    "RankBatch",
    {
        "rank": serializers.IntegerField(min_value=0),
        "host": serializers.CharField(required=False),
        "steps": _columns_schema("RankBatchStepColumns", STEP_COLUMNS),
        "samples": _columns_schema("RankBatchSampleColumns", SAMPLE_COLUMNS),
        "events": EventSerializer(many=True, required=False, help_text="an event without a rank is the batch's rank's"),
        "counters": serializers.DictField(
            child=serializers.IntegerField(min_value=0),
            required=False,
            help_text="the rank's cumulative counters (as a counters event's data), merged into the rank without an event",
        ),
    },
)
RankBatchResultSerializer = inline_serializer(
    "RankBatchResult",
    {
        "steps": StepIngestResultSerializer,
        "samples": IngestResultSerializer,
        "events": IngestResultSerializer,
    },
)
BATCH_PARTS = ("steps", "samples", "events", "counters")


def _rank_batch(data: Any) -> services.RankBatch:
    """One rank's batch as POST .../batch takes it, checked but for its columns (the service's)."""
    body = _object(data, {"rank", "host", *BATCH_PARTS}, {"rank"})
    rank = _int_field(body, "rank", 0, 1_000_000)
    if not any(part in body for part in BATCH_PARTS):
        raise invalid("steps", "a batch needs at least one of steps, samples, events, counters")
    counters = body.get("counters")
    if "counters" in body:
        if not isinstance(counters, dict):
            raise invalid("counters", "an object of counter names to integers")
        try:
            counters_check(counters)
        except BoundsError as exc:
            raise invalid(_field("counters", exc.path), exc.message) from None
    events = None
    if "events" in body:
        raw = body["events"]
        if isinstance(raw, list):
            raw = [{"rank": rank, **event} if isinstance(event, dict) else event for event in raw]
        serializer = EventBatchSerializer(data={"events": raw})
        serializer.is_valid(raise_exception=True)
        events = serializer.validated_data["events"]
    return services.RankBatch(
        rank=rank, host=_host(body), steps=body.get("steps"), samples=body.get("samples"), events=events, counters=counters
    )


class RunBatchApi(RankBatchApiView):
    @extend_schema(
        request=RankBatchSerializer,
        responses={200: RankBatchResultSerializer, **_ERRORS},
        summary="Store one rank's steps, samples and events of one interval in one request (all or nothing)",
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        run = _run_for_write(request, run_id)
        _rows_admit(request, _rows_sent(request.data), "body")
        sent = _rank_batch(request.data)
        result = services.batch_ingest(
            run=run,
            rank=sent.rank,
            host=sent.host,
            steps=sent.steps,
            samples=sent.samples,
            events=sent.events,
            counters=sent.counters,
        )
        return Response(result.as_dict())


# The node batch's entries and answers are the combined batch's own components (same classes).
NodeBatchSerializer = inline_serializer(
    "NodeBatch",
    {
        "batches": serializers.ListField(
            child=type(RankBatchSerializer)(),
            min_length=1,
            max_length=services.MAX_NODE_BATCHES,
            help_text="one batch per rank, ranks distinct, each exactly the body of POST /api/v1/runs/{id}/batch",
        )
    },
)
NodeBatchResultSerializer = inline_serializer(
    "NodeBatchResult",
    {
        "batches": type(RankBatchResultSerializer)(
            many=True, help_text="what POST /api/v1/runs/{id}/batch answers, for each batch in the request's order"
        )
    },
)


class RunNodeBatchApi(IngestApiView):
    @property
    def max_inflated_bytes(self) -> int:
        # The agent's node batch: at most 6 MiB of its peers' batches (phantomhub_agent._node
        # MAX_RAW_BYTES) and local rank 0's own (batch_max_bytes, 1 MiB), ~7 MiB.
        return int(settings.MAX_NODE_BATCH_INFLATED_BYTES)

    @extend_schema(
        request=NodeBatchSerializer,
        responses={200: NodeBatchResultSerializer, **_ERRORS},
        summary="Store every local rank's batch of one node's interval in one request (all or nothing)",
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        run = _run_for_write(request, run_id)
        raw = _object(request.data, {"batches"}, {"batches"})["batches"]
        if not isinstance(raw, list) or not 1 <= len(raw) <= services.MAX_NODE_BATCHES:
            raise invalid("batches", f"must be an array of 1 to {services.MAX_NODE_BATCHES} rank batches")
        _rows_admit(request, sum(map(_rows_sent, raw)), "batches")
        batches = []
        for i, data in enumerate(raw):
            where = f"batches[{i}]"
            if not isinstance(data, dict):
                raise invalid(where, "must be a JSON object (one rank's batch, as POST .../batch takes it)")
            with fields_within(where):
                batches.append(_rank_batch(data))
        results = services.node_batch_ingest(run=run, batches=batches)
        return Response({"batches": [result.as_dict() for result in results]})

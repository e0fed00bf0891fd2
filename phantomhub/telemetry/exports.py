"""Raw steps of a run as one Parquet file, for notebooks: GET /api/v1/runs/{id}/steps.parquet and
`manage.py exportsteps`. The file is the archive's format (archive.py): streamed straight from
the archive when it holds every row, else written from the hot rows (merged with the archive's
for a pruned run that received rows since) into a temporary file first, so an error is an error
answer and never a truncated download.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import IO, Any

import orjson
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from phantomhub.schema import ErrorSerializer
from phantomhub.telemetry import selectors
from phantomhub.telemetry.archive import (
    STEPS,
    ParquetSink,
    _concat,
    _hot_chunks,
    _ranks_without_runrank,
    archive_open,
    archive_read,
)
from phantomhub.telemetry.hot import merge_rows
from phantomhub.telemetry.models import Run, RunArchive

PARQUET_MEDIA_TYPE = "application/vnd.apache.parquet"
CHUNK_BYTES = 1 << 20


def steps_parquet_open(run: Run) -> IO[bytes]:
    """A readable binary file of the run's steps in Parquet, positioned at its start."""
    archive = RunArchive.objects.filter(run=run).first()
    if archive is not None and archive.ingest_seq == run.ingest_seq:
        return archive_open(archive, "steps")
    local = tempfile.TemporaryFile()  # noqa: SIM115 (returned open; the caller closes it)
    metadata = {"phantomhub.run_id": str(run.pk), "phantomhub.project": run.project.slug, "phantomhub.kind": "steps"}
    sink = ParquetSink(STEPS, local, metadata)
    if archive is not None and archive.pruned_at is not None:
        old = archive_read(archive=archive, kind="steps", names=STEPS.columns)
        sink.write(merge_rows(old, _concat(STEPS, [*_hot_chunks(run, STEPS), _ranks_without_runrank(run, STEPS)]), STEPS.key))
    else:
        for chunk in _hot_chunks(run, STEPS):
            sink.write(chunk)
        sink.write(_ranks_without_runrank(run, STEPS))
    sink.close()
    local.seek(0)
    return local


def _chunks(handle: IO[bytes]) -> Iterator[bytes]:
    try:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk
    finally:
        handle.close()


def steps_parquet_chunks(run: Run) -> Iterator[bytes]:
    return _chunks(steps_parquet_open(run))


def steps_parquet_write(run: Run, path: str | os.PathLike[str]) -> int:
    """Write the run's steps to a local Parquet file (atomically: temp name, then rename); its size."""
    target = os.fspath(path)
    temporary = f"{target}.tmp-{os.getpid()}"
    size = 0
    with open(temporary, "wb") as out:
        for chunk in steps_parquet_chunks(run):
            out.write(chunk)
            size += len(chunk)
    os.replace(temporary, target)
    return size


class ParquetRenderer(BaseRenderer):
    """Lets a client ask for `Accept: application/vnd.apache.parquet`; the file itself is streamed
    by the view, so this only ever renders an error body (as JSON)."""

    media_type = PARQUET_MEDIA_TYPE
    format = "parquet"
    charset = None

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return orjson.dumps(data)


class RunStepsParquetApi(APIView):
    renderer_classes = [JSONRenderer, ParquetRenderer]

    @extend_schema(
        responses={
            (200, PARQUET_MEDIA_TYPE): OpenApiResponse(OpenApiTypes.BINARY, description="the run's steps, one Parquet file"),
            401: ErrorSerializer,
            404: ErrorSerializer,
        },
        summary="Export a run's raw steps as Parquet (from PostgreSQL or the archive)",
    )
    def get(self, request: Request, run_id: Any) -> StreamingHttpResponse:
        run = selectors.run_get_visible(principal=request.user, run_id=run_id)
        response = StreamingHttpResponse(steps_parquet_chunks(run), content_type=PARQUET_MEDIA_TYPE)
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-steps.parquet"'
        return response

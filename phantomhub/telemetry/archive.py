"""Parquet archive of finished runs' raw rows, on a directory or any fsspec URL.

Layout under PHANTOMHUB_ARCHIVE_URL (docs/scaling.md, "Archive layout"):

    steps/project=<project slug>/run=<run id>.parquet
    samples/project=<project slug>/run=<run id>.parquet

One file per run and kind, zstd-compressed, rows sorted by (rank, step) or (rank, device, t_ns),
nulls kept as nulls. The sorted integer columns are delta-encoded and the repetitive ones
dictionary-encoded, which is what brings a step row to about 21 bytes (bench/storage.py). Files
are written to a temporary name beside the final one and renamed, so a reader never sees half a
file, and archiving a run again rewrites the same file: idempotent.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from phantomhub.errors import ApiError
from phantomhub.telemetry import storage
from phantomhub.telemetry.columns import SAMPLE_COLUMNS, STEP_COLUMNS
from phantomhub.telemetry.hot import ANALYSIS_COLUMNS, SAMPLE_READ_COLUMNS, hot_rows, merge_rows
from phantomhub.telemetry.models import Run, RunArchive, RunRank

FORMAT_VERSION = "1"
# Rows per row group (and per read from PostgreSQL while archiving): bounds the memory one run takes.
CHUNK_ROWS = 500_000


@dataclass(frozen=True)
class Kind:
    name: str  # "steps" | "samples"
    raw: storage.Kind  # how the rows are stored while hot
    columns: list[str]  # in file order
    key: list[str]
    required: frozenset[str]  # never null
    delta: frozenset[str]  # DELTA_BINARY_PACKED; the others are dictionary-encoded


STEPS = Kind(
    "steps",
    storage.STEPS,
    ["rank", *ANALYSIS_COLUMNS],
    ["rank", "step"],
    frozenset({"rank", "step", "t_start_ns"}),
    frozenset({"step", "t_start_ns", "dur_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns"}),
)
SAMPLES = Kind(
    "samples",
    storage.SAMPLES,
    SAMPLE_READ_COLUMNS,
    ["rank", "device", "t_ns"],
    frozenset({"rank", "device", "t_ns"}),
    frozenset({"t_ns", "gpu_mem_used_bytes", "rss_bytes"}),
)
KINDS = {k.name: k for k in (STEPS, SAMPLES)}
_FLOATS = {"flops", *(c.name for c in SAMPLE_COLUMNS if c.kind == "float")}
assert {c.name for c in STEP_COLUMNS} <= set(STEPS.columns)


def _arrow_type(name: str) -> pa.DataType:
    if name in ("rank", "device"):
        return pa.int32()
    return pa.float64() if name in _FLOATS else pa.int64()


def schema_for(kind: Kind) -> pa.Schema:
    return pa.schema([pa.field(name, _arrow_type(name), nullable=name not in kind.required) for name in kind.columns])


def archive_fs() -> tuple[Any, str]:
    """(filesystem, root path) of PHANTOMHUB_ARCHIVE_URL."""
    fs, root = fsspec.core.url_to_fs(str(settings.ARCHIVE_URL))
    return fs, root.rstrip("/")


def archive_path(*, kind: str, project_slug: str, run_id: uuid.UUID) -> str:
    """The path of a run's file, relative to the archive root."""
    return f"{kind}/project={project_slug}/run={run_id}.parquet"


def table_from_arrays(kind: Kind, arrays: dict[str, npt.NDArray[Any]]) -> pa.Table:
    """Arrow columns from the -1 / NaN convention of the hot reads, nulls made nulls again."""
    columns = []
    for name in kind.columns:
        values = arrays[name]
        mask = None
        if name not in kind.required:
            mask = np.isnan(values) if name in _FLOATS else values < 0
        columns.append(pa.array(values, type=_arrow_type(name), mask=mask if mask is not None and mask.any() else None))
    return pa.Table.from_arrays(columns, schema=schema_for(kind))


def arrays_from_table(table: pa.Table, names: list[str]) -> dict[str, npt.NDArray[Any]]:
    out: dict[str, npt.NDArray[Any]] = {}
    for name in names:
        column = table.column(name)
        if name in _FLOATS:
            out[name] = column.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls become NaN
        else:
            out[name] = pc.fill_null(column, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return out


class ParquetSink:
    """A Parquet writer with the archive's encodings, onto a local file object."""

    def __init__(self, kind: Kind, where: Any, metadata: dict[str, str]) -> None:
        self.kind = kind
        self.rows = 0
        schema = schema_for(kind).with_metadata({"phantomhub.format": FORMAT_VERSION, **metadata})
        self._writer = pq.ParquetWriter(
            where,
            schema,
            compression="zstd",
            compression_level=3,
            use_dictionary=[c for c in kind.columns if c not in kind.delta],
            column_encoding={c: "DELTA_BINARY_PACKED" for c in kind.delta},
            write_statistics=True,
        )

    def write(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        n = len(arrays[self.kind.key[0]])
        if n:
            self._writer.write_table(table_from_arrays(self.kind, arrays), row_group_size=CHUNK_ROWS)
            self.rows += n

    def close(self) -> None:
        self._writer.close()


def _rank_chunks(run: Run) -> list[list[int]]:
    """The run's ranks in groups of about CHUNK_ROWS stored steps each."""
    chunks: list[list[int]] = [[]]
    rows = 0
    for rank, step_rows in RunRank.objects.filter(run=run).order_by("rank").values_list("rank", "step_rows"):
        if chunks[-1] and rows + step_rows > CHUNK_ROWS:
            chunks.append([])
            rows = 0
        chunks[-1].append(rank)
        rows += step_rows
    return [c for c in chunks if c]


def _hot_chunks(run: Run, kind: Kind) -> Iterator[dict[str, npt.NDArray[Any]]]:
    for ranks in _rank_chunks(run):
        yield hot_rows(kind=kind.raw, run_id=run.pk, names=kind.columns, ranks=ranks)


def _ranks_without_runrank(run: Run, kind: Kind) -> dict[str, npt.NDArray[Any]]:
    """Rows of ranks that RunRank does not list (rows written by a bulk load, fixtures)."""
    known = list(RunRank.objects.filter(run=run).values_list("rank", flat=True))
    return hot_rows(kind=kind.raw, run_id=run.pk, names=kind.columns, except_ranks=known)


@dataclass(frozen=True)
class ArchiveResult:
    run_id: uuid.UUID
    step_rows: int
    sample_rows: int
    steps_bytes: int
    samples_bytes: int


def _write_kind(run: Run, kind: Kind, previous: RunArchive | None) -> tuple[str, int, int]:
    """Write one kind's file atomically: (relative path, rows, bytes)."""
    fs, root = archive_fs()
    relative = archive_path(kind=kind.name, project_slug=run.project.slug, run_id=run.pk)
    final = f"{root}/{relative}"
    metadata = {"phantomhub.run_id": str(run.pk), "phantomhub.project": run.project.slug, "phantomhub.kind": kind.name}
    with tempfile.NamedTemporaryFile(suffix=".parquet", delete=False) as local:
        local_path = local.name
    try:
        sink = ParquetSink(kind, local_path, metadata)
        if previous is not None and previous.pruned_at is not None:
            # Rows already pruned live only in the old file: merge it with what is hot now.
            old = archive_read(archive=previous, kind=kind.name, names=kind.columns)
            hot = _concat(kind, [*_hot_chunks(run, kind), _ranks_without_runrank(run, kind)])
            sink.write(merge_rows(old, hot, kind.key))
        else:
            for chunk in _hot_chunks(run, kind):
                sink.write(chunk)
            sink.write(_ranks_without_runrank(run, kind))
        sink.close()
        size = os.path.getsize(local_path)
        fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
        temporary = f"{final}.tmp-{uuid.uuid4().hex}"
        fs.put_file(local_path, temporary)
        fs.mv(temporary, final)
    finally:
        os.unlink(local_path)
    return relative, sink.rows, size


def _concat(kind: Kind, parts: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    parts = [p for p in parts if len(p[kind.key[0]])]
    if not parts:
        return {name: np.array([], dtype=np.float64 if name in _FLOATS else np.int64) for name in kind.columns}
    both = {name: np.concatenate([p[name] for p in parts]) for name in kind.columns}
    order = np.lexsort([both[k] for k in reversed(kind.key)])
    return {name: values[order] for name, values in both.items()}


def run_archive(*, run_id: uuid.UUID) -> ArchiveResult:
    """Write the run's raw rows to the archive and record it (RunArchive). Idempotent."""
    run = Run.objects.select_related("project").get(pk=run_id)
    seq = run.ingest_seq  # read before the rows: rows stored meanwhile make the archive stale, never wrong
    previous = RunArchive.objects.filter(run=run).first()
    steps_path, step_rows, steps_bytes = _write_kind(run, STEPS, previous)
    samples_path, sample_rows, samples_bytes = _write_kind(run, SAMPLES, previous)
    with transaction.atomic():
        RunArchive.objects.update_or_create(
            run=run,
            defaults={
                "ingest_seq": seq,
                "step_rows": step_rows,
                "sample_rows": sample_rows,
                "steps_bytes": steps_bytes,
                "samples_bytes": samples_bytes,
                "steps_path": steps_path,
                "samples_path": samples_path,
                "archived_at": timezone.now(),
            },
        )
    return ArchiveResult(run.pk, step_rows, sample_rows, steps_bytes, samples_bytes)


class ArchiveUnavailable(ApiError):
    """The archive holding a run's rows cannot be read (a store down, a file gone): a 503 in the
    API's shape, and a failed (retried) analysis, never rows silently missing."""

    def __init__(self, run_id: uuid.UUID, reason: str) -> None:
        super().__init__("unavailable", f"the archive of run {run_id} cannot be read: {reason}", status_code=503)


def archive_open(archive: RunArchive, kind: str) -> Any:
    """A binary file object of one of the run's archived files."""
    fs, root = archive_fs()
    try:
        return fs.open(f"{root}/{archive.steps_path if kind == 'steps' else archive.samples_path}", "rb")
    except OSError as exc:
        raise ArchiveUnavailable(archive.run_id, f"{type(exc).__name__}: {exc}") from exc


def archive_read(
    *,
    archive: RunArchive,
    kind: str,
    names: list[str],
    ranks: list[int] | None = None,
    after: int | None = None,
    after_t_ns: int | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """Columns of a run's archived rows (nulls as -1 / NaN, like the hot reads), optionally only
    of `ranks`, with step > `after` (steps) or t_ns > `after_t_ns` (samples)."""
    filters: list[tuple[str, str, Any]] = []
    if ranks is not None:
        filters.append(("rank", "in", ranks))
    if after is not None:
        filters.append(("step", ">", after))
    if after_t_ns is not None:
        filters.append(("t_ns", ">", after_t_ns))
    with archive_open(archive, kind) as handle:
        try:
            table = pq.read_table(handle, columns=names, filters=filters or None)
        except (OSError, pa.ArrowException) as exc:
            raise ArchiveUnavailable(archive.run_id, f"{type(exc).__name__}: {exc}") from exc
    return arrays_from_table(table, names)

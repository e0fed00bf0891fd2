"""Writes for telemetry: runs, step and sample batches, events. Ingest only validates and stores."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from phantomhub.accounts.models import Project
from phantomhub.errors import ApiError, fields_within, invalid
from phantomhub.telemetry.bounds import MAX_RANK_COUNTERS, MAX_SPAN, span_end_ns
from phantomhub.telemetry.columns import SAMPLE_COLUMNS, STEP_COLUMNS, Batch, ColumnError, columns_validate
from phantomhub.telemetry.models import EndCause, EventKind, Job, Run, RunEvent, RunStatus
from phantomhub.telemetry.selectors import run_find
from phantomhub.telemetry.signals import run_changed
from phantomhub.telemetry.storage import SAMPLES, STEPS, InsertResult, Kind, RankMarks, batches_insert, ranks_lock, run_param

RUN_FIELDS = (
    "name",
    "tags",
    "gpu_model",
    "gpu_count",
    "world_size",
    "nodes",
    "provider",
    "region",
    "pricing_tier",
    "dtype",
    "config",
    "environment",
    "launched_by",
)


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int

    def as_dict(self) -> dict[str, int]:
        return {"accepted": self.accepted, "duplicates": self.duplicates}


@dataclass(frozen=True)
class StepIngestResult(IngestResult):
    reused_step: int = 0

    def as_dict(self) -> dict[str, int]:
        return {**super().as_dict(), "reused_step": self.reused_step}


def run_create_or_resume(*, project: Project, run_id: uuid.UUID, data: dict[str, Any]) -> tuple[Run, bool]:
    """Create the project's run that its client calls `run_id`, or resume it (a restarted agent,
    or another rank): returns (run, created).

    Runs are keyed by (project, client id): an id another project uses never blocks this one,
    and the answer does not depend on runs of other projects beyond the server-wide id, which is
    the client's id when free and a fresh UUID otherwise. An upsert: every rank of a job
    registers the same id at once, and exactly one creates it. A resume updates the metadata but
    never the status: a replayed registration must not reopen a run its ranks finished (a run
    the server marked crashed is reopened by its telemetry).
    """
    now = timezone.now()
    job = data.pop("job", None)
    with transaction.atomic():
        run = _run_locked(project, run_id)
        if run is None:
            # The client's id as the run's id when no run has it; else (another project's run
            # has it) a fresh one. A failed insert is a concurrent rank of the same job that won
            # (then resume its run), or the id taken meanwhile (then the next candidate).
            for candidate in (run_id, uuid.uuid4()):
                try:
                    with transaction.atomic():  # a savepoint: the insert may lose a race
                        created = _run_create(project=project, run_id=candidate, client_id=run_id, data=data, now=now)
                    if job is not None:
                        _job_join(created, project, job)
                    return created, True
                except IntegrityError:
                    run = _run_locked(project, run_id)
                    if run is not None:
                        break
            if run is None:  # neither a lost race nor a taken id: a genuine integrity error
                raise IntegrityError(f"run {run_id} of project {project.pk} could not be created")
        for field in RUN_FIELDS:
            if field in data:
                setattr(run, field, data[field])
        run.last_seen_at = max(run.last_seen_at, now)
        run.save()
        if job is not None:
            _job_join(run, project, job)
        return run, False


def _job_join(run: Run, project: Project, given: dict[str, Any]) -> None:
    """Link the run to its job as an attempt (creating the job with its first attempt). Every
    rank registers, so joining again is a no-op; a run never moves to another job (409). The
    job's other attempts are announced as changed: which attempt came before and after decides
    their rework and restart time (docs/waste-model.md, "Jobs")."""
    key, attempt = given["key"], given.get("attempt")
    if run.job_id is not None:
        current = Job.objects.only("key").get(pk=run.job_id)
        if current.key != key:
            message = f"this run is an attempt of job {current.key!r}; a run cannot move to another job"
            raise ApiError("conflict", f"job.key: {message}", fields={"job.key": message}, status_code=409)
        if attempt is not None and run.attempt is None:
            Run.objects.filter(pk=run.pk).update(attempt=attempt)
            run.attempt = attempt
        return
    job = Job.objects.filter(project=project, key=key).first()
    if job is None:
        try:
            with transaction.atomic():  # a savepoint: another run of the job may create it first
                job = Job.objects.create(project=project, key=key, source=given.get("source", ""))
        except IntegrityError:
            job = Job.objects.get(project=project, key=key)
    Run.objects.filter(pk=run.pk).update(job=job, attempt=attempt)
    run.job, run.attempt = job, attempt
    # An earlier attempt still running is over: its launcher started the next one (after a
    # SIGKILL, a lost node). It is marked crashed now, not after the crash threshold, and like the
    # sweep's mark this is provisional: its own telemetry, if it is alive after all, reopens it.
    # (When it was last heard of says nothing here: a spool replayed late is heard of late.)
    Run.objects.filter(job=job, status=RunStatus.RUNNING, started_at__lt=run.started_at).update(
        status=RunStatus.CRASHED, ingest_seq=F("ingest_seq") + 1
    )
    others = list(Run.objects.filter(job=job).exclude(pk=run.pk).values_list("pk", flat=True))
    if others:
        transaction.on_commit(lambda: [run_changed.send(sender=Run, run_id=other) for other in others])


def _run_locked(project: Project, run_id: uuid.UUID) -> Run | None:
    return run_find(Run.objects.select_for_update().filter(project=project), run_id)


def _run_create(*, project: Project, run_id: uuid.UUID, client_id: uuid.UUID, data: dict[str, Any], now: datetime) -> Run:
    started_at: datetime = data.get("started_at") or now
    fields = {field: data[field] for field in RUN_FIELDS if field in data}
    return Run.objects.create(
        id=run_id,
        client_id=client_id,
        project=project,
        allocation_start=data.get("allocation_start") or started_at,
        started_at=started_at,
        last_seen_at=now,
        **fields,
    )


def _finish_reported() -> Exists:
    return Exists(RunEvent.objects.filter(run_id=OuterRef("pk"), kind=EventKind.FINISH))


def _run_reopen_if_marked_crashed(run: Run) -> bool:
    """A run the server marked crashed after silence runs again once new telemetry arrives.

    A crash its ranks reported (a finish event) stands. The update re-checks the status under
    the row lock, so a finish event committed meanwhile wins. True if the run was reopened.
    """
    reopened = (
        Run.objects.filter(pk=run.pk, status=RunStatus.CRASHED)
        .exclude(_finish_reported())
        .update(status=RunStatus.RUNNING, finished_at=None)
    )
    return bool(reopened)


# One row per rank (VALUES of several rows for a node's ranks: distinct ranks, as ON CONFLICT
# needs). A batch without counters sends {} and keeps the stored ones (merging {} would too, but
# for a rank that has none, where PostgreSQL's merge of nothing is NULL).
_RANK_UPSERT = (
    "INSERT INTO telemetry_runrank (run_id, rank, host, counters, step_rows, last_step, reused_step_rows, last_sample_ns) "
    "{rows} "
    "ON CONFLICT (run_id, rank) DO UPDATE SET step_rows = telemetry_runrank.step_rows + excluded.step_rows, "
    "last_step = {max_last_step}, last_sample_ns = {max_last_sample}, "
    "reused_step_rows = telemetry_runrank.reused_step_rows + excluded.reused_step_rows, "
    "host = CASE WHEN excluded.host = '' THEN telemetry_runrank.host ELSE excluded.host END, "
    "counters = CASE WHEN excluded.counters = {empty} THEN telemetry_runrank.counters ELSE {counters} END"
)
_RANK_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s)"


def _greatest(column: str) -> str:
    """The larger of the stored and the sent value of `column`, either one when the other is null."""
    return f"GREATEST(telemetry_runrank.{column}, excluded.{column})"  # GREATEST skips nulls


def _larger(column: str) -> str:
    """_greatest in SQL both backends run (SQLite has no GREATEST; its MAX(a, b) is null if either is)."""
    stored, sent = f"telemetry_runrank.{column}", f"excluded.{column}"
    return f"CASE WHEN {sent} IS NULL OR {stored} >= {sent} THEN COALESCE({stored}, {sent}) ELSE {sent} END"


# On PostgreSQL the ranks come as one array per column: the statement's text and its 8 parameters
# are the same for one rank or 256, so psycopg parses it once (a VALUES list of 8 ranks has 56
# parameters, past psycopg's cache of 50: it was parsed again on every node batch, 5-10 ms of CPU).
_PG_RANK_ROWS = (
    "SELECT %s::uuid, * FROM unnest(%s::int4[], %s::text[], %s::text[]::jsonb[], %s::int8[], %s::int8[], %s::int8[], %s::int8[])"
)
# PostgreSQL merges the batch's counters into the stored ones in the upsert itself (each keeps its
# highest value, as _counters_merged does), so the rank's row is never read first; counters are
# integers in [0, 2**63 - 1], exact as numeric.
_PG_COUNTERS_MERGED = (
    "(SELECT jsonb_object_agg(key, to_jsonb(top)) FROM (SELECT key, max(value::numeric) AS top FROM "
    "(SELECT * FROM jsonb_each(telemetry_runrank.counters) UNION ALL SELECT * FROM jsonb_each(excluded.counters)) "
    "AS both_sides GROUP BY key) AS merged)"
)


@dataclass(frozen=True)
class _RankRows:
    """What one rank's batch changes of the rank's row (telemetry_runrank)."""

    rank: int
    host: str | None
    steps: InsertResult | None  # None: the batch had no steps
    last_step: int | None
    last_sample_ns: int | None = None
    counters: dict[str, Any] | None = None
    counters_field: str = "counters"  # the field a 400 for too many counters names


def _after_ingest(run: Run, ranks: list[_RankRows], changed: bool) -> None:
    # Same transaction as the rows: each rank's host, its stored step count, last step and last
    # sample time (exact: the marks storage.py checks a batch against), the rows refused for a
    # reused step number and, when given, the batch's counters merged into the rank's (one
    # upsert for all the ranks); then the run's last_seen_at and, when anything was stored
    # (`changed`), its ingest_seq. A rank keeping more counters than allowed is refused here (the
    # transaction keeps nothing). Rank rows are locked in one order by every writer.
    ordered = sorted(ranks, key=lambda rows: rows.rank)
    after = _after_ingest_pg if connection.vendor == "postgresql" else _after_ingest_portable
    after(run, ordered, changed, timezone.now())


def _rank_columns(ordered: list[_RankRows], counters_of: Any) -> list[list[Any]]:
    """The rank rows' seven columns (rank, host, counters, accepted, last step, reused, last sample)."""
    columns: list[list[Any]] = [[] for _ in range(7)]
    for rows in ordered:
        counters = counters_of(rows)
        steps = rows.steps or InsertResult(0, 0, 0)
        row = (rows.rank, rows.host or "", "{}" if counters is None else json.dumps(counters), steps.accepted,
               rows.last_step, steps.reused, rows.last_sample_ns)  # fmt: skip
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    return columns


def _after_ingest_pg(run: Run, ordered: list[_RankRows], changed: bool, now: datetime) -> None:
    """_after_ingest in one statement (a data-modifying WITH runs whether or not its result is
    read): one round trip, the counters merged in the upsert, and it says which rank keeps more
    counters than allowed now. tests/test_sql_pairs.py pins it to the portable one."""
    columns = _rank_columns(ordered, lambda rows: rows.counters)
    upsert = _RANK_UPSERT.format(
        rows=_PG_RANK_ROWS, max_last_step=_greatest("last_step"), max_last_sample=_greatest("last_sample_ns"),
        empty="'{}'::jsonb", counters=_PG_COUNTERS_MERGED,
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH rank_upsert AS ({upsert} RETURNING telemetry_runrank.rank AS rank, "
            "(SELECT count(*) FROM jsonb_object_keys(counters)) AS kept) "
            "UPDATE telemetry_run SET last_seen_at = %s, ingest_seq = ingest_seq + %s WHERE id = %s "
            "RETURNING (SELECT min(rank) FROM rank_upsert WHERE kept > %s)",
            [run.pk, *columns, now, 1 if changed else 0, run.pk, MAX_RANK_COUNTERS],
        )
        row = cursor.fetchone()
    if row is None:  # the run is gone (raw rows have no foreign key: this is their check)
        raise run_not_found()
    if row[0] is not None:
        over = next(rows for rows in ordered if rows.rank == row[0])
        raise _too_many_counters(over.rank, over.counters_field)


def _after_ingest_portable(run: Run, ordered: list[_RankRows], changed: bool, now: datetime) -> None:
    """_after_ingest as SQLite runs it (PostgreSQL runs it too): each rank's counters read and
    merged here, a VALUES upsert, the run updated through the ORM."""

    def merged(rows: _RankRows) -> dict[str, Any] | None:
        if rows.counters is None:
            return None
        return _counters_merged(_rank_counters(run.pk, rows.rank), rows.counters, rows.rank, rows.counters_field)

    columns = _rank_columns(ordered, merged)
    values = "VALUES " + ", ".join([_RANK_ROW] * len(ordered))
    params = [value for row in zip(*columns, strict=True) for value in (run_param(run.pk), *row)]
    upsert = _RANK_UPSERT.format(rows=values, max_last_step=_larger("last_step"), max_last_sample=_larger("last_sample_ns"),
                                 empty="'{}'", counters="excluded.counters")  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(upsert, params)
    updates: dict[str, Any] = {"last_seen_at": now}
    if changed:
        updates["ingest_seq"] = F("ingest_seq") + 1
    if not Run.objects.filter(pk=run.pk).update(**updates):
        raise run_not_found()


def run_not_found() -> ApiError:
    return ApiError("not_found", "run not found (create it with POST /api/v1/runs first)", status_code=404)


def _columns(
    body: Any, spec: Any, where: str, keys: tuple[str, ...], defaults: dict[str, int] | None = None, rising: str | None = None
) -> Batch:
    try:
        return columns_validate(
            body, spec, where=where, keys=keys, max_rows=settings.MAX_BATCH_ROWS, key_defaults=defaults, rising=rising
        )
    except ColumnError as exc:
        raise ApiError("invalid", str(exc), fields={exc.field: exc.message}) from None


def _changed_on_commit(run: Run) -> None:
    """Announce the run's new rows once they commit (telemetry/signals.py; waste schedules its analysis)."""
    run_id = run.pk
    transaction.on_commit(lambda: run_changed.send(sender=Run, run_id=run_id))


def _too_late(run: Run, field: str, what: str) -> ApiError:
    start = run.allocation_start.isoformat()
    message = f"{what} is more than {MAX_SPAN.days} days after the run's allocation_start ({start})"
    return ApiError("invalid", f"{field}: {message}", fields={field: message})


def _span_check(run: Run, batch: Batch, field: str, key: str, ends: npt.NDArray[np.int64]) -> None:
    """Refuse rows the analysis could never use: it refuses runs spanning more than MAX_SPAN."""
    late = np.flatnonzero(ends > span_end_ns(run.allocation_start))
    if len(late):
        raise _too_late(run, field, f"the row with {key} {int(batch.values[key][late[0]])}")


def steps_ingest(*, run: Run, rank: int, host: str | None, steps: Any) -> StepIngestResult:
    entry = _CheckedBatch(RankBatch(rank=rank, host=host), _steps_checked(run, steps), None, None)
    result = _rank_batches_write(run, [entry])[0].steps
    assert result is not None
    return result


def samples_ingest(*, run: Run, rank: int, host: str | None, samples: Any) -> IngestResult:
    entry = _CheckedBatch(RankBatch(rank=rank, host=host), None, _samples_checked(run, samples), None)
    result = _rank_batches_write(run, [entry])[0].samples
    assert result is not None
    return result


# What applying events reads and writes of a run: its config and environment (up to 64 KiB of
# JSON each) are never loaded or written back.
_EVENT_RUN_FIELDS = ("id", "status", "finished_at", "last_seen_at", "ingest_seq", "end_cause", "end_detail")


def events_ingest(*, run: Run, events: list[dict[str, Any]], touch: bool = True) -> IngestResult:
    """Store new events (deduplicated by their client id) and apply finish and counters.

    ``touch=False`` is the combined batch's call: its own rank upsert then moves the run's
    last_seen_at and ingest_seq and asks for the analysis, once for the whole batch.
    """
    latest = span_end_ns(run.allocation_start)
    for i, event in enumerate(events):
        end = max(event["t_ns"], event.get("t_start_ns", 0) + event.get("dur_ns", 0))
        if end > latest:
            raise _too_late(run, f"events[{i}].t_ns", "the event")
    # Inside a batch (touch=False) no savepoint of its own: a failure refuses the whole batch.
    with transaction.atomic(savepoint=touch):
        # The ranks whose counters may move first, then the run: the order every writer takes
        # them in (ranks_lock), so this and a rank's own batch cannot deadlock.
        counted = [event.get("rank", 0) for event in events if event["kind"] == EventKind.COUNTERS]
        if counted:
            ranks_lock(run.pk, counted, hand_out=0)
        # One writer of a run's events at a time keeps accepted/duplicate counts exact.
        locked = Run.objects.select_for_update().only(*_EVENT_RUN_FIELDS).filter(pk=run.pk).first()
        if locked is None:
            raise run_not_found()
        ids = [event["id"] for event in events]
        seen = set(RunEvent.objects.filter(run_id=run.pk, event_id__in=ids).values_list("event_id", flat=True))
        fresh = [event for event in events if event["id"] not in seen]
        ended = (locked.status, locked.finished_at, locked.end_cause, locked.end_detail)
        if fresh and locked.status == RunStatus.CRASHED and _run_reopen_if_marked_crashed(locked):
            # Before this batch's own finish events are applied: they then set the status.
            locked.status, locked.finished_at = RunStatus.RUNNING, None
        RunEvent.objects.bulk_create(
            [
                RunEvent(
                    run_id=run.pk,
                    event_id=event["id"],
                    kind=event["kind"],
                    rank=event.get("rank", 0),
                    t_ns=event["t_ns"],
                    name=event.get("name", ""),
                    t_start_ns=event.get("t_start_ns"),
                    dur_ns=event.get("dur_ns"),
                    status=event.get("status", ""),
                    data=event.get("data", {}),
                )
                for event in fresh
            ]
        )
        index = {event["id"]: i for i, event in enumerate(events)}
        counters: dict[int, dict[str, Any]] = {}
        for event in fresh:
            _event_apply(locked, event, f"events[{index[event['id']]}]", counters)
        _counters_store(run.pk, counters)
        now_ended = (locked.status, locked.finished_at, locked.end_cause, locked.end_detail)
        fields = ["status", "finished_at", "end_cause", "end_detail"] if now_ended != ended else []
        if touch:
            locked.last_seen_at = max(locked.last_seen_at, timezone.now())
            fields.append("last_seen_at")
            if fresh:
                locked.ingest_seq += 1
                fields.append("ingest_seq")
                _changed_on_commit(locked)
        if fields:
            locked.save(update_fields=fields)
    return IngestResult(len(fresh), len(events) - len(fresh))


def _event_apply(run: Run, event: dict[str, Any], where: str, counters: dict[int, dict[str, Any]]) -> None:
    kind = event["kind"]
    if kind == EventKind.FINISH:
        finished_at = _moment(event["t_ns"])
        # Ranks finish one by one; the run ends with the last of them and keeps the worst status.
        severity: list[str] = [RunStatus.RUNNING, RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CRASHED]
        status = event["status"]
        if run.status == RunStatus.RUNNING or severity.index(status) > severity.index(run.status):
            run.status = status
        run.finished_at = max(run.finished_at, finished_at) if run.finished_at else finished_at
        _end_cause_apply(run, status, event.get("data") or {})
    elif kind == EventKind.COUNTERS:
        rank = event.get("rank", 0)
        stored = counters[rank] if rank in counters else _rank_counters(run.pk, rank)
        counters[rank] = _counters_merged(stored, event.get("data", {}), rank, f"{where}.data")


# A more specific cause replaces a vaguer one: ranks report one by one, and the rank that hit
# the OOM or the collective timeout says more than a rank that only saw its neighbour vanish.
_CAUSE_RANK = {"": 0, EndCause.FINISHED: 1, EndCause.EXCEPTION: 2, EndCause.SIGKILL: 3, EndCause.SIGTERM: 3,
               EndCause.COLLECTIVE_TIMEOUT: 4, EndCause.OOM: 5}  # fmt: skip


def _end_cause_apply(run: Run, status: str, data: dict[str, Any]) -> None:
    """The run's end cause after a rank's finish event: the cause it reports, else finished or
    exception by its status (docs/api.md, "Jobs and attempts")."""
    cause = data.get("cause") or (EndCause.FINISHED if status == RunStatus.FINISHED else EndCause.EXCEPTION)
    if _CAUSE_RANK[cause] > _CAUSE_RANK.get(run.end_cause, 0):
        run.end_cause = cause
        run.end_detail = str(data.get("exception", ""))[:200]


def _counters_merged(stored: dict[str, Any], data: dict[str, Any], rank: int, field: str) -> dict[str, Any]:
    """A rank's counters after `data` (cumulative: each keeps its highest value)."""
    merged = dict(stored)
    for key, value in data.items():
        merged[key] = max(value, merged.get(key, value))
    if len(merged) > MAX_RANK_COUNTERS:  # raised inside the batch's transaction: nothing is kept
        raise _too_many_counters(rank, field)
    return merged


def _too_many_counters(rank: int, field: str) -> ApiError:
    message = f"rank {rank} would keep more than {MAX_RANK_COUNTERS} counters"
    return ApiError("invalid", f"{field}: {message}", fields={field: message})


def _rank_counters(run_id: uuid.UUID, rank: int) -> dict[str, Any]:
    """A rank's stored counters, its row locked until the transaction ends (on SQLite the
    transaction holds the database's write lock already)."""
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT counters FROM telemetry_runrank WHERE run_id = %s AND rank = %s{lock}", [run_param(run_id), rank])
        row = cursor.fetchone()
    if row is None:
        return {}
    value = row[0]
    return json.loads(value) if isinstance(value, str | bytes) else dict(value)


def _counters_store(run_id: uuid.UUID, counters: dict[int, dict[str, Any]]) -> None:
    """One upsert per rank whose counters moved (a rank seen first by its counters gets its row)."""
    if not counters:
        return
    with connection.cursor() as cursor:
        for rank, merged in counters.items():
            cursor.execute(
                "INSERT INTO telemetry_runrank (run_id, rank, host, counters, step_rows, last_step, reused_step_rows) "
                "VALUES (%s, %s, '', %s, 0, NULL, 0) ON CONFLICT (run_id, rank) DO UPDATE SET counters = excluded.counters",
                [run_param(run_id), rank, json.dumps(merged)],
            )


def _moment(t_ns: int) -> datetime:
    """Epoch ns as an exact datetime (microseconds truncated; no float rounding)."""
    return datetime.fromtimestamp(t_ns // 10**9, tz=UTC) + timedelta(microseconds=t_ns % 10**9 // 1000)


@dataclass(frozen=True)
class BatchIngestResult:
    """What one combined batch stored, part by part (a part not sent is None)."""

    steps: StepIngestResult | None
    samples: IngestResult | None
    events: IngestResult | None

    def as_dict(self) -> dict[str, dict[str, int]]:
        parts = (("steps", self.steps), ("samples", self.samples), ("events", self.events))
        return {name: part.as_dict() for name, part in parts if part is not None}


def _steps_checked(run: Run, steps: Any) -> Batch:
    batch = _columns(steps, STEP_COLUMNS, "steps", ("step",), rising="t_start_ns")
    dur = batch.values.get("dur_ns")
    ends = batch.values["t_start_ns"] if dur is None else batch.values["t_start_ns"] + dur  # null dur is 0 here
    _span_check(run, batch, "steps.t_start_ns", "step", ends)
    return batch


def _samples_checked(run: Run, samples: Any) -> Batch:
    batch = _columns(samples, SAMPLE_COLUMNS, "samples", ("device", "t_ns"), {"device": -1})
    _span_check(run, batch, "samples.t_ns", "t_ns", batch.values["t_ns"])
    return batch


MAX_NODE_BATCHES = 256  # ranks in one node batch: far above the GPUs of any node


@dataclass(frozen=True)
class RankBatch:
    """One rank's batch of one flush interval as the API parsed it: its rank, host, events and
    counters checked there, its steps and samples the columns as sent (checked here)."""

    rank: int
    host: str | None = None
    steps: Any = None
    samples: Any = None
    events: list[dict[str, Any]] | None = None
    counters: dict[str, Any] | None = None


@dataclass(frozen=True)
class _CheckedBatch:
    sent: RankBatch
    steps: Batch | None
    samples: Batch | None
    where: str | None  # its place in the request ("batches[2]"), which its 400s name; None: the body


def _rank_batch_checked(run: Run, sent: RankBatch, where: str | None) -> _CheckedBatch:
    with fields_within(where):
        steps = _steps_checked(run, sent.steps) if sent.steps is not None else None
        samples = _samples_checked(run, sent.samples) if sent.samples is not None else None
    return _CheckedBatch(sent, steps, samples, where)


def _rows_insert(
    kind: Kind, run: Run, parts: list[tuple[int, Batch | None]], marks: dict[int, RankMarks]
) -> list[InsertResult | None]:
    """The batches of `parts` (rank, rows or None) in one batches_insert; results in their order."""
    sent = [(i, rank, batch) for i, (rank, batch) in enumerate(parts) if batch is not None]
    results: list[InsertResult | None] = [None] * len(parts)
    if sent:
        batches = [(rank, batch) for _, rank, batch in sent]
        for (i, _, _), result in zip(sent, batches_insert(kind=kind, run_id=run.pk, batches=batches, marks=marks)):
            results[i] = result
    return results


def _rank_batches_write(run: Run, entries: list[_CheckedBatch]) -> list[BatchIngestResult]:
    """Checked batches of distinct ranks, in one transaction: every part of every rank (the
    ranks taken first, storage.ranks_lock), then one rank upsert for all of them and one run
    update, one analysis request."""
    with transaction.atomic():
        # The ranks first, then (events, the upsert's end) the run: the order every writer of a
        # rank takes them in, so a node batch with events and a rank's own request cannot deadlock.
        marks = ranks_lock(run.pk, [entry.sent.rank for entry in entries])
        events: list[IngestResult | None] = []
        for entry in entries:
            with fields_within(entry.where):
                events.append(events_ingest(run=run, events=entry.sent.events, touch=False) if entry.sent.events else None)
        steps = _rows_insert(STEPS, run, [(entry.sent.rank, entry.steps) for entry in entries], marks)
        samples = _rows_insert(SAMPLES, run, [(entry.sent.rank, entry.samples) for entry in entries], marks)
        accepted = sum(rows.accepted for rows in (*steps, *samples) if rows is not None)
        if accepted and run.status == RunStatus.CRASHED:
            _run_reopen_if_marked_crashed(run)
        changed = bool(accepted) or any(result is not None and result.accepted for result in events)
        ranks = [
            _RankRows(
                entry.sent.rank,
                entry.sent.host,
                step_rows,
                # every key of the batch is stored now (new, or refused as stored)
                int(entry.steps.values["step"].max()) if entry.steps is not None else None,
                int(entry.samples.values["t_ns"].max()) if entry.samples is not None else None,
                entry.sent.counters or None,
                f"{entry.where}.counters" if entry.where else "counters",
            )
            for entry, step_rows in zip(entries, steps)
        ]
        _after_ingest(run, ranks, changed)
        if changed:
            _changed_on_commit(run)
    return [
        BatchIngestResult(
            steps=StepIngestResult(step_rows.accepted, step_rows.duplicates, step_rows.reused) if step_rows else None,
            samples=IngestResult(sample_rows.accepted, sample_rows.duplicates + sample_rows.reused) if sample_rows else None,
            events=event_result,
        )
        for event_result, step_rows, sample_rows in zip(events, steps, samples)
    ]


def batch_ingest(
    *,
    run: Run,
    rank: int,
    host: str | None,
    steps: Any = None,
    samples: Any = None,
    events: list[dict[str, Any]] | None = None,
    counters: dict[str, Any] | None = None,
) -> BatchIngestResult:
    """One rank's steps, samples, events and counters of one flush interval, in one transaction.

    `counters` (checked by the caller) are merged into the rank's as a counters event's data
    would be, without an event row: by the same upsert as the rows.

    The same checks as the separate endpoints, all before anything is written, and the same
    idempotency per part; a part that fails refuses the whole batch (nothing is kept). One rank
    upsert and one run update for the rows, one analysis request: that is what makes one combined
    request cheaper than three.
    """
    sent = RankBatch(rank=rank, host=host, steps=steps, samples=samples, events=events, counters=counters)
    entry = _rank_batch_checked(run, sent, None)
    return _rank_batches_write(run, [entry])[0]


def node_batch_ingest(*, run: Run, batches: list[RankBatch]) -> list[BatchIngestResult]:
    """Every local rank's batch of one node's flush interval (1 to MAX_NODE_BATCHES, distinct
    ranks), in one transaction: what batch_ingest does for each, at a fraction of the cost
    (one request, one run lookup, one insert a table; bench/request_cost.py --node-batches).

    All or nothing: every batch is checked before anything is written, and one that fails
    refuses them all; a 400 names the field under the batch's place (`batches[2].steps.dur_ns`).
    Idempotent per rank and part as batch_ingest. Each table takes all ranks' chunks in one
    statement, and the ranks' rows and the run one statement each (storage.py).
    Results in the order of `batches`.
    """
    first: dict[int, int] = {}
    for i, sent in enumerate(batches):
        j = first.setdefault(sent.rank, i)
        if j != i:
            raise invalid(f"batches[{i}].rank", f"rank {sent.rank} is batches[{j}]'s too; one batch per rank")
    entries = [_rank_batch_checked(run, sent, f"batches[{i}]") for i, sent in enumerate(batches)]
    return _rank_batches_write(run, entries)

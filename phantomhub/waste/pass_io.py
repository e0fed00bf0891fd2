"""What an analysis pass reads and writes besides the raw rows, in as few statements as it can.

A small live run's pass used to cost ~20 ms of worker CPU, most of it not the model but a dozen
ORM round trips (query compilation, client-side binding, model instances). On PostgreSQL a pass
now takes its lock in one statement, reads everything else it needs before the raw rows in a
second (the run, its project's and the organization's settings, its ranks' row counts, an
aggregate over its events, its stored state, whether its rows were pruned, its project's finished
runs for evidence), and writes its outputs in one more (the analysis row, the run's days, their
rollup marks, the state). Other databases (SQLite) take the ORM path: the same values, more
statements (tests/test_sql_pairs.py runs both on the same PostgreSQL data and compares them).
The values are the ORM's: the run is built by ``Run.from_db`` from its columns, after the
converters Django applies to its fields, and JSON and bytes are decoded as the ORM decodes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from functools import cache
from typing import Any, NamedTuple

import orjson
import psycopg
from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, Count, F, Max, Q
from django.db.models.functions import Coalesce, Greatest
from psycopg.types.json import Jsonb

from phantomhub.accounts.models import Project
from phantomhub.pricing.models import PriceEntry
from phantomhub.telemetry.models import EventKind, Run, RunArchive, RunEvent, RunRank
from phantomhub.waste.models import (
    OrgSettings,
    ProjectSettings,
    RollupPending,
    RunAnalysis,
    RunAnalysisState,
    RunDay,
    _orjson_dumps,
)


class RankRows(NamedTuple):
    """What analysis reads of a RunRank (plain tuples: a 1,024-rank run needs no model objects)."""

    rank: int
    host: str
    step_rows: int
    reused_step_rows: int


@dataclass(frozen=True)
class JobContext:
    """Where a run stands among its job's attempts (ordered by (started_at, id); docs/waste-model.md,
    "Jobs"): how many came before it, the latest end of those (finished_at, else last_seen_at),
    the highest step any of their ranks reached, and whether an attempt comes after it."""

    job_id: uuid.UUID
    previous: int
    previous_end: datetime | None
    previous_last_step: int | None
    has_next: bool


@dataclass(frozen=True)
class Policy:
    target_mfu: float
    recoverability: dict[str, float]


@dataclass
class PassInputs:
    """Everything a pass reads before the raw rows."""

    run: Run
    team_id: int
    target_mfu: float  # the project's, else the organization's
    recoverability: dict[str, Any]  # the organization's factors, overridden by the project's
    ranks: dict[int, RankRows]
    last_event_ns: int | None
    oom_count: int
    phase_count: int
    state: tuple[bytes, bytes, bytes] | None  # RunAnalysisState's header, ranks, windows
    pruned: bool | None  # whether the run's raw rows left PostgreSQL (None: not read here)
    # The price book's version (entries, highest id, latest change; None: not read here): equal
    # versions hold equal entries, so the run's price segments can be reused (services.py).
    prices_version: str | None
    # The project's finished runs with a profile, newest first: (run_id, gpu_key, profile).
    references: list[tuple[str, str, Any]]
    # The run's place among its job's attempts (None: not an attempt of a job).
    job: JobContext | None = None


def analysis_lock(run_id: uuid.UUID) -> RunAnalysis | None:
    """The run's RunAnalysis row, locked for this transaction: one analysis of a run at a time
    (None: no such run). Nothing of it is loaded but its key: a pass rewrites every column it
    stores (STORED_FIELDS) and never reads the old ones. The statement as text (SQLite has no
    FOR UPDATE: a writing transaction holds the whole database)."""
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    key = run_id if connection.features.has_native_uuid_field else run_id.hex
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT run_id FROM {RunAnalysis._meta.db_table} WHERE run_id = %s{lock}", [key])
        found = cursor.fetchone()
    if found is not None:
        return RunAnalysis.from_db(connection.alias, ["run_id"], [run_id])
    return _analysis_create(run_id)


def _analysis_create(run_id: uuid.UUID) -> RunAnalysis | None:
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        return None
    try:
        with transaction.atomic():
            RunAnalysis.objects.create(run=run, project_id=run.project_id, team_id=run.project.team_id)
    except IntegrityError:
        pass  # created concurrently
    return RunAnalysis.objects.select_for_update().only("run_id").get(run_id=run_id)


def _json(value: Any) -> Any:
    """A JSON column as the ORM reads it (Django's psycopg setup loads jsonb as text)."""
    return orjson.loads(value) if isinstance(value, (str, bytes, bytearray, memoryview)) else value


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


@cache
def _inputs_sql() -> str:
    """pass_inputs_read's statement, its whitespace collapsed (psycopg caches the parsing of a
    statement up to 4 kB)."""
    run_table = Run._meta.db_table
    sql = f"""
        SELECT r.*, p.team_id AS x_team_id, p.target_mfu AS x_project_mfu, ps.recoverability AS x_project_recov,
            o.id AS x_org_id, o.target_mfu AS x_org_mfu, o.recoverability AS x_org_recov,
            rk.ranks AS x_ranks, rk.hosts AS x_hosts, rk.step_rows AS x_step_rows, rk.reused AS x_reused,
            ev.last AS x_last_event, ev.ooms AS x_ooms, ev.phases AS x_phases,
            st.run_id AS x_state, st.header AS x_header, st.ranks AS x_state_ranks, st.windows AS x_windows,
            EXISTS (SELECT 1 FROM {RunArchive._meta.db_table} ar WHERE ar.run_id = r.id AND ar.pruned_at IS NOT NULL)
                AS x_pruned,
            (SELECT concat_ws(',', count(*), max(pe.id), max(pe.updated_at)) FROM {PriceEntry._meta.db_table} pe)
                AS x_prices,
            (SELECT jsonb_agg(jsonb_build_array(f.run_id, f.gpu_key, f.profile) ORDER BY f.analysed_at DESC)
             FROM (SELECT ra.run_id, ra.gpu_key, ra.profile, ra.analysed_at FROM {RunAnalysis._meta.db_table} ra
                   WHERE ra.project_id = r.project_id AND ra.complete AND ra.profile IS NOT NULL AND ra.run_id <> r.id
                   ORDER BY ra.analysed_at DESC LIMIT %s) f) AS x_refs,
            jb.prev AS x_job_prev, jb.prev_end AS x_job_prev_end, jb.last_step AS x_job_last_step, jb.next AS x_job_next
        FROM {run_table} r
        JOIN {Project._meta.db_table} p ON p.id = r.project_id
        LEFT JOIN {ProjectSettings._meta.db_table} ps ON ps.project_id = r.project_id
        LEFT JOIN {OrgSettings._meta.db_table} o ON o.id = 1
        LEFT JOIN {RunAnalysisState._meta.db_table} st ON st.run_id = r.id
        CROSS JOIN LATERAL (
            SELECT array_agg(rank ORDER BY rank) AS ranks, array_agg(host ORDER BY rank) AS hosts,
                array_agg(step_rows ORDER BY rank) AS step_rows, array_agg(reused_step_rows ORDER BY rank) AS reused
            FROM {RunRank._meta.db_table} WHERE run_id = r.id) rk
        CROSS JOIN LATERAL (
            SELECT max(GREATEST(t_ns, t_start_ns + dur_ns)) AS last, count(*) FILTER (WHERE kind = %s) AS ooms,
                count(*) FILTER (WHERE kind = %s) AS phases
            FROM {RunEvent._meta.db_table} WHERE run_id = r.id) ev
        LEFT JOIN LATERAL (
            SELECT pv.prev, pv.prev_end,
                (SELECT max(k.last_step) FROM {RunRank._meta.db_table} k JOIN {run_table} j ON j.id = k.run_id
                 WHERE j.job_id = r.job_id AND (j.started_at, j.id) < (r.started_at, r.id)) AS last_step,
                EXISTS (SELECT 1 FROM {run_table} j WHERE j.job_id = r.job_id AND (j.started_at, j.id) > (r.started_at, r.id))
                    AS next
            FROM (SELECT count(*) AS prev, max(COALESCE(j.finished_at, j.last_seen_at)) AS prev_end FROM {run_table} j
                  WHERE j.job_id = r.job_id AND (j.started_at, j.id) < (r.started_at, r.id)) pv
            WHERE r.job_id IS NOT NULL) jb ON true
        WHERE r.id = %s
    """
    return " ".join(sql.split())


@cache
def _column_names(raw: tuple[bytes, ...]) -> tuple[str, ...]:
    return tuple(name.decode() for name in raw)


@cache
def _run_reader(columns: tuple[str, ...]) -> tuple[list[str], list[int], list[tuple[int, list[Any], Any]]]:
    """For a row of ``columns``: Run's concrete fields (attnames), where each one is, and the
    converters the ORM applies to it (its JSON fields': Django loads jsonb as text). Made once
    per worker: ``Run.objects.raw`` resolved them on every pass (~1 ms of a small run's pass)."""
    fields = Run._meta.concrete_fields
    at = {name: i for i, name in enumerate(columns)}
    compiler = Run.objects.all().query.get_compiler(connection=connection)
    converters = compiler.get_converters([f.get_col(Run._meta.db_table) for f in fields])
    return [f.attname for f in fields], [at[f.column] for f in fields], [(i, fns, e) for i, (fns, e) in converters.items()]


def _run_from_row(columns: tuple[str, ...], row: tuple[Any, ...]) -> Run:
    """The Run of a row holding its table's columns (among others), as the ORM builds it."""
    names, positions, converters = _run_reader(columns)
    values = [row[i] for i in positions]
    for i, functions, expression in converters:
        for convert in functions:
            values[i] = convert(values[i], expression, connection)
    return Run.from_db(connection.alias, names, values)


def pass_inputs_read(run_id: uuid.UUID, references_max: int) -> PassInputs | None:
    """Read after taking the lock: the ingest_seq read here is the one the pass analyses up to."""
    if connection.vendor == "postgresql":
        return _pass_inputs_pg(run_id, references_max)
    return _pass_inputs_orm(run_id, references_max)


def _pass_inputs_pg(run_id: uuid.UUID, references_max: int) -> PassInputs | None:
    """pass_inputs_read in one statement (LATERAL, FILTER, arrays and jsonb_agg: PostgreSQL's).
    tests/test_sql_pairs.py pins it to the ORM's reads."""
    with connection.cursor() as cursor:
        cursor.execute(_inputs_sql(), [references_max, EventKind.OOM.value, EventKind.PHASE.value, run_id])
        found = cursor.fetchone()
        if found is None:
            return None
        # The names from the result itself: ``cursor.description`` builds a Column object per
        # column (~45 here), a good part of this read's client CPU.
        result = cursor.cursor.pgresult
        assert result is not None
        columns = _column_names(tuple(result.fname(i) or b"" for i in range(result.nfields)))
    run = _run_from_row(columns, found)
    extra = {name: value for name, value in zip(columns, found, strict=True) if name.startswith("x_")}
    if extra["x_org_id"] is None:  # no organization row yet: create it with its defaults
        org = OrgSettings.get()
        org_mfu, org_recov = org.target_mfu, org.recoverability
    else:
        org_mfu, org_recov = extra["x_org_mfu"], _json(extra["x_org_recov"])
    project_recov = _json(extra["x_project_recov"]) if extra["x_project_recov"] is not None else {}
    ranks: dict[int, RankRows] = {}
    if extra["x_ranks"] is not None:
        for r, host, rows, reused in zip(
            extra["x_ranks"], extra["x_hosts"], extra["x_step_rows"], extra["x_reused"], strict=True
        ):
            ranks[r] = RankRows(r, host, rows, reused)
    state = None
    if extra["x_state"] is not None:
        state = (bytes(extra["x_header"]), bytes(extra["x_state_ranks"]), bytes(extra["x_windows"]))
    refs = [(str(r), key, profile) for r, key, profile in _json(extra["x_refs"]) or []]
    job = None
    if run.job_id is not None:
        job = JobContext(
            run.job_id, int(extra["x_job_prev"]), extra["x_job_prev_end"], extra["x_job_last_step"], bool(extra["x_job_next"])
        )
    return PassInputs(
        run=run,
        team_id=extra["x_team_id"],
        target_mfu=extra["x_project_mfu"] or org_mfu,
        recoverability={**org_recov, **project_recov},
        ranks=ranks,
        last_event_ns=extra["x_last_event"],
        oom_count=int(extra["x_ooms"]),
        phase_count=int(extra["x_phases"]),
        state=state,
        pruned=bool(extra["x_pruned"]),
        prices_version=str(extra["x_prices"]),
        references=refs,
        job=job,
    )


def _pass_inputs_orm(run_id: uuid.UUID, references_max: int) -> PassInputs | None:
    """pass_inputs_read through the ORM (SQLite): the same values in more statements, but for
    ``pruned`` and ``prices_version``, not read here."""
    run = Run.objects.select_related("project", "project__waste_settings").filter(pk=run_id).first()
    if run is None:
        return None
    org = OrgSettings.get()
    try:
        project_settings: ProjectSettings | None = run.project.waste_settings
    except ProjectSettings.DoesNotExist:
        project_settings = None
    ranks = {
        r[0]: RankRows(*r) for r in RunRank.objects.filter(run=run).values_list("rank", "host", "step_rows", "reused_step_rows")
    }
    events = RunEvent.objects.filter(run=run).aggregate(
        # A phase is a sign of life until it ends (a save after the last step of a killed run).
        last=Max(Greatest("t_ns", Coalesce(F("t_start_ns") + F("dur_ns"), "t_ns"), output_field=BigIntegerField())),
        ooms=Count("pk", filter=Q(kind=EventKind.OOM)),
        phases=Count("pk", filter=Q(kind=EventKind.PHASE)),
    )
    stored = RunAnalysisState.objects.filter(run=run).values_list("header", "ranks", "windows").first()
    refs = (
        RunAnalysis.objects.filter(project_id=run.project_id, complete=True, profile__isnull=False)
        .exclude(run_id=run.pk)
        .order_by("-analysed_at")
        .values_list("run_id", "gpu_key", "profile")[:references_max]
    )
    return PassInputs(
        run=run,
        team_id=run.project.team_id,
        target_mfu=run.project.target_mfu or org.target_mfu,
        recoverability={**org.recoverability, **(project_settings.recoverability if project_settings else {})},
        ranks=ranks,
        last_event_ns=events["last"],
        oom_count=int(events["ooms"]),
        phase_count=int(events["phases"]),
        state=None if stored is None else (bytes(stored[0]), bytes(stored[1]), bytes(stored[2])),
        pruned=None,
        prices_version=None,
        references=[(str(r), key, profile) for r, key, profile in refs],
        job=job_context_orm(run),
    )


def job_context_orm(run: Run) -> JobContext | None:
    """The run's JobContext through the ORM (the portable twin of the inputs statement's part)."""
    if run.job_id is None:
        return None
    attempts = Run.objects.filter(job_id=run.job_id)
    before = attempts.filter(Q(started_at__lt=run.started_at) | Q(started_at=run.started_at, id__lt=run.pk))
    after = attempts.filter(Q(started_at__gt=run.started_at) | Q(started_at=run.started_at, id__gt=run.pk))
    prev = before.aggregate(n=Count("pk"), end=Max(Coalesce("finished_at", "last_seen_at")))
    last_step = RunRank.objects.filter(run__in=before).aggregate(m=Max("last_step"))["m"]
    return JobContext(run.job_id, int(prev["n"]), prev["end"], last_step, after.exists())


@dataclass
class StateWrite:
    """The state columns a pass rewrites (None: unchanged), or all of them for a new state."""

    header: bytes
    ranks: bytes | None
    windows: bytes | None
    new: bool


# An analysis rewrites these columns of its RunAnalysis row and no others.
STORED_FIELDS = ["project", "team", "error", "failures", "failed_seq", "retry_at", "analysed_seq", "analysed_at",
                 "complete", "started_at", "gpu_key", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd",
                 "waste_share", "mfu", "profile", "lost", "result", "rank_figures", "recommendations"]  # fmt: skip
_JSON_FIELDS = {"profile", "lost", "result", "recommendations"}
RUNDAY_FIELDS = ["project", "team", "gpu_key", "gpu_seconds", "cost_usd", "waste_usd", "price_entry_ids",
                 "categories_usd", "recoverable_usd", "lost_usd", "mfu_gpu_seconds", "mfu_known_gpu_seconds"]  # fmt: skip


@cache
def _columns(model: Any, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """(column, SQL type) of each field."""
    fields = [model._meta.get_field(name) for name in names]
    return [(f.column, f.db_type(connection)) for f in fields]


@dataclass(frozen=True)
class PassOutputs:
    """What one pass stores: the analysis row (``serialized``: its JSON columns already
    serialized), the run's days (with ``prune_days``, its other days deleted), the rollup marks of
    ``marked`` (at ``marked_at``) and the state."""

    row: RunAnalysis
    serialized: Mapping[str, bytes]
    days: list[RunDay]
    prune_days: bool
    marked: list[date]
    marked_at: datetime
    state: StateWrite


def pass_outputs_write(out: PassOutputs) -> None:
    """Store the analysis row (``serialized``: JSON columns already serialized, written as they
    are; the others are ``row``'s attributes), the run's days (upserted; with ``prune_days``, its other days
    deleted: the run no longer covers a day it was written for), the rollup marks
    of ``marked`` and the state: one statement on PostgreSQL (data-modifying CTEs run whether
    or not the statement reads them), the ORM's upserts elsewhere.

    The statement binds its values server-side: the result's JSON (~375 kB for a small run, most
    of it the chart windows) and the state's bytes travel as parameters instead of being escaped
    into the SQL text, and the days and marks are arrays, so the statement text is the same from
    pass to pass (psycopg caches its parsing)."""
    write = _pass_outputs_pg if connection.vendor == "postgresql" else _pass_outputs_orm
    write(out)


def _pass_outputs_pg(out: PassOutputs) -> None:
    """pass_outputs_write in one statement (data-modifying CTEs, jsonb_to_recordset, arrays:
    PostgreSQL's). tests/test_sql_pairs.py pins it to the ORM's writes."""
    parts: list[str] = []
    params: list[Any] = []
    sets = []
    for field, (column, _) in zip(STORED_FIELDS, _columns(RunAnalysis, tuple(STORED_FIELDS)), strict=True):
        if field in out.serialized:
            params.append(Jsonb(out.serialized[field], dumps=_as_is))
        else:
            value = getattr(out.row, column)
            params.append(Jsonb(value, dumps=_orjson_dumps) if field in _JSON_FIELDS and value is not None else value)
        sets.append(f"{column} = %s")
    parts.append(f"a AS (UPDATE {RunAnalysis._meta.db_table} SET {', '.join(sets)} WHERE run_id = %s RETURNING 1)")
    params.append(out.row.run_id)
    if out.prune_days:
        parts.append(f"g AS (DELETE FROM {RunDay._meta.db_table} WHERE run_id = %s AND NOT (day = ANY(%s::date[])) RETURNING 1)")
        params += [out.row.run_id, [d.day for d in out.days]]
    if out.days:
        # The rows as one JSON parameter (jsonb_to_recordset types each column): no array to
        # adapt per column. Decimals go as strings (exact), floats in their shortest exact form.
        columns = _columns(RunDay, ("run", "day", *RUNDAY_FIELDS))
        names = [c for c, _ in columns]
        params.append(orjson.dumps([{n: getattr(d, n) for n in names} for d in out.days], default=_decimal_text).decode())
        updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names[2:])
        parts.append(
            f"d AS (INSERT INTO {RunDay._meta.db_table} ({', '.join(names)}) SELECT {', '.join(names)} "
            f"FROM jsonb_to_recordset(%s::jsonb) AS d({', '.join(f'{n} {kind}' for n, kind in columns)}) "
            f"ON CONFLICT (run_id, day) DO UPDATE SET {updates} RETURNING 1)"
        )
    if out.marked:
        parts.append(
            f"m AS (INSERT INTO {RollupPending._meta.db_table} (day, marked_at) SELECT day, %s FROM unnest(%s::date[]) AS m(day) "
            "ON CONFLICT (day) DO UPDATE SET marked_at = EXCLUDED.marked_at RETURNING 1)"
        )
        params += [out.marked_at, sorted(set(out.marked))]
    state_table = RunAnalysisState._meta.db_table
    if out.state.new:
        tail = (
            f"INSERT INTO {state_table} (run_id, header, ranks, windows) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET header = EXCLUDED.header, ranks = EXCLUDED.ranks, windows = EXCLUDED.windows"
        )
        params += [out.row.run_id, out.state.header, out.state.ranks, out.state.windows]
    else:
        blobs = ["header = %s"]
        params.append(out.state.header)
        for name, blob in (("ranks", out.state.ranks), ("windows", out.state.windows)):
            if blob is not None:
                blobs.append(f"{name} = %s")
                params.append(blob)
        tail = f"UPDATE {state_table} SET {', '.join(blobs)} WHERE run_id = %s"
        params.append(out.row.run_id)
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    # A server-side-binding cursor (Django's own bind client-side), wrapped as Django wraps its
    # cursors: the statement is still logged and counted (CaptureQueriesContext, DEBUG).
    with connection._prepare_cursor(psycopg.Cursor(raw)) as cursor:  # type: ignore[attr-defined]
        cursor.execute(f"WITH {', '.join(parts)} {tail}", params)


def _as_is(value: bytes) -> bytes:
    return value


def _decimal_text(value: Any) -> str:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def _pass_outputs_orm(out: PassOutputs) -> None:
    """pass_outputs_write through the ORM's upserts (SQLite)."""
    for field, raw in out.serialized.items():
        setattr(out.row, field, orjson.loads(raw))
    out.row.save(update_fields=STORED_FIELDS)
    if out.prune_days:
        RunDay.objects.filter(run_id=out.row.run_id).exclude(day__in=[d.day for d in out.days]).delete()
    # One upsert: a live run's days are rewritten by every analysis.
    RunDay.objects.bulk_create(out.days, update_conflicts=True, unique_fields=["run", "day"], update_fields=RUNDAY_FIELDS)
    RollupPending.objects.bulk_create(
        [RollupPending(day=day, marked_at=out.marked_at) for day in out.marked],
        update_conflicts=True,
        unique_fields=["day"],
        update_fields=["marked_at"],
    )
    if out.state.new:
        RunAnalysisState.objects.update_or_create(
            run_id=out.row.run_id, defaults={"header": out.state.header, "ranks": out.state.ranks, "windows": out.state.windows}
        )
        return
    fields: dict[str, Any] = {"header": out.state.header}
    if out.state.ranks is not None:
        fields["ranks"] = out.state.ranks
    if out.state.windows is not None:
        fields["windows"] = out.state.windows
    RunAnalysisState.objects.filter(run_id=out.row.run_id).update(**fields)

"""Queries written twice: a PostgreSQL statement and the portable (or ORM) one SQLite runs, each
pair run here on the same PostgreSQL data and held to the same answer.

Where one statement serves both backends there is no pair (the sweep's, the rollups', the
retention's; docs/architecture.md). What is left is PostgreSQL's own: arrays bound as one
parameter, server-bound and binary cursors, the partition key, data-modifying CTEs, jsonb
operators. Each pair's PostgreSQL half names this file; the dirty-run query of the sweep is held
to its ORM oracle in tests/waste/test_analysis_isolation.py on both backends.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, models, transaction
from rest_framework.test import APIClient

from phantomhub.portal import run_list, run_page, sums
from phantomhub.telemetry import storage
from phantomhub.telemetry.models import Run, RunEvent
from phantomhub.telemetry.partitions import LEGACY_WEEK, run_week
from phantomhub.waste import pass_io, services
from phantomhub.waste.models import FastJSONField, RollupPending, RunAnalysis, RunAnalysisState, RunDay
from tests.conftest import T0_NS, Tenant, steps_body
from tests.portal.test_run_page import _analysed, reader  # noqa: F401
from tests.waste.test_analysis_service import finish, known_steps, make_run, price_36  # noqa: F401

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the pairs' PostgreSQL halves run on PostgreSQL only"),
]


class _Undone(Exception):
    pass


def _undone(change: Callable[[], Any], look: Callable[[], Any]) -> tuple[Any, Any]:
    """What `change` returns and what `look` sees after it, in a savepoint rolled back after: the
    two halves of a pair start from the same data."""
    out: list[Any] = []
    try:
        with transaction.atomic():
            out.append(change())
            out.append(look())
            raise _Undone
    except _Undone:
        pass
    return out[0], out[1]


def _chunks(run_id: uuid.UUID) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    with connection.cursor() as cursor:
        for kind in storage.KINDS:
            cursor.execute(
                f"SELECT rank, seq, key_lo, key_hi, n, payload, run_week FROM {kind.table} WHERE run_id = %s ORDER BY rank, seq",
                [run_id],
            )
            out[kind.name] = [(*row[:5], bytes(row[5]), row[6]) for row in cursor.fetchall()]
    return out


def _steps(rank: int, first: int, n: int) -> storage.Batch:
    from phantomhub.telemetry.columns import STEP_COLUMNS, columns_validate

    body = steps_body(n, rank=rank, first=first)["steps"]
    return columns_validate(body, STEP_COLUMNS, where="steps", keys=("step",), max_rows=10_000)


# --- telemetry/storage.py -------------------------------------------------------------------

RANK_COLUMNS = "rank, host, counters::text, step_rows, last_step, reused_step_rows, last_sample_ns, chunk_seq"


def test_the_rank_upsert_as_an_array_and_as_a_values_list_agree(owner: Tenant) -> None:
    run_id = uuid.UUID(owner.create_run())
    for rank in (0, 1):  # two ranks with rows and marks already, two new ones
        assert owner.post_steps(str(run_id), steps_body(5, rank=rank, first=10 * rank)).status_code == 200
    ranks = [0, 1, 2, 5]

    def rows() -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {RANK_COLUMNS} FROM telemetry_runrank WHERE run_id = %s ORDER BY rank", [run_id])
            return cursor.fetchall()

    for hand_out in (2, 0):
        pg = _undone(partial(storage._ranks_upsert_pg, run_id, ranks, hand_out), rows)
        portable = _undone(partial(storage._ranks_upsert_portable, run_id, ranks, hand_out), rows)
        assert sorted(pg[0]) == sorted(portable[0]) and len(pg[0]) == 4
        assert pg[1] == portable[1]


def test_chunks_written_server_bound_and_through_djangos_cursor_are_the_same_rows(owner: Tenant) -> None:
    run_id = uuid.UUID(owner.create_run())
    chunks = [
        (rank, 7, first, first + 99, 100, storage.payload(storage.STEPS, _steps(rank, first, 100)))
        for rank, first in ((0, 0), (3, 500), (1, 1_000_000))
    ]

    pg = _undone(lambda: storage._chunks_write_pg(storage.STEPS, run_id, chunks), lambda: _chunks(run_id))[1]
    portable = _undone(lambda: storage._chunks_write_portable(storage.STEPS, run_id, chunks), lambda: _chunks(run_id))[1]

    assert [row[:6] for row in pg["steps"]] == [row[:6] for row in portable["steps"]] == sorted(chunks)
    # PostgreSQL's lands in the run's week's partition; the portable one names no week (legacy).
    assert {row[6] for row in pg["steps"]} == {run_week(run_id)}
    assert {row[6] for row in portable["steps"]} == {LEGACY_WEEK}


def test_chunks_read_binary_by_partition_and_through_djangos_cursor_agree(owner: Tenant) -> None:
    run_id = owner.create_run()
    for rank in range(4):
        for first in (0, 50, 20):  # a later batch, then one that overlaps what is stored
            assert owner.post_steps(run_id, steps_body(40, rank=rank, first=first)).status_code == 200
    assert owner.post_steps(run_id, steps_body(5, rank=2, first=1_000)).status_code == 200
    run = uuid.UUID(run_id)
    legacy = [(3, 99, 2_000, 2_004, 5, storage.payload(storage.STEPS, _steps(3, 2_000, 5)))]
    storage._chunks_write_portable(storage.STEPS, run, legacy)  # a row of no week (a bulk load's)

    cases: list[dict[str, Any]] = [
        {"ranks": None, "except_ranks": None, "key_hi_min": None, "key_lo_max": None},
        {"ranks": [2, 0], "except_ranks": None, "key_hi_min": 30, "key_lo_max": 60},
        {"ranks": [], "except_ranks": None, "key_hi_min": None, "key_lo_max": None},
        {"ranks": None, "except_ranks": [1], "key_hi_min": 1_000, "key_lo_max": None},
        {"ranks": [3], "except_ranks": None, "key_hi_min": None, "key_lo_max": 2_000},
    ]
    for kind in storage.KINDS:
        for case in cases:
            pg = storage._chunks_read_pg(storage.ChunkQuery(kind, run, **case))
            portable = storage._chunks_read_portable(storage.ChunkQuery(kind, run, **case))
            assert [(r, n, bytes(p)) for r, n, p in pg] == [(r, n, bytes(p)) for r, n, p in portable], case
    everything = storage._chunks_read_pg(storage.ChunkQuery(storage.STEPS, run, **cases[0]))
    assert len(everything) == 4 * 3 + 1 + 1 and (3, 5) in [(r, n) for r, n, _ in everything]


# --- waste/pass_io.py -----------------------------------------------------------------------


def _inputs_fields(inputs: pass_io.PassInputs) -> dict[str, Any]:
    out = {name: getattr(inputs, name) for name in inputs.__dataclass_fields__ if name not in ("run", "pruned", "prices_version")}
    out["run"] = {f.attname: getattr(inputs.run, f.attname) for f in Run._meta.concrete_fields}
    return out


def test_a_passs_inputs_read_in_one_statement_are_the_orms(owner: Tenant, price_36: None) -> None:  # noqa: F811
    peer = make_run(owner, name="peer")
    owner.post_steps(peer, known_steps(30))
    finish(owner, peer, T0_NS + 40 * 10**9)
    services.run_analyze(run_id=uuid.UUID(peer))
    run_id = make_run(owner, name="live", tags=["a"])
    for rank in (0, 1):
        owner.post_steps(run_id, known_steps(20) | {"rank": rank})
    events = [
        {"id": "p1", "kind": "phase", "t_ns": T0_NS + 10**9, "name": "warmup", "t_start_ns": T0_NS, "dur_ns": 10**9},
        {"id": "o1", "kind": "oom", "t_ns": T0_NS + 3 * 10**9},
    ]
    assert owner.client.post(f"/api/v1/runs/{run_id}/events", {"events": events}, format="json").status_code == 200
    assert RunEvent.objects.filter(run_id=run_id).count() >= 2

    for references_max in (5, 0):
        before = pass_io._pass_inputs_pg(uuid.UUID(run_id), references_max)
        orm = pass_io._pass_inputs_orm(uuid.UUID(run_id), references_max)
        assert before is not None and orm is not None
        assert _inputs_fields(before) == _inputs_fields(orm)
    services.run_analyze(run_id=uuid.UUID(run_id))  # now with a stored state
    pg, orm = pass_io._pass_inputs_pg(uuid.UUID(run_id), 5), pass_io._pass_inputs_orm(uuid.UUID(run_id), 5)
    assert pg is not None and orm is not None and pg.state is not None and pg.references
    assert _inputs_fields(pg) == _inputs_fields(orm)
    assert pass_io._pass_inputs_pg(uuid.uuid4(), 5) is None and pass_io._pass_inputs_orm(uuid.uuid4(), 5) is None


def _outputs(run_id: uuid.UUID) -> dict[str, Any]:
    names = [RunAnalysis._meta.get_field(name).attname for name in pass_io.STORED_FIELDS]
    state = RunAnalysisState.objects.filter(run_id=run_id).values_list("header", "ranks", "windows").first()
    return {
        "analysis": RunAnalysis.objects.filter(pk=run_id).values(*names).first(),
        "days": [
            {k: v for k, v in day.items() if k != "id"} for day in RunDay.objects.filter(run_id=run_id).order_by("day").values()
        ],
        # The days only: marked_at is auto_now, so the ORM's upsert stamps the moment it writes
        # (the pass's moment, to the millisecond) where the statement writes the pass's own.
        "marks": sorted(RollupPending.objects.values_list("day", flat=True)),
        "state": None if state is None else tuple(None if b is None else bytes(b) for b in state),
    }


def _replay(start_over: Callable[[], None], write: Callable[..., None], args: list[Any]) -> None:
    start_over()
    write(*copy.deepcopy(args))


def test_a_passs_outputs_written_in_one_statement_are_the_orms(owner: Tenant, price_36: None) -> None:  # noqa: F811
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(30))
    calls: list[tuple[Any, ...]] = []
    write = pass_io.pass_outputs_write

    def recorded(*args: Any) -> None:
        calls.append(copy.deepcopy(args))
        write(*args)

    services.pass_outputs_write = recorded  # type: ignore[attr-defined]
    try:
        services.run_analyze(run_id=uuid.UUID(run_id))  # a new state
        owner.post_steps(run_id, known_steps(10, first=30))
        services.run_analyze(run_id=uuid.UUID(run_id))  # an incremental pass: the state updated
    finally:
        services.pass_outputs_write = write  # type: ignore[attr-defined]
    assert [call[0].state.new for call in calls] == [True, False]
    run = uuid.UUID(run_id)

    def start_over() -> None:
        # Another start than either pass left: a stale day to prune, an older state, default figures.
        RunAnalysis.objects.filter(pk=run).update(cost_usd=Decimal("1.5"), result={}, error="x", failures=2)
        RunAnalysisState.objects.filter(run_id=run).update(header=b"h", ranks=b"r", windows=b"w")
        day = calls[0][0].days[0]
        RunDay.objects.create(run_id=run, day=day.day - timedelta(days=3), project_id=day.project_id, team_id=day.team_id)
        RunDay.objects.filter(run_id=run, day=day.day).update(cost_usd=Decimal(0), categories_usd={})
        RollupPending.objects.all().delete()

    for call in calls:
        for prune_days in (True, False):
            args = [dataclasses.replace(call[0], prune_days=prune_days)]

            pg = _undone(partial(_replay, start_over, pass_io._pass_outputs_pg, args), partial(_outputs, run))[1]
            orm = _undone(partial(_replay, start_over, pass_io._pass_outputs_orm, args), partial(_outputs, run))[1]
            assert pg == orm
            assert pg["analysis"]["error"] == "" and pg["days"] and pg["marks"]


# --- waste/models.py ------------------------------------------------------------------------


def test_json_written_with_orjson_is_the_json_djangos_encoder_writes(owner: Tenant) -> None:
    value = {"a": [1, 1.5, -0.0, 1e300, 0.1 + 0.2, None, True, "é ✓ \u2028"], "nested": {"k": {"deep": []}}, 7: "int key"}
    fast = FastJSONField().get_db_prep_value(value, connection)
    plain = models.JSONField().get_db_prep_value(value, connection)
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb = %s::jsonb, %s::jsonb::text, %s::jsonb::text", [fast, plain, fast, plain])
        same, fast_text, plain_text = cursor.fetchone()
    assert same and fast_text == plain_text, (fast_text, plain_text)
    run = Run.objects.get(pk=owner.create_run())
    RunAnalysis.objects.create(run=run, project_id=run.project_id, team_id=run.project.team_id, result=value)
    assert RunAnalysis.objects.get(pk=run.pk).result == json.loads(plain_text)


# --- portal ---------------------------------------------------------------------------------


def test_in_lists_as_an_array_and_as_placeholders_sum_the_same(owner: Tenant, outsider: Tenant, monkeypatch: Any) -> None:
    runs = []
    for tenant, n in ((owner, 3), (outsider, 2)):
        for i in range(n):
            run = Run.objects.get(pk=tenant.create_run())
            runs.append(run)
            for d in range(i + 1):
                RunDay.objects.create(
                    run=run, day=date(2026, 11, 28) + timedelta(days=d), project_id=run.project_id, team_id=run.project.team_id,
                    gpu_key="H100", gpu_seconds=3600.0 * (d + 1), cost_usd=Decimal("2.50") * (i + 1), waste_usd=Decimal("1.25"),
                    recoverable_usd=Decimal("0.5"), mfu_gpu_seconds=1800.0, mfu_known_gpu_seconds=3600.0,
                )  # fmt: skip
    projects = (owner.project.pk, outsider.project.pk)
    windows: dict[str, sums.Period | None] = {"now_": sums.Period(date(2026, 11, 29), date(2026, 11, 30), "now"), "all_": None}
    scopes = [
        sums.Scope(projects),
        sums.Scope((owner.project.pk,), since=date(2026, 11, 29)),
        sums.Scope(projects, run_ids=tuple(r.pk for r in runs[1:4])),
        sums.Scope((), team_id=owner.project.team_id),
    ]

    def ask() -> list[Any]:
        out = []
        for scope in scopes:
            for group in (None, "project_id", "run_id", "day"):
                out.append(sums.day_sums(model=RunDay, scope=scope, group=group, windows=windows, first=True, runs=True))
            out.append(sums.distinct_runs(scope=scope, group="team_id", windows=windows))
        return out

    pg = ask()
    monkeypatch.setattr(sums, "in_list", sums.in_values)
    assert ask() == pg
    assert any(row.get("all_rows") for rows in pg for row in rows)


def test_a_tag_by_jsonb_containment_and_by_the_quoted_element_finds_the_same_runs(owner: Tenant) -> None:
    tagged = {
        "a": ["a", "b"],
        "ab": ["ab"],
        "none": [],
        "two": ["x-y", "a"],
        "quoted": ['say "a"'],
        "spaced": ["a b"],
        "unicode": ["été"],
    }
    ids = {name: owner.create_run(name=name, tags=tags) for name, tags in tagged.items()}
    for tag in ("a", "b", "ab", "x-y", "a b", "été", "missing", 'say "a"'):
        pg = set(Run.objects.filter(run_list.tagged_pg(tag)).values_list("name", flat=True))
        portable = set(Run.objects.filter(run_list.tagged(tag)).values_list("name", flat=True))
        assert pg == portable, tag
        assert pg == {name for name, tags in tagged.items() if tag in tags}, tag
    assert len(ids) == len(tagged)


def test_the_run_page_reads_split_and_whole_the_same_analysis(owner: Tenant, reader: APIClient) -> None:  # noqa: F811
    run_id = uuid.UUID(_analysed(owner, ranks=2))
    principal = User.objects.get(username="fin")  # the reader's
    run, windows = run_page._run_split_pg(principal, run_id)
    whole = run_page._run_whole(principal, run_id)
    assert windows is not None and run.analysis is not None and whole.analysis is not None
    result = whole.analysis.result
    assert json.loads(windows) == result["windows"] and result["windows"]
    assert run.analysis.result == {k: v for k, v in result.items() if k != "windows"}
    fields = [
        f.attname
        for f in RunAnalysis._meta.concrete_fields
        if f.attname not in ("result", "state", "rank_rows", "rank_last_step")
    ]
    assert [getattr(run.analysis, f) for f in fields] == [getattr(whole.analysis, f) for f in fields]
    pending = uuid.UUID(owner.create_run(name="pending"))
    assert run_page._run_split_pg(principal, pending)[1] is None
    assert run_page._run_whole(principal, pending).pk == pending


# --- telemetry/services.py --------------------------------------------------------------------

RUN_COLUMNS = "last_seen_at IS NOT NULL, ingest_seq"


def test_after_ingest_in_one_statement_and_portable_agree(owner: Tenant) -> None:
    from phantomhub.telemetry import services
    from phantomhub.telemetry.storage import InsertResult

    run_id = uuid.UUID(owner.create_run())
    for rank in (0, 1):  # two ranks stored already (marks, host, counters), two new ones
        assert owner.post_steps(str(run_id), steps_body(5, rank=rank, first=10 * rank)).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("UPDATE telemetry_runrank SET counters = %s, host = 'h-old' WHERE run_id = %s AND rank = 1",
                       [json.dumps({"a": 5, "b": 1}), run_id])  # fmt: skip
    run = Run.objects.get(pk=run_id)
    batches = [
        services._RankRows(rank=0, host=None, steps=InsertResult(3, 1, 2), last_step=3, last_sample_ns=None),  # lower mark
        services._RankRows(rank=1, host="h-new", steps=None, last_step=None, last_sample_ns=T0_NS, counters={"a": 2, "c": 7}),
        services._RankRows(rank=2, host="h2", steps=InsertResult(4, 0, 0), last_step=99, last_sample_ns=T0_NS + 5),
        services._RankRows(rank=5, host="", steps=None, last_step=None, last_sample_ns=None, counters={}),
    ]

    def rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {RANK_COLUMNS} FROM telemetry_runrank WHERE run_id = %s ORDER BY rank", [run_id])
            ranks = cursor.fetchall()
            cursor.execute(f"SELECT {RUN_COLUMNS} FROM telemetry_run WHERE id = %s", [run_id])
            return ranks, cursor.fetchall()

    for changed in (True, False):
        pg = _undone(partial(services._after_ingest_pg, run, batches, changed, run.created_at), rows)
        portable = _undone(partial(services._after_ingest_portable, run, batches, changed, run.created_at), rows)
        assert pg[1] == portable[1]
        ranks = dict((row[0], row) for row in pg[1][0])
        assert json.loads(ranks[1][2]) == {"a": 5, "b": 1, "c": 7} and ranks[1][1] == "h-new"
        assert ranks[0][4] == 4 and ranks[2][4] == 99  # rank 0 keeps its higher mark (it stored steps 0-4)

    too_many = {f"k{i}": i for i in range(services.MAX_RANK_COUNTERS)}  # with rank 1's a and b: over
    over = [services._RankRows(rank=1, host=None, steps=None, last_step=None, last_sample_ns=None, counters=too_many,
                               counters_field="events[0].data")]  # fmt: skip
    for half in (services._after_ingest_pg, services._after_ingest_portable):
        with pytest.raises(services.ApiError) as refused, transaction.atomic():
            half(run, over, True, run.created_at)
        assert refused.value.fields == {"events[0].data": f"rank 1 would keep more than {services.MAX_RANK_COUNTERS} counters"}

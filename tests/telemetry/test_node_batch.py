"""The node batch: every local rank's batch of one interval in one request (POST .../batches).

Each entry is exactly a combined batch (POST .../batch), and the whole is all or nothing. What
one node batch stores is checked against an independent oracle: the same ranks' batches sent one
request each through POST .../batch into another run.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts.services import personal_token_create
from phantomhub.telemetry.bounds import MAX_COUNTERS, MAX_RANK_COUNTERS
from phantomhub.telemetry.models import Run, RunEvent, RunRank, RunStatus, SampleChunk, StepChunk
from tests import rawrows
from tests.conftest import T0_NS, Tenant, steps_body
from tests.telemetry.test_packed_nulls import masked

pytestmark = [pytest.mark.django_db]

RANKS = 8
STEP_FIELDS = ("rank", *rawrows.STEP_FIELDS)
SAMPLE_FIELDS = ("rank", *rawrows.SAMPLE_FIELDS)
RANK_FIELDS = ("rank", "host", "counters", "step_rows", "last_step", "reused_step_rows", "last_sample_ns")
CHUNK_TABLES = ("telemetry_stepchunk", "telemetry_samplechunk")
EVENT_FIELDS = ("event_id", "kind", "rank", "t_ns", "name", "t_start_ns", "dur_ns", "status", "data")


def node_batch(run_id: str, tenant: Tenant, body: Any) -> Any:
    return tenant.client.post(f"/api/v1/runs/{run_id}/batches", body, format="json")


def batch(run_id: str, tenant: Tenant, body: Any) -> Any:
    return tenant.client.post(f"/api/v1/runs/{run_id}/batch", body, format="json")


def samples(rank: int, interval: int, rng: random.Random, k: int = 6) -> dict[str, Any]:
    """A host row and a GPU row a second, the columns the other kind of row lacks null."""
    seconds = [T0_NS + (60 * interval + s) * 10**9 for s in range(k)]
    return {
        "t_ns": seconds * 2,
        "device": [None] * k + [rank] * k,
        "gpu_util_pct": [None] * k + [50.0 + rank + s for s in range(k)],
        "cpu_other_pct": [float(s % 4) for s in range(k)] + [None] * k,
        "rss_bytes": masked([2**30 + 7 * rank + s for s in range(k)] + [None] * k, "i8", rng),
    }


def rank_batch(rank: int, interval: int, rng: random.Random) -> dict[str, Any]:
    """One rank's interval, unlike its neighbours': its own length, columns it does not send,
    columns with nulls (arrays and packed), a host or none, counters, a phase event."""
    n = 12 + 3 * rank
    first = 100 * interval
    steps = steps_body(n, rank=rank, first=first)["steps"]
    steps["dur_ns"] = [100_000_000 + 1_000 * rank + i for i in range(n)]
    if rank % 4 == 1:
        del steps["comm_ns"], steps["alloc_retries"]  # not measured on this rank: null when stored
    if rank % 4 == 2:
        steps["flops"] = masked([None if i % 3 == 0 else 1.5e15 + i for i in range(n)], "f8", rng)
    if rank % 4 == 3:
        steps["data_ns"] = [None if i % 5 == 0 else 10_000_000 + i for i in range(n)]
    body: dict[str, Any] = {"rank": rank, "steps": steps, "samples": samples(rank, interval, rng)}
    if rank != 5:
        body["host"] = f"node-{rank // 4}" if interval == 0 else f"node-{rank // 4}b"
    if rank != 3:
        body["counters"] = {"sent_batches": 10 * interval + rank, f"only_{rank}": interval + 1, "dropped_steps": 0}
    if rank == 4:
        body["events"] = [{"id": f"ckpt-{interval}", "kind": "phase", "t_ns": T0_NS, "name": "checkpoint",
                           "t_start_ns": T0_NS, "dur_ns": 10**9}]  # fmt: skip
    if (rank, interval) == (6, 1):
        body = {"rank": rank, "counters": {"sent_batches": 99}}  # a counters-only batch
    if (rank, interval) == (7, 1):
        del body["steps"]  # samples only
    return body


def node_interval(interval: int, seed: int = 7) -> list[dict[str, Any]]:
    """Every rank's batch of one interval, in a shuffled order (the answer follows the request's)."""
    rng = random.Random(seed + interval)
    order = list(range(RANKS))
    rng.shuffle(order)
    return [rank_batch(rank, interval, rng) for rank in order]


def stored(run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every stored row of the run (steps by rank and step, samples by rank, device and time)."""
    return {
        "steps": rawrows.values(rawrows.steps(run_id), *STEP_FIELDS),
        "samples": rawrows.values(rawrows.samples(run_id), *SAMPLE_FIELDS),
        "ranks": list(RunRank.objects.filter(run_id=run_id).order_by("rank").values_list(*RANK_FIELDS)),
        "events": list(RunEvent.objects.filter(run_id=run_id).order_by("event_id").values_list(*EVENT_FIELDS)),
    }


def chunks(run_id: str) -> tuple[int, int]:
    """The run's stored chunks (database rows) of steps and of samples."""
    return StepChunk.objects.filter(run_id=run_id).count(), SampleChunk.objects.filter(run_id=run_id).count()


def counts(run_id: str) -> tuple[int, ...]:
    return (
        len(rawrows.steps(run_id)),
        len(rawrows.samples(run_id)),
        *chunks(run_id),
        RunEvent.objects.filter(run_id=run_id).count(),
        RunRank.objects.filter(run_id=run_id).count(),
        Run.objects.get(pk=run_id).ingest_seq,
    )


@pytest.mark.backends
def test_eight_ranks_in_one_request_store_what_eight_batch_requests_store(owner: Tenant) -> None:
    oracle, node = owner.create_run(), owner.create_run()
    for interval in (0, 1):  # the second interval updates every rank's row (counters merged, hosts, counts)
        entries = node_interval(interval)
        one_by_one = []
        for entry in entries:
            response = batch(oracle, owner, entry)
            assert response.status_code == 200, response.content
            one_by_one.append(response.json())
        response = node_batch(node, owner, {"batches": entries})
        assert response.status_code == 200, response.content
        assert response.json() == {"batches": one_by_one}
    expected, got = stored(oracle), stored(node)
    assert len(got["steps"]) == sum(12 + 3 * k for k in range(RANKS)) * 2 - (12 + 3 * 6) - (12 + 3 * 7)
    assert len(got["samples"]) == RANKS * 12 + (RANKS - 1) * 12 and len(got["events"]) == 2
    assert any(None in row for row in got["steps"]) and any(None in row for row in got["samples"])
    for part in ("steps", "samples", "events", "ranks"):
        assert got[part] == expected[part], part
    ranks = {row[0]: dict(zip(RANK_FIELDS, row, strict=True)) for row in got["ranks"]}
    assert ranks[6]["counters"] == {"sent_batches": 99, "only_6": 1, "dropped_steps": 0}
    assert ranks[5]["host"] == "" and ranks[0]["host"] == "node-0b"
    assert (ranks[7]["step_rows"], ranks[7]["last_step"]) == (12 + 3 * 7, 12 + 3 * 7 - 1)
    assert ranks[7]["last_sample_ns"] == T0_NS + 65 * 10**9  # its last sample: interval 1's, second 5
    assert Run.objects.get(pk=node).ingest_seq == 2  # once a request
    # A chunk per rank, kind and interval, as one request per rank stores them: rank 6 sent no
    # rows and rank 7 no steps in the second interval.
    assert chunks(node) == chunks(oracle) == (2 * RANKS - 2, 2 * RANKS - 1)


@pytest.mark.backends
def test_a_replayed_node_batch_changes_nothing(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = {"batches": node_interval(0)}
    first = node_batch(run_id, owner, body).json()["batches"]
    before, rows = counts(run_id), stored(run_id)
    again = node_batch(run_id, owner, body)
    assert again.status_code == 200, again.content
    for sent, answer, was in zip(body["batches"], again.json()["batches"], first, strict=True):
        n = len(sent["steps"]["step"])
        assert answer == {
            "steps": {"accepted": 0, "duplicates": n, "reused_step": 0},
            "samples": {"accepted": 0, "duplicates": 12},
            **({"events": {"accepted": 0, "duplicates": 1}} if "events" in sent else {}),
        }
        assert was["steps"] == {"accepted": n, "duplicates": 0, "reused_step": 0}
    assert counts(run_id) == before  # no row, and no new ingest_seq: nothing to analyse again
    assert stored(run_id) == rows


@pytest.mark.backends
@pytest.mark.django_db(transaction=True)
def test_a_partly_stored_node_batch_stores_only_the_new_rows_with_exact_counts_per_rank(owner: Tenant) -> None:
    """Outside any test transaction, as in production: ranks with rows stored already (some or all
    of a part) have their stored chunks read and keep only their new rows, beside ranks with
    nothing stored, in the same transaction; each rank's rows are counted exactly."""
    run_id = owner.create_run()
    entries = node_interval(0)
    by_rank = {entry["rank"]: entry for entry in entries}
    stored_first = {
        0: {"rank": 0, "steps": by_rank[0]["steps"]},  # its steps, not its samples
        2: {"rank": 2, "samples": by_rank[2]["samples"]},  # its samples, not its steps
        4: by_rank[4],  # all of it
        1: {"rank": 1, "steps": {name: column[:9] for name, column in by_rank[1]["steps"].items()}},  # a part of its steps
    }
    for body in stored_first.values():
        assert batch(run_id, owner, body).status_code == 200
    seq = Run.objects.get(pk=run_id).ingest_seq
    response = node_batch(run_id, owner, {"batches": entries})
    assert response.status_code == 200, response.content
    for entry, answer in zip(entries, response.json()["batches"], strict=True):
        rank, n = entry["rank"], len(entry["steps"]["step"])
        old_steps = {0: n, 4: n, 1: 9}.get(rank, 0)
        old_samples = 12 if rank in (2, 4) else 0
        assert answer["steps"] == {"accepted": n - old_steps, "duplicates": old_steps, "reused_step": 0}, rank
        assert answer["samples"] == {"accepted": 12 - old_samples, "duplicates": old_samples}, rank
        if rank == 4:
            assert answer["events"] == {"accepted": 0, "duplicates": 1}
    assert Run.objects.get(pk=run_id).ingest_seq == seq + 1
    # The same end as a run fed only the node batch: every row once, every rank counted once.
    clean = owner.create_run()
    assert node_batch(clean, owner, {"batches": entries}).status_code == 200
    assert stored(run_id) == stored(clean)
    # A chunk for each rank's new rows of a kind; none where a part was stored whole before (rank
    # 0's steps, rank 2's samples, rank 4's both).
    assert chunks(run_id) == (3 + RANKS - 2, 2 + RANKS - 2)
    # Every rank's marks passed what it stored: the next interval is all new.
    following = node_batch(run_id, owner, {"batches": node_interval(2)}).json()["batches"]
    assert all(a["steps"]["duplicates"] == 0 and a["samples"]["duplicates"] == 0 for a in following)


@pytest.mark.backends
def test_a_reused_step_number_is_counted_per_rank_as_batch_counts_it(owner: Tenant) -> None:
    """A restarted rank numbering from 5 again (other starts) next to a rank going on."""
    oracle, node = owner.create_run(), owner.create_run()
    first = [steps_body(10, rank=0), steps_body(10, rank=1)]
    shifted = steps_body(10, rank=0, first=5)
    shifted["steps"]["t_start_ns"] = [t + 10**9 for t in shifted["steps"]["t_start_ns"]]
    second = [shifted, steps_body(10, rank=1, first=10)]
    for run_id in (oracle, node):
        assert node_batch(run_id, owner, {"batches": first}).status_code == 200
    expected = [batch(oracle, owner, entry).json() for entry in second]
    response = node_batch(node, owner, {"batches": second})
    assert response.json() == {"batches": expected}
    assert expected[0]["steps"] == {"accepted": 5, "duplicates": 0, "reused_step": 5}
    assert expected[1]["steps"] == {"accepted": 10, "duplicates": 0, "reused_step": 0}
    assert stored(node) == stored(oracle)
    assert RunRank.objects.get(run_id=node, rank=0).reused_step_rows == 5


def _entries() -> list[dict[str, Any]]:
    return node_interval(0)


def _with(i: int, **change: Any) -> Any:
    def body() -> dict[str, Any]:
        entries = _entries()
        entries[i] = {**entries[i], **change}
        return {"batches": entries}

    return body


def _bad_column(i: int) -> Any:
    def body() -> dict[str, Any]:
        entries = _entries()
        entries[i]["steps"]["dur_ns"][0] = -1
        return {"batches": entries}

    return body


def _duplicate_rank() -> dict[str, Any]:
    entries = _entries()
    entries[4]["rank"] = entries[1]["rank"]
    return {"batches": entries}


def _too_late() -> dict[str, Any]:
    entries = _entries()
    entries[7]["steps"] = steps_body(3, rank=entries[7]["rank"])["steps"]
    entries[7]["steps"]["t_start_ns"][-1] = T0_NS + 500 * 86_400 * 10**9  # beyond the analysed span
    return {"batches": entries}


@pytest.mark.backends
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_bad_column(3), "batches[3].steps.dur_ns[0]"),
        (_with(5, samples={"t_ns": [T0_NS], "gpu_util_pct": [140.0]}), "batches[5].samples.gpu_util_pct[0]"),
        (_duplicate_rank, "batches[4].rank"),
        (lambda: {"batches": [steps_body(2, rank=k) for k in range(257)]}, "batches"),
        (lambda: {"batches": []}, "batches"),
        (lambda: {"batches": steps_body(2)}, "batches"),
        (lambda: {"batches": None}, "batches"),
        (lambda: {}, "batches"),
        (lambda: {"batches": _entries(), "node": "a"}, "node"),
        (lambda: [_entries()], "body"),
        (_with(2, frames=[]), "batches[2].frames"),
        (lambda: {"batches": [*_entries()[:2], 5]}, "batches[2]"),
        (lambda: {"batches": [*_entries()[:3], {"rank": 9}]}, "batches[3].steps"),
        (_with(0, rank=-1), "batches[0].rank"),
        (_with(6, host=7), "batches[6].host"),
        (_with(0, counters=[1]), "batches[0].counters"),
        (_with(1, counters={"sent_batches": -1}), "batches[1].counters.sent_batches"),
        (_with(1, events=[{"id": "x", "kind": "nonsense", "t_ns": T0_NS}]), "batches[1].events[0].kind"),
        (_with(2, events=[{"id": "late", "kind": "log", "t_ns": T0_NS + 500 * 86_400 * 10**9}]), "batches[2].events[0].t_ns"),
        (_too_late, "batches[7].steps.t_start_ns"),
    ],
)
def test_a_bad_entry_refuses_the_whole_node_batch_naming_the_field(owner: Tenant, body: Any, field: str) -> None:
    run_id = owner.create_run()
    assert node_batch(run_id, owner, {"batches": [steps_body(3, rank=k) for k in range(2)]}).status_code == 200
    before = counts(run_id)
    response = node_batch(run_id, owner, body())
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"], error
    assert error["message"].startswith(field), error
    assert counts(run_id) == before


@pytest.mark.backends
def test_a_rank_past_its_counters_limit_refuses_the_whole_node_batch(owner: Tenant) -> None:
    """Found only while writing (the stored counters are merged in the upsert): after the rows of
    every rank went in, which must all be rolled back."""
    run_id = owner.create_run()
    names = [f"c{i}" for i in range(MAX_RANK_COUNTERS)]
    for lo in range(0, len(names), MAX_COUNTERS):
        assert batch(run_id, owner, {"rank": 5, "counters": dict.fromkeys(names[lo : lo + MAX_COUNTERS], 1)}).status_code == 200
    before = counts(run_id)
    entries = _entries()
    where = next(i for i, entry in enumerate(entries) if entry["rank"] == 5)
    response = node_batch(run_id, owner, {"batches": entries})
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [f"batches[{where}].counters"]
    assert counts(run_id) == before
    assert len(RunRank.objects.get(run_id=run_id, rank=5).counters) == MAX_RANK_COUNTERS


def test_the_entries_limits_are_those_of_batch(owner: Tenant, settings: Any) -> None:
    """MAX_BATCH_ROWS applies to each entry's part, not to the node batch's sum."""
    settings.MAX_BATCH_ROWS = 20
    run_id = owner.create_run()
    fits = [steps_body(20, rank=k) for k in range(4)]
    assert node_batch(run_id, owner, {"batches": fits}).status_code == 200
    over = [steps_body(20, rank=k, first=20) for k in range(4)]
    over[2] = steps_body(21, rank=2, first=20)
    response = node_batch(run_id, owner, {"batches": over})
    assert response.status_code == 400 and list(response.json()["error"]["fields"]) == ["batches[2].steps"]
    settings.MAX_BODY_BYTES = 4096
    response = node_batch(run_id, owner, {"batches": [steps_body(40, rank=k) for k in range(4)]})
    assert response.status_code == 413 and batch(run_id, owner, steps_body(80)).status_code == 413


def test_other_callers_get_what_batch_gives_them(owner: Tenant, outsider: Tenant) -> None:
    run_id = owner.create_run()
    user = User.objects.create_user("ada")
    personal = APIClient()
    personal.credentials(HTTP_AUTHORIZATION=f"Bearer {personal_token_create(user=user).raw}")
    signed_in = APIClient()
    signed_in.force_authenticate(user)
    other_run = outsider.create_run()
    callers = [
        (outsider.client, run_id),
        (personal, run_id),
        (signed_in, run_id),
        (APIClient(), run_id),
        (owner.client, other_run),
    ]
    for client, target in callers:
        one = client.post(f"/api/v1/runs/{target}/batch", steps_body(3), format="json")
        node = client.post(f"/api/v1/runs/{target}/batches", {"batches": [steps_body(3)]}, format="json")
        assert one.status_code in (401, 403, 404)
        assert (node.status_code, node.json()) == (one.status_code, one.json())
    assert rawrows.steps() == [] and rawrows.samples() == []


@pytest.mark.backends
def test_one_analysis_request_per_node_batch(
    owner: Tenant, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    from phantomhub.waste import scheduling as waste_scheduling

    asked: list[uuid.UUID] = []
    monkeypatch.setattr(waste_scheduling, "analysis_request", asked.append)
    oracle, node = owner.create_run(), owner.create_run()
    entries = node_interval(0)
    with django_capture_on_commit_callbacks(execute=True):
        for entry in entries:
            assert batch(oracle, owner, entry).status_code == 200
    assert asked == [uuid.UUID(oracle)] * RANKS  # the oracle: one a /batch request
    asked.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert node_batch(node, owner, {"batches": entries}).status_code == 200
    assert asked == [uuid.UUID(node)]
    assert Run.objects.get(pk=node).ingest_seq == 1
    asked.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert node_batch(node, owner, {"batches": entries}).status_code == 200  # a replay: nothing new
    assert asked == []


class ChunkAccess:
    """What a block of code did to the chunk tables: the statements it ran (on PostgreSQL every
    psycopg statement, the server's own cursors' included; on SQLite Django's), those inserting
    into each chunk table (an executemany is one), and the reads of each: the other statements
    naming it, and on PostgreSQL the scans of its partitions the server counted in this
    transaction."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.inserts: dict[str, list[str]] = {}
        self.reads: dict[str, int] = {}

    @staticmethod
    def _scans() -> dict[str, int]:
        if connection.vendor != "postgresql":
            return dict.fromkeys(CHUNK_TABLES, 0)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT t.name, COALESCE(sum(s.seq_scan + COALESCE(s.idx_scan, 0)), 0) FROM unnest(%s::text[]) AS t(name) "
                "JOIN LATERAL pg_partition_tree(t.name::regclass) AS p ON true "
                "LEFT JOIN pg_stat_xact_user_tables s ON s.relid = p.relid GROUP BY t.name",
                [list(CHUNK_TABLES)],
            )
            return {name: int(scans) for name, scans in cursor.fetchall()}

    @contextmanager
    def watching(self) -> Iterator[ChunkAccess]:
        before = self._scans()
        if connection.vendor == "postgresql":
            # Every statement through psycopg, Django's cursors and the server's own alike.
            seen: list[str] = []
            execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

            def watched_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                seen.append(str(query))
                return execute(cursor, query, *args, **kwargs)

            def watched_executemany(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                seen.append(f"1 times: {query}")
                return executemany(cursor, query, *args, **kwargs)

            psycopg.Cursor.execute, psycopg.Cursor.executemany = watched_execute, watched_executemany  # type: ignore[method-assign]
            try:
                yield self
            finally:
                psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany  # type: ignore[method-assign]
            self.queries = [sql for sql in seen if "pg_stat_xact_user_tables" not in sql]
        else:
            with CaptureQueriesContext(connection) as captured:
                yield self
            self.queries = [q["sql"] for q in captured.captured_queries]
        after = self._scans()
        for table in CHUNK_TABLES:
            named = [sql for sql in self.queries if re.search(rf"\b{table}\b", sql)]
            self.inserts[table] = [
                sql for sql in named if re.match(rf"\s*(\d+ times: )?INSERT\s+INTO\s+{table}\b", sql, re.IGNORECASE)
            ]
            self.reads[table] = len(named) - len(self.inserts[table]) + after[table] - before[table]


def chunk_access() -> Any:
    return ChunkAccess().watching()


@pytest.mark.backends
def test_a_live_node_batch_writes_one_insert_a_chunk_table_and_reads_no_chunk(owner: Tenant) -> None:
    """The common case, every row new (a rank's first batch, and its next one past its marks):
    all the ranks' chunks of a kind in one INSERT, no stored chunk read; the ranks taken in one
    statement and updated with the run in one more. A replay reads the stored chunks (the same
    watch sees its reads) and stores nothing."""
    run_id = owner.create_run()
    for interval in (0, 1):  # the ranks' first rows, then rows past the marks the first ones left
        with chunk_access() as access:
            response = node_batch(run_id, owner, {"batches": node_interval(interval)})
        assert response.status_code == 200, response.content
        assert all(answer["steps"]["duplicates"] == 0 for answer in response.json()["batches"] if "steps" in answer)
        for table in CHUNK_TABLES:
            assert len(access.inserts[table]) == 1, (interval, table, access.inserts[table])
            assert access.reads[table] == 0, (interval, table, access.queries)
        if connection.vendor == "postgresql":  # SQLite merges counters rank by rank
            rank_statements = [sql for sql in access.queries if "telemetry_runrank" in sql]
            assert len(rank_statements) == 2, rank_statements  # the ranks taken, then updated with the run
            assert "UPDATE telemetry_run SET" in rank_statements[1]
    assert chunks(run_id) == (2 * RANKS - 2, 2 * RANKS - 1)  # one a rank, kind and interval
    assert RunRank.objects.filter(run_id=run_id).count() == RANKS
    before, rows = counts(run_id), stored(run_id)
    with chunk_access() as access:
        again = node_batch(run_id, owner, {"batches": node_interval(1)})  # a replay: the stored chunks decide
    assert again.status_code == 200, again.content
    assert all(answer["steps"]["accepted"] == 0 for answer in again.json()["batches"] if "steps" in answer)
    assert all(answer["samples"]["accepted"] == 0 for answer in again.json()["batches"] if "samples" in answer)
    for table in CHUNK_TABLES:
        assert access.inserts[table] == [] and access.reads[table] > 0, (table, access.queries)
    assert counts(run_id) == before and stored(run_id) == rows


def post_at_once(tenant: Tenant, run_id: str, body: Any, times: int) -> list[Any]:
    """The same node batch posted by `times` threads at the same moment: their answers."""
    answers: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(times)

    def post() -> None:
        try:
            barrier.wait()
            response = node_batch(run_id, tenant, body)
            assert response.status_code == 200, response.content
            answers.append(response.json()["batches"])
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return answers


@pytest.mark.backends
@pytest.mark.django_db(transaction=True)
def test_the_same_node_batch_twice_at_once_is_stored_once(owner: Tenant) -> None:
    """Two agents (a retry racing its first try) post one node batch at once: the second writer
    of a rank waits for the first and finds its rows, so every row is stored once, and one
    answer accepts every part while the other reports all of it as duplicates."""
    for attempt in range(3):  # the race is timing-dependent: several rounds
        run_id, clean = owner.create_run(), owner.create_run()
        # Without events, which would order the two requests by the run's row before they take
        # their ranks: here only the ranks' rows do.
        entries = [{k: v for k, v in entry.items() if k != "events"} for entry in node_interval(0, seed=attempt)]
        answers = post_at_once(owner, run_id, {"batches": entries}, 2)
        assert len(answers) == 2
        for i, entry in enumerate(entries):
            n = len(entry["steps"]["step"])
            steps = [answer[i]["steps"] for answer in answers]
            samples = [answer[i]["samples"] for answer in answers]
            assert all(s["accepted"] + s["duplicates"] == n and s["reused_step"] == 0 for s in steps), (attempt, steps)
            assert sum(s["accepted"] for s in steps) == n, (attempt, steps)
            assert all(s["accepted"] + s["duplicates"] == 12 for s in samples) and sum(s["accepted"] for s in samples) == 12
        # All or nothing per request: one transaction stored the whole batch, the other nothing.
        taken = sorted(sum(part["accepted"] for rank in answer for part in rank.values()) for answer in answers)
        total = sum(len(entry["steps"]["step"]) + 12 for entry in entries)
        assert taken == [0, total], (attempt, taken)
        steps, samples = rawrows.steps(run_id), rawrows.samples(run_id)
        assert len(steps) == sum(len(entry["steps"]["step"]) for entry in entries)
        assert len(set(rawrows.values(steps, "rank", "step"))) == len(steps)  # no key twice
        assert len(samples) == 12 * RANKS and len(set(rawrows.values(samples, "rank", "device", "t_ns"))) == len(samples)
        assert chunks(run_id) == (RANKS, RANKS)
        assert Run.objects.get(pk=run_id).ingest_seq == 1  # the batch that found it all stored changed nothing
        assert node_batch(clean, owner, {"batches": entries}).status_code == 200
        assert stored(run_id) == stored(clean)  # and exactly what one request stores, row counts of ranks too


@pytest.mark.backends
def test_a_node_batch_reopens_a_run_marked_crashed(owner: Tenant) -> None:
    run_id = owner.create_run()
    Run.objects.filter(pk=run_id).update(status=RunStatus.CRASHED, finished_at=timezone.now() - timedelta(minutes=1))
    assert node_batch(run_id, owner, {"batches": [steps_body(3, rank=k) for k in range(3)]}).status_code == 200
    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING


@pytest.mark.backends
@pytest.mark.django_db(transaction=True)
def test_rows_for_a_run_gone_since_its_lookup_are_refused_whole(owner: Tenant) -> None:
    from phantomhub.errors import ApiError
    from phantomhub.telemetry import services
    from phantomhub.telemetry.storage import run_param

    run_id = owner.create_run()
    run = Run.objects.get(pk=run_id)
    with connection.cursor() as cursor:  # gone behind the ORM's back, as a concurrent delete would be
        cursor.execute("DELETE FROM telemetry_run WHERE id = %s", [run_param(run.pk)])
    sent = [services.RankBatch(rank=k, host="n", steps=steps_body(5)["steps"], counters={"a": 1}) for k in range(4)]
    with pytest.raises(ApiError) as caught:
        services.node_batch_ingest(run=run, batches=sent)
    assert caught.value.status_code == 404
    assert rawrows.steps(run_id) == [] and chunks(run_id) == (0, 0)
    assert not RunRank.objects.filter(run_id=run_id).exists()


def test_a_gzip_node_batch_is_taken(owner: Tenant) -> None:
    run_id = owner.create_run()
    body = gzip.compress(json.dumps({"batches": node_interval(0)}).encode())
    response = owner.client.post(
        f"/api/v1/runs/{run_id}/batches", body, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.status_code == 200, response.content
    assert len(response.json()["batches"]) == RANKS
    assert RunRank.objects.filter(run_id=run_id).count() == RANKS


def test_the_registration_answer_says_the_server_takes_node_batches(owner: Tenant) -> None:
    run_id = str(uuid.uuid4())
    answer = owner.client.post("/api/v1/runs", {"id": run_id, "name": "r"}, format="json").json()
    assert answer["wire"]["node_batches"] is True

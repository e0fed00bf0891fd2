"""Migration 0009 (telemetry/migrations/0009_packed_chunks.py): raw steps and samples move from a
row each into packed chunks, and back.

Each test migrates the test database back to 0008, stores old-format rows with raw SQL (nulls in
many columns, several runs and ranks, host and GPU samples, a rank of more than 4,096 steps and
more than 4,096 samples, on PostgreSQL rows of week 0, of a weekly partition and of the default
one), migrates forward and reads the chunks back with tests/rawrows.py (struct, not storage.py).
Every test leaves the database migrated to the latest state, whatever happens.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.apps.registry import Apps
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from phantomhub.telemetry import services
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.partitions import run_week_forget, week_now
from phantomhub.telemetry.storage import SAMPLES, STEPS
from tests import rawrows
from tests.conftest import T0_NS, Tenant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backends, pytest.mark.slow]  # migrations back and forth

OLD = ("telemetry", "0008_raw_rows_checked_per_batch")
NEW = ("telemetry", "0009_packed_chunks")
PG = settings.TEST_BACKEND == "postgresql"
STEP_FIELDS = rawrows.STEP_FIELDS
SAMPLE_FIELDS = rawrows.SAMPLE_FIELDS
CHUNK_TABLES = {"telemetry_step": "telemetry_stepchunk", "telemetry_systemsample": "telemetry_samplechunk"}
RECORD_SIZE = {"telemetry_stepchunk": 8 * len(STEP_FIELDS), "telemetry_samplechunk": 8 * len(SAMPLE_FIELDS)}
SPAN_OFFSET = {"telemetry_stepchunk": 0, "telemetry_samplechunk": 8}  # step; t_ns (after device)
HOUR_NS = 3600 * 10**9


def _executor() -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    return executor


def _migrate(*targets: tuple[str, str]) -> MigrationExecutor:
    executor = _executor()
    executor.migrate(list(targets))
    run_week_forget()
    return _executor()


def _param(run_id: str) -> Any:
    return uuid.UUID(run_id) if PG else uuid.UUID(run_id).hex


def _fetch(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def _uuid(value: Any) -> str:
    return str(uuid.UUID(str(value)))


# --- the rows stored before the migration -----------------------------------------------------


def step_rows(run_id: str, rank: int, steps: list[int]) -> list[dict[str, Any]]:
    """Steps as a row each stored them: plausible values, zeros, and nulls in every nullable
    column (a column of its own pattern, one row in 1,000 with every nullable column null)."""
    rows = []
    for step in steps:
        row = {
            "run_id": run_id,
            "rank": rank,
            "step": step,
            "t_start_ns": T0_NS + step * 100_000_000 + rank,
            "dur_ns": 100_000_000 + step % 997,
            "data_ns": (step % 13) * 1000,  # 0 every 13th step: a zero is not a null
            "forward_ns": 30_000_000 + step,
            "backward_ns": 45_000_000 + 2 * step,
            "optimizer_ns": 5_000_000,
            "comm_ns": 4_000_000 + step % 5,
            "flops": 0.0 if step % 17 == 0 else 1.5e15 + step * 0.25,
            "tokens": 4096,
            "samples": 8,
            "mem_allocated": 30 * 2**30 + step,
            "mem_reserved": 36 * 2**30,
            "mem_peak": 34 * 2**30 + step % 1000,
            "alloc_retries": step % 3,
        }
        for j, name in enumerate(STEP_FIELDS[2:]):
            if (step + j) % 7 == 0 or step % 1000 == 999:
                row[name] = None
        rows.append(row)
    return rows


def sample_rows(run_id: str, rank: int, t0: int, count: int, every_s: int, devices: list[int]) -> list[dict[str, Any]]:
    """Samples as a row each stored them: host rows (device -1: no GPU columns) and GPU rows (no
    CPU columns), with further nulls here and there."""
    rows = []
    for device in devices:
        for k in range(count):
            t = t0 + k * every_s * 10**9
            if device == -1:
                values = {
                    "gpu_util_pct": None,
                    "sm_clock_mhz": None,
                    "gpu_mem_used_bytes": None,
                    "power_w": None,
                    "cpu_process_pct": 250.5 + k % 10,
                    "cpu_other_pct": None if k % 9 == 0 else 12.25,
                    "cpu_steal_pct": None if k % 5 == 0 else 0.5 * (k % 3),
                    "rss_bytes": None if k % 13 == 0 else 2**33 + k,
                }
            else:
                values = {
                    "gpu_util_pct": None if k % 8 == 0 else 97.5 - device - (k % 4) * 0.125,
                    "sm_clock_mhz": 1980.0,
                    "gpu_mem_used_bytes": 0 if k % 12 == 0 else 70 * 2**30 + k,
                    "power_w": None if k % 11 == 0 else 650.25,
                    "cpu_process_pct": None,
                    "cpu_other_pct": None,
                    "cpu_steal_pct": None,
                    "rss_bytes": None,
                }
            rows.append({"run_id": run_id, "rank": rank, "device": device, "t_ns": t, **values})
    return rows


@dataclass
class Legacy:
    """What was stored at 0008: rows by table, each (run, rank)'s week, RunRank rows before."""

    runs: dict[str, int] = field(default_factory=dict)  # run id -> storage_week
    steps: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    ranks_before: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)  # PostgreSQL: row table -> its partitions
    run_a: str = ""
    run_b: str = ""
    run_c: str = ""

    def steps_of(self, run_id: str, rank: int | None = None) -> list[dict[str, Any]]:
        rows = [r for r in self.steps if r["run_id"] == run_id and (rank is None or r["rank"] == rank)]
        return sorted(rows, key=lambda r: (r["rank"], r["step"]))

    def samples_of(self, run_id: str, rank: int | None = None) -> list[dict[str, Any]]:
        rows = [r for r in self.samples if r["run_id"] == run_id and (rank is None or r["rank"] == rank)]
        return sorted(rows, key=lambda r: (r["rank"], r["device"], r["t_ns"]))

    def stored_ranks(self) -> set[tuple[str, int]]:
        return {(r["run_id"], r["rank"]) for r in self.steps + self.samples}


def _insert(table: str, fields: tuple[str, ...], rows: list[dict[str, Any]], weeks: dict[str, int]) -> None:
    columns = ["run_id", "rank", *fields] + (["run_week"] if PG else [])
    values = [[_param(r["run_id"]), r["rank"], *(r[f] for f in fields)] + ([weeks[r["run_id"]]] if PG else []) for r in rows]
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})", values)


def _partitions(parent: str) -> dict[str, str]:
    """PostgreSQL: a partitioned table's partitions, by name suffix (_legacy, _default, _w…), and bounds."""
    rows = _fetch(
        "SELECT child.relname, pg_get_expr(child.relpartbound, child.oid) FROM pg_inherits i "
        "JOIN pg_class parent ON parent.oid = i.inhparent JOIN pg_class child ON child.oid = i.inhrelid "
        "WHERE parent.relname = %s",
        [parent],
    )
    return {name[len(parent) :]: bound for name, bound in rows}


def _partition_contents(table: str, count: str) -> dict[str, dict[tuple[str, int, int], int]]:
    """PostgreSQL: per partition of `table`, the rows (count(*) or sum(n)) of each (run, rank, run_week)."""
    out = {}
    for suffix in _partitions(table):
        rows = _fetch(f"SELECT run_id, rank, run_week, {count} FROM {table}{suffix} GROUP BY run_id, rank, run_week")
        out[suffix] = {(_uuid(run), rank, week): int(n) for run, rank, week, n in rows}
    return out


def _ranks() -> dict[tuple[str, int], dict[str, Any]]:
    names = ["host", "step_rows", "reused_step_rows", "last_step"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM telemetry_runrank WHERE false")
        have = {col[0] for col in cursor.description}
    names += [n for n in ("last_sample_ns", "chunk_seq") if n in have]
    rows = _fetch(f"SELECT run_id, rank, {', '.join(names)} FROM telemetry_runrank")
    return {(_uuid(row[0]), row[1]): dict(zip(names, row[2:])) for row in rows}


@pytest.fixture
def legacy(owner: Tenant) -> Iterator[Legacy]:
    """The database at 0008 holding old-format rows; migrated to the latest state afterwards."""
    latest = _executor().loader.graph.leaf_nodes()
    try:
        executor = _migrate(OLD)
        yield _legacy_store(executor.loader.project_state([OLD]).apps, owner)
    finally:
        _migrate(*latest)


def _legacy_store(apps: Apps, owner: Tenant) -> Legacy:
    old_run = apps.get_model("telemetry", "Run")
    old_rank = apps.get_model("telemetry", "RunRank")
    assert {f.name for f in old_rank._meta.get_fields()} >= {"last_step", "step_rows"}
    assert "chunk_seq" not in {f.name for f in old_rank._meta.get_fields()}
    legacy = Legacy()
    now = week_now()
    # a: stored before partitioning (week 0); b: a weekly partition; c: a week without a
    # partition of its own (PostgreSQL: the default partition).
    for name, week in (("run_a", 0), ("run_b", now), ("run_c", now + 10)):
        run_id = str(uuid.uuid4())
        start = datetime(2026, 9, 20, tzinfo=UTC)
        old_run.objects.create(
            id=run_id, project_id=owner.project.pk, name=name, allocation_start=start, started_at=start,
            last_seen_at=start + timedelta(days=1), storage_week=week,
        )  # fmt: skip
        legacy.runs[run_id] = week
        setattr(legacy, name, run_id)
    a, b, c = legacy.run_a, legacy.run_b, legacy.run_c
    # Run a, rank 0: 9,500 steps (0-4,999 and 6,000-10,499: three or more chunks of up to 4,096) and
    # 4,320 samples over two hours (a host row and two GPUs every 5 s).
    legacy.steps += step_rows(a, 0, [*range(5000), *range(6000, 10500)])
    legacy.samples += sample_rows(a, 0, T0_NS, 1440, 5, [-1, 0, 1])
    legacy.steps += step_rows(a, 1, list(range(3, 53)))  # steps only
    legacy.samples += sample_rows(a, 2, T0_NS + 7 * 10**9, 30, 10, [-1, 3])  # samples only
    legacy.steps += step_rows(a, 3, list(range(200)))  # rows, but no RunRank row
    legacy.samples += sample_rows(a, 3, T0_NS + 10**9, 20, 60, [-1, 0])
    legacy.steps += step_rows(b, 0, list(range(100)))
    hour = (T0_NS // HOUR_NS + 1) * HOUR_NS
    legacy.samples += sample_rows(b, 0, hour - 20 * 10**9, 40, 1, [-1, 0, 1, 2, 3])  # across an hour
    legacy.steps += step_rows(b, 4, list(range(30, 60)))  # no RunRank row
    legacy.steps += step_rows(c, 0, list(range(20)))
    legacy.samples += sample_rows(c, 0, T0_NS, 10, 1, [-1, 0])
    # RunRank rows as ingest left them at 0008 (last_step kept stale on purpose for a, 1); rank 7
    # of run b has a row and no stored rows at all.
    for (run_id, rank), (host, last) in {
        (a, 0): ("node-0", 10499), (a, 1): ("node-0", 5), (a, 2): ("node-1", None), (b, 0): ("gpu-b", 99),
        (b, 7): ("gpu-b7", None), (c, 0): ("gpu-c", 19),
    }.items():  # fmt: skip
        steps = len(legacy.steps_of(run_id, rank))
        old_rank.objects.create(run_id=run_id, rank=rank, host=host, step_rows=steps, last_step=last, reused_step_rows=rank)
    legacy.ranks_before = _ranks()
    _insert("telemetry_step", STEP_FIELDS, legacy.steps, legacy.runs)
    _insert("telemetry_systemsample", SAMPLE_FIELDS, legacy.samples, legacy.runs)
    if PG:
        for table in CHUNK_TABLES:
            contents = _partition_contents(table, "count(*)")
            legacy.partitions[table] = {"bounds": _partitions(table), "contents": contents}
        # Each kind of partition holds rows: week 0's, a weekly one and the default one.
        steps_in = legacy.partitions["telemetry_step"]["contents"]
        assert steps_in["_legacy"] and steps_in["_default"] and any(steps_in[s] for s in steps_in if s.startswith("_w"))
    assert _fetch("SELECT count(*) FROM telemetry_step") == [(len(legacy.steps),)]
    assert _fetch("SELECT count(*) FROM telemetry_systemsample") == [(len(legacy.samples),)]
    return legacy


# --- checks -----------------------------------------------------------------------------------


def _same(got: list[dict[str, Any]], want: list[dict[str, Any]], what: str) -> None:
    """Equal lists of rows; on a difference, the first row that differs (not a 10,000-row diff)."""
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{what}: row {i} differs: got {g}, want {w}"
    assert len(got) == len(want), f"{what}: {len(got)} rows, want {len(want)}"


def _all_rows_back(legacy: Legacy) -> None:
    for run_id in legacy.runs:
        _same(rawrows.steps(run_id), legacy.steps_of(run_id), f"steps of {run_id}")
        _same(rawrows.samples(run_id), legacy.samples_of(run_id), f"samples of {run_id}")
    assert len(rawrows.steps()) == len(legacy.steps) and len(rawrows.samples()) == len(legacy.samples)


def _chunks(table: str) -> list[tuple[str, int, int, int, int, int, list[int]]]:
    """Every chunk as (run, rank, seq, key_lo, key_hi, n, the span values of its records)."""
    size, offset = RECORD_SIZE[table], SPAN_OFFSET[table]
    out = []
    for run_id, rank, seq, lo, hi, n, payload in _fetch(f"SELECT run_id, rank, seq, key_lo, key_hi, n, payload FROM {table}"):
        data = bytes(payload)
        assert len(data) == n * size
        keys = [struct.unpack_from(">q", data, i * size + offset)[0] for i in range(n)]
        out.append((_uuid(run_id), rank, seq, lo, hi, n, keys))
    return out


def _forwards() -> None:
    # Through 0009 to the latest state: the tests then use the models as they are now.
    _migrate(NEW)
    _migrate(*_executor().loader.graph.leaf_nodes())
    assert not {"telemetry_step", "telemetry_systemsample"} & set(connection.introspection.table_names())


def _migrated_by_rank(table: str) -> dict[tuple[str, int], list[tuple[int, int, int, int, list[int]]]]:
    out: dict[tuple[str, int], list[tuple[int, int, int, int, list[int]]]] = defaultdict(list)
    for run_id, rank, seq, lo, hi, n, keys in _chunks(table):
        out[run_id, rank].append((seq, lo, hi, n, keys))
    return out


# --- tests ------------------------------------------------------------------------------------


def test_forwards_packs_every_row_back_exactly_values_and_nulls(legacy: Legacy) -> None:
    _forwards()
    _all_rows_back(legacy)
    a = legacy.run_a
    # Rank by rank too (rawrows' rank filter), and the nulls really are there.
    _same(rawrows.steps(a, rank=3), legacy.steps_of(a, 3), "steps of run a, rank 3")
    _same(rawrows.samples(a, rank=2), legacy.samples_of(a, 2), "samples of run a, rank 2")
    stored = rawrows.steps(a, rank=0)
    assert {name for row in stored for name in STEP_FIELDS[2:] if row[name] is None} == set(STEP_FIELDS[2:])
    assert all(all(row[name] is None for name in STEP_FIELDS[2:]) for row in stored if row["step"] % 1000 == 999)
    assert any(row["flops"] == 0.0 for row in stored) and any(row["data_ns"] == 0 for row in stored)
    host = [row for row in rawrows.samples(a, rank=0) if row["device"] == -1]
    assert len(host) == 1440 and all(row["gpu_util_pct"] is None and row["cpu_process_pct"] is not None for row in host)


def test_forwards_chunks_cover_their_keys_and_split_big_ranks(legacy: Legacy) -> None:
    _forwards()
    for table, kind in (("telemetry_stepchunk", STEPS), ("telemetry_samplechunk", SAMPLES)):
        by_rank = _migrated_by_rank(table)
        expected = {(r["run_id"], r["rank"]) for r in (legacy.steps if kind is STEPS else legacy.samples)}
        assert set(by_rank) == expected, table
        for (run_id, rank), chunks in by_rank.items():
            seqs = [seq for seq, *_ in chunks]
            assert len(set(seqs)) == len(seqs), (table, run_id, rank, seqs)
            for seq, lo, hi, n, keys in chunks:
                assert (lo, hi) == (min(keys), max(keys)), (table, run_id, rank, seq)
                if kind is STEPS:
                    assert n <= 4096 and keys == sorted(keys), (table, run_id, rank, seq, n)
    steps_a0 = sorted(_migrated_by_rank("telemetry_stepchunk")[legacy.run_a, 0])
    assert len(steps_a0) >= 3 and sum(n for _, _, _, n, _ in steps_a0) == 9500
    # The chunks of a rank do not overlap, and sequence follows the keys.
    his = [(lo, hi) for _, lo, hi, _, _ in steps_a0]
    assert all(prev_hi < lo for (_, prev_hi), (lo, _) in itertools.pairwise(his)), his
    samples_a0 = _migrated_by_rank("telemetry_samplechunk")[legacy.run_a, 0]
    assert len(samples_a0) >= 2 and sum(n for _, _, _, n, _ in samples_a0) == 4320


def test_forwards_sets_each_ranks_marks_and_chunk_sequence(legacy: Legacy) -> None:
    _forwards()
    ranks = _ranks()
    seqs: dict[tuple[str, int], list[int]] = defaultdict(list)
    for table in ("telemetry_stepchunk", "telemetry_samplechunk"):
        for key, chunks in _migrated_by_rank(table).items():
            seqs[key] += [seq for seq, *_ in chunks]
    stored = legacy.stored_ranks()
    # Every rank with rows has its row, also the ones that had none (run a rank 3, run b rank 4).
    assert (legacy.run_a, 3) not in legacy.ranks_before and (legacy.run_b, 4) not in legacy.ranks_before
    assert set(ranks) == stored | set(legacy.ranks_before)
    for key in stored:
        run_id, rank = key
        steps = [r["step"] for r in legacy.steps_of(run_id, rank)]
        samples = [r["t_ns"] for r in legacy.samples_of(run_id, rank)]
        mark = ranks[key]
        assert mark["last_step"] == (max(steps) if steps else None), (key, mark)
        assert mark["last_sample_ns"] == (max(samples) if samples else None), (key, mark)
        assert mark["chunk_seq"] > max(seqs[key]), (key, mark, seqs[key])
    # What ingest had counted is kept; a rank with a row and no rows keeps no marks.
    for key, before in legacy.ranks_before.items():
        after = ranks[key]
        assert {k: after[k] for k in ("host", "step_rows", "reused_step_rows")} == {
            k: before[k] for k in ("host", "step_rows", "reused_step_rows")
        }, key
    assert ranks[legacy.run_b, 7] == {**legacy.ranks_before[legacy.run_b, 7], "last_sample_ns": None, "chunk_seq": 0}


@pytest.mark.skipif(not PG, reason="partitions exist on PostgreSQL only")
def test_forwards_partitions_the_chunks_as_the_rows_were(legacy: Legacy) -> None:
    _forwards()
    for rows_table, chunks_table in CHUNK_TABLES.items():
        (partkey,) = _fetch("SELECT pg_get_partkeydef(oid) FROM pg_class WHERE relname = %s", [chunks_table])
        assert partkey == ("RANGE (run_week)",)
        before = legacy.partitions[rows_table]
        assert _partitions(chunks_table) == before["bounds"]
        assert {"_legacy", "_default"} <= set(before["bounds"]) and any(s.startswith("_w") for s in before["bounds"])
        # Each partition holds the same (run, rank, week)s, with as many rows as the row table's.
        assert _partition_contents(chunks_table, "sum(n)") == before["contents"], chunks_table


def _replay_body(rows: list[dict[str, Any]], fields: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: [row[name] for row in rows] for name in fields}


def test_after_forwards_a_replayed_row_is_a_duplicate_and_a_new_one_is_stored(legacy: Legacy, owner: Tenant) -> None:
    _forwards()
    a, b, c = legacy.run_a, legacy.run_b, legacy.run_c
    marks = _ranks()
    migrated_seqs = [seq for seq, *_ in _migrated_by_rank("telemetry_stepchunk")[a, 0]]
    steps_a0 = legacy.steps_of(a, 0)
    # Through the HTTP API: steps 100-109 as stored (nulls and all), then a batch of a stored step
    # and one in the gap (5,000-5,999 was never stored), then steps after the last one.
    replay = [r for r in steps_a0 if 100 <= r["step"] < 110]
    response = owner.post_steps(a, {"rank": 0, "steps": _replay_body(replay, STEP_FIELDS)})
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 0, "duplicates": 10, "reused_step": 0}
    gap, stored = step_rows(a, 0, [5500])[0], next(r for r in steps_a0 if r["step"] == 6000)
    response = owner.post_steps(a, {"rank": 0, "steps": _replay_body([gap, stored], STEP_FIELDS)})
    assert response.json() == {"accepted": 1, "duplicates": 1, "reused_step": 0}, response.content
    new = step_rows(a, 0, list(range(10500, 10510)))
    response = owner.post_steps(a, {"rank": 0, "steps": _replay_body(new, STEP_FIELDS)})
    assert response.json() == {"accepted": 10, "duplicates": 0, "reused_step": 0}, response.content
    _same(rawrows.steps(a, rank=0), sorted([*steps_a0, gap, *new], key=lambda r: r["step"]), "steps of run a, rank 0")
    # The new chunks took sequence numbers from the migrated mark, clear of the migrated chunks.
    new_seqs = [seq for seq, lo, *_ in _migrated_by_rank("telemetry_stepchunk")[a, 0] if lo in (5500, 10500)]
    assert len(new_seqs) == 2 and min(new_seqs) >= marks[a, 0]["chunk_seq"] > max(migrated_seqs)
    assert _ranks()[a, 0]["last_step"] == 10509
    # Through the service: a rank that had no RunRank row, a run of a weekly partition and one of
    # the default partition (PostgreSQL): replays refused, new rows stored.
    for run_id, rank in ((a, 3), (b, 4), (c, 0)):
        run = Run.objects.get(pk=run_id)
        old = legacy.steps_of(run_id, rank)
        result = services.steps_ingest(run=run, rank=rank, host="n", steps=_replay_body(old[-5:], STEP_FIELDS))
        assert (result.accepted, result.duplicates, result.reused_step) == (0, 5, 0), (run_id, rank)
        more = step_rows(run_id, rank, [old[-1]["step"] + 1])
        result = services.steps_ingest(run=run, rank=rank, host="n", steps=_replay_body(old[:2] + more, STEP_FIELDS))
        assert (result.accepted, result.duplicates, result.reused_step) == (1, 2, 0), (run_id, rank)
        _same(rawrows.steps(run_id, rank=rank), old + more, f"steps of {run_id}, rank {rank}")
    # Samples: replays of host and GPU rows refused, a later one stored.
    for run_id, rank in ((a, 0), (a, 2), (a, 3), (b, 0), (c, 0)):
        run = Run.objects.get(pk=run_id)
        old = legacy.samples_of(run_id, rank)
        replay = [r for r in old if r["device"] == -1][:3] + [r for r in old if r["device"] >= 0][-3:]
        replay.sort(key=lambda r: (r["t_ns"], r["device"]))
        result = services.samples_ingest(run=run, rank=rank, host="n", samples=_replay_body(replay, SAMPLE_FIELDS))
        assert (result.accepted, result.duplicates) == (0, 6), (run_id, rank)
        later = sample_rows(run_id, rank, max(r["t_ns"] for r in old) + 10**9, 1, 1, [-1])
        result = services.samples_ingest(run=run, rank=rank, host="n", samples=_replay_body(replay + later, SAMPLE_FIELDS))
        assert (result.accepted, result.duplicates) == (1, 6), (run_id, rank)
        want = sorted(old + later, key=lambda r: (r["device"], r["t_ns"]))
        _same(rawrows.samples(run_id, rank=rank), want, f"samples of {run_id}, rank {rank}")


def _rows(table: str, fields: tuple[str, ...], key: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for row in _fetch(f"SELECT run_id, rank, {', '.join(fields)} FROM {table}"):
        out.append({"run_id": _uuid(row[0]), "rank": row[1], **dict(zip(fields, row[2:]))})
    return sorted(out, key=lambda r: (r["run_id"], r["rank"], *(r[k] for k in key)))


def test_backwards_restores_the_rows_and_forwards_again_packs_them(legacy: Legacy) -> None:
    _forwards()
    _migrate(OLD)
    tables = set(connection.introspection.table_names())
    assert {"telemetry_step", "telemetry_systemsample"} <= tables
    assert not {"telemetry_stepchunk", "telemetry_samplechunk"} & tables
    ordered = sorted(legacy.steps, key=lambda r: (r["run_id"], r["rank"], r["step"]))
    _same(_rows("telemetry_step", STEP_FIELDS, ("step",)), ordered, "steps after backwards")
    ordered = sorted(legacy.samples, key=lambda r: (r["run_id"], r["rank"], r["device"], r["t_ns"]))
    _same(_rows("telemetry_systemsample", SAMPLE_FIELDS, ("device", "t_ns")), ordered, "samples after backwards")
    ranks = _ranks()
    assert "chunk_seq" not in next(iter(ranks.values())) and "last_sample_ns" not in next(iter(ranks.values()))
    if PG:  # partitioned as 0007 left them, every row in week 0's partition
        for table in CHUNK_TABLES:
            assert _fetch("SELECT relkind FROM pg_class WHERE relname = %s", [table]) == [("p",)]
            assert {"_legacy", "_default"} <= set(_partitions(table))
            assert _fetch(f"SELECT count(*) FROM {table} WHERE run_week <> 0") == [(0,)]
            assert _fetch(f"SELECT count(*) FROM ONLY {table}_legacy") == _fetch(f"SELECT count(*) FROM {table}")
    # And forwards again: the same rows, and ingest still tells replays from new rows.
    _forwards()
    _all_rows_back(legacy)
    old = legacy.steps_of(legacy.run_b, 0)
    more = step_rows(legacy.run_b, 0, [100])
    run = Run.objects.get(pk=legacy.run_b)
    result = services.steps_ingest(run=run, rank=0, host="n", steps=_replay_body(old[-3:] + more, STEP_FIELDS))
    assert (result.accepted, result.duplicates, result.reused_step) == (1, 3, 0)


def test_forwards_keeps_the_last_step_of_a_rank_whose_rows_were_pruned(legacy: Legacy) -> None:
    # Retention deleted the rank's rows (its run archived, past retention); RunRank kept the mark.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO telemetry_runrank (run_id, rank, host, counters, step_rows, last_step, reused_step_rows) "
            "VALUES (%s, 9, 'gone', '{}', 5000, 4999, 0)",
            [_param(legacy.run_b)],
        )
    _forwards()
    assert _ranks()[legacy.run_b, 9]["last_step"] == 4999

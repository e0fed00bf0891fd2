"""The pure batcher: durations, columns, and batch cutting (property-based where it pays)."""

from __future__ import annotations

import gzip
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phantomhub_agent import _batcher as b
from tests.examples import examples


def raw_step(step: int, start: int, end: int, **fields: Any) -> tuple[Any, ...]:
    values: list[Any] = [None] * b.RAW_STEP_LEN
    values[b.R_STEP], values[b.R_START], values[b.R_END] = step, start, end
    for name, value in fields.items():
        values[getattr(b, name)] = value
    return tuple(values)


def row(ended: tuple[Any, int] | None, clock_offset_ns: int = 0) -> dict[str, Any]:
    assert ended is not None
    return dict(zip(b.STEP_COLUMNS, b.finalize_step(ended[0], ended[1], clock_offset_ns)))


def test_a_step_lasts_until_the_next_one_starts() -> None:
    resolver = b.DurationResolver()
    assert resolver.push(raw_step(0, 100, 150)) is None
    first = row(resolver.push(raw_step(1, 180, 250)), clock_offset_ns=1_000)
    assert first["step"] == 0
    assert first["t_start_ns"] == 1_100
    assert first["dur_ns"] == 80  # 100 -> 180, including the 30 ns between steps


def test_a_phase_closes_the_step_before_it() -> None:
    resolver = b.DurationResolver()
    resolver.push(raw_step(0, 100, 150))
    closed = row(resolver.boundary(160))
    assert closed["dur_ns"] == 60
    assert resolver.boundary(500) is None  # nothing held any more


def test_the_last_step_lasts_until_its_own_end() -> None:
    resolver = b.DurationResolver()
    resolver.push(raw_step(7, 100, 175))
    assert row(resolver.close())["dur_ns"] == 75
    assert resolver.close() is None


def test_stage_columns_keep_their_places() -> None:
    resolver = b.DurationResolver()
    resolver.push(
        raw_step(
            3,
            0,
            10,
            R_DATA=1,
            R_FWD=2,
            R_BWD=3,
            R_OPT=4,
            R_COMM=5,
            R_FLOPS=6,
            R_TOKENS=7,
            R_SAMPLES=8,
            R_MEM_ALLOC=9,
            R_MEM_RES=10,
            R_MEM_PEAK=11,
            R_RETRIES=12,
        )
    )
    out = row(resolver.close())
    assert [out[name] for name in b.STEP_COLUMNS[3:]] == list(range(1, 13))


@given(
    gaps=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)), min_size=1, max_size=60),
    phase_after=st.sets(st.integers(0, 59)),
)
def test_durations_tile_the_timeline_without_overlap(gaps: list[tuple[int, int]], phase_after: set[int]) -> None:
    """Whatever the step lengths, gaps and phases: every step is emitted once, in order, and
    the durations never overlap the next step nor reach into a phase."""
    resolver = b.DurationResolver()
    out: list[dict[str, Any]] = []
    t = 0
    boundaries: dict[int, int] = {}
    for i, (length, gap) in enumerate(gaps):
        start, end = t, t + length
        emitted = resolver.push(raw_step(i, start, end))
        if emitted:
            out.append(row(emitted))
        if i in phase_after:
            boundaries[i] = end + gap // 2
            emitted = resolver.boundary(end + gap // 2)
            if emitted:
                out.append(row(emitted))
        t = end + gap
    last = resolver.close()
    if last:
        out.append(row(last))
    assert [r["step"] for r in out] == list(range(len(gaps)))
    for i, r in enumerate(out):
        length = gaps[i][0]
        assert r["dur_ns"] >= length
        if i + 1 < len(out):
            assert r["t_start_ns"] + r["dur_ns"] <= out[i + 1]["t_start_ns"]
        if i in boundaries:
            assert r["t_start_ns"] + r["dur_ns"] == boundaries[i]


@given(n=st.integers(0, 250), max_rows=st.integers(1, 40))
def test_chunks_cover_every_row_once_in_order(n: int, max_rows: int) -> None:
    columns = {"step": list(range(n)), "t_start_ns": [i * 10 for i in range(n)]}
    chunks = list(b.chunk_columns(columns, max_rows))
    assert all(0 < b.column_rows(c) <= max_rows for c in chunks)
    assert [s for c in chunks for s in c["step"]] == list(range(n))


@settings(max_examples=examples(60))
@given(n=st.integers(1, 300), max_bytes=st.integers(60, 3000))
def test_fit_columns_halves_until_each_batch_fits(n: int, max_bytes: int) -> None:
    columns = {"step": list(range(n)), "t_start_ns": [1_700_000_000_000_000_000 + i for i in range(n)]}
    parts = list(b.fit_columns("steps", columns, {"rank": 0}, max_bytes))
    steps = [s for payload, _, _ in parts for s in payload["steps"]["step"]]
    assert steps == list(range(n))
    for payload, body, rows in parts:
        assert json.loads(body) == payload
        assert rows == len(payload["steps"]["step"])
        assert len(body) <= max_bytes or rows == 1


def test_all_null_optional_columns_are_left_out() -> None:
    columns = {"step": [1, 2], "t_start_ns": [5, 6], "comm_ns": [None, None], "data_ns": [None, 3]}
    assert b.compact_columns(columns, b.REQUIRED_STEP_COLUMNS) == {
        "step": [1, 2],
        "t_start_ns": [5, 6],
        "data_ns": [None, 3],
    }


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)), max_size=50))
def test_bulk_columns_equal_row_by_row_conversion(spans: list[tuple[int, int, int]]) -> None:
    raws = [raw_step(i, s, s + length, R_FWD=i, R_TOKENS=7) for i, (s, length, _) in enumerate(spans)]
    ends = [s + extra for s, _, extra in spans]
    buf = b.StepBuffer(clock_offset_ns=5)
    for raw, end in zip(raws, ends):
        buf.append((raw, end), now_ns=0)
    columns = buf.take(1000)
    rows = [dict(zip(b.STEP_COLUMNS, b.finalize_step(r, e, 5))) for r, e in zip(raws, ends)]
    assert columns == {name: [r[name] for r in rows] for name in b.STEP_COLUMNS}
    for r, (s, length, extra) in zip(rows, spans):
        assert r["t_start_ns"] == s + 5 and r["dur_ns"] == max(length, extra)


def test_column_buffer_is_due_by_rows_or_age() -> None:
    buf = b.ColumnBuffer(("step", "t_start_ns"))
    assert not buf.due(0, max_rows=2, max_age_ns=100)
    buf.append([0, 0], now_ns=1_000)
    assert not buf.due(1_050, max_rows=2, max_age_ns=100)
    assert buf.due(1_100, max_rows=2, max_age_ns=100)
    buf.append([1, 1], now_ns=1_010)
    assert buf.due(1_010, max_rows=2, max_age_ns=100)
    assert buf.take(10) == {"step": [0, 1], "t_start_ns": [0, 1]}
    assert len(buf) == 0 and buf.oldest_ns is None


def test_gzip_round_trips() -> None:
    data = b.encode_json({"steps": {"step": list(range(1000))}})
    assert gzip.decompress(b.gzip_bytes(data)) == data
    assert len(b.gzip_bytes(data)) < len(data) / 2


def test_odd_values_are_encoded_without_losing_the_batch() -> None:
    import numpy as np
    import torch

    payload = {"steps": {"tokens": [np.int64(4096), torch.tensor(8), float("nan"), float("inf")], "x": [object]}}
    decoded = json.loads(b.encode_json(payload))
    assert decoded["steps"]["tokens"] == [4096, 8, None, None]
    assert isinstance(decoded["steps"]["x"][0], str)

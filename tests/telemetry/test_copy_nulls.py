"""Rows with nulls are packed with each null as -1 (integers) or NaN (floats), values that no
column may hold: what is read back is what was sent, value for value and null for null (a zero
stays a zero), on both ingest paths (all new rows, stored unread; and a replay overlapping stored
rows, split against the stored chunks). The stored chunks are decoded by tests/rawrows.py, not by
the server's reader."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from tests import rawrows
from tests.conftest import T0_NS, Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]

COLUMNS = ("gpu_util_pct", "sm_clock_mhz", "gpu_mem_used_bytes", "power_w", "cpu_process_pct", "cpu_other_pct",
           "cpu_steal_pct", "rss_bytes")  # fmt: skip
INTS = {"gpu_mem_used_bytes", "rss_bytes"}


def sample_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Host rows, GPU rows and rows with random holes: many patterns of nulls, in random order."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = rng.choice(["host", "gpu", "holes"])
        row: dict[str, Any] = {"t_ns": T0_NS + i * 10**9, "device": None if kind == "host" else rng.randrange(4)}
        for name in COLUMNS:
            gpu_col = name in ("gpu_util_pct", "sm_clock_mhz", "gpu_mem_used_bytes", "power_w")
            present = (kind == "gpu") == gpu_col if kind != "holes" else rng.random() < 0.5
            if present:
                row[name] = rng.randrange(2**40) if name in INTS else round(rng.uniform(0, 100), 3)
            else:
                row[name] = None
        rows.append(row)
    rng.shuffle(rows)
    return rows


def columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {name: [row[name] for row in rows] for name in ("t_ns", "device", *COLUMNS)}


def stored(run_id: str, rank: int) -> dict[tuple[int, int], tuple[Any, ...]]:
    rows = rawrows.samples(run_id, rank)
    keyed = {(row["device"], row["t_ns"]): tuple(row[c] for c in COLUMNS) for row in rows}
    assert len(keyed) == len(rows), "a key stored twice"
    return keyed


def expected(rows: list[dict[str, Any]]) -> dict[tuple[int, int], tuple[Any, ...]]:
    return {(-1 if r["device"] is None else r["device"], r["t_ns"]): tuple(r[c] for c in COLUMNS) for r in rows}


def same(a: dict[Any, tuple[Any, ...]], b: dict[Any, tuple[Any, ...]]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        for x, y in zip(a[key], b[key]):
            if (x is None) != (y is None) or (x is not None and not math.isclose(float(x), float(y), rel_tol=0, abs_tol=0)):
                return False
    return True


def test_samples_with_many_null_patterns_read_back_as_sent(owner: Tenant) -> None:
    run_id = owner.create_run()
    zeros = [{"t_ns": T0_NS - 10**9, "device": device, **{c: 0 if c in INTS else 0.0 for c in COLUMNS}} for device in (None, 0)]
    rows = [*sample_rows(300, seed=1), *zeros]  # zeros beside the nulls: never taken for them
    response = owner.client.post(f"/api/v1/runs/{run_id}/samples", {"rank": 2, "samples": columns(rows)}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 302, "duplicates": 0}
    got = stored(run_id, 2)
    assert same(got, expected(rows))
    assert got[(-1, T0_NS - 10**9)] == got[(0, T0_NS - 10**9)] == (0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0)
    assert stored(run_id, 0) == {}  # another rank's rows are its own


def test_a_replay_overlapping_stored_rows_keeps_the_new_ones_exactly(owner: Tenant) -> None:
    run_id = owner.create_run()
    rows = sample_rows(200, seed=2)
    first, rest = rows[:120], rows[120:]
    path = f"/api/v1/runs/{run_id}/samples"
    assert owner.client.post(path, {"rank": 0, "samples": columns(first)}, format="json").status_code == 200
    response = owner.client.post(path, {"rank": 0, "samples": columns(rows)}, format="json")
    assert response.json() == {"accepted": len(rest), "duplicates": len(first)}
    assert same(stored(run_id, 0), expected(rows))

"""The many-rank reading of stored rows (services._step_columns_many) gives, rank for rank, what
the one-rank path gives: nulls (-1 / NaN), missing durations, start times that do not rise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phantomhub.telemetry.hot import ANALYSIS_COLUMNS
from phantomhub.waste.core.accumulator import _filled_many
from phantomhub.waste.core.inputs import ALL_COLUMNS
from phantomhub.waste.services import _step_columns, _step_columns_many
from tests.examples import examples


def concatenated(ranks: list[dict[str, Any]]) -> tuple[list[int], np.ndarray, dict[str, Any]]:
    """The ranks' rows as steps_rows_after returns them: one set of columns and the bounds."""
    bounds = np.concatenate(([0], np.cumsum([len(r["step"]) for r in ranks]))).astype(np.int64)
    return list(range(len(ranks))), bounds, {name: np.concatenate([r[name] for r in ranks]) for name in ranks[0]}


@st.composite
def stored_rank(draw: st.DrawFn, rising: bool = False) -> dict[str, Any]:
    """One rank's rows as the analysis read returns them (ints with -1 for null, NaN flops)."""
    n = draw(st.integers(1, 12))
    t = np.cumsum(draw(st.lists(st.integers(1 if rising else -3, 10), min_size=n, max_size=n))) + 10**12
    out: dict[str, Any] = {"step": np.arange(n, dtype=np.int64) + draw(st.integers(0, 5)), "t_start_ns": t.astype(np.int64)}
    for name in ANALYSIS_COLUMNS:
        if name in out:
            continue
        if name == "flops":
            values = draw(st.lists(st.sampled_from([np.nan, 1.0, 2.5e12]), min_size=n, max_size=n))
            out[name] = np.array(values, dtype=np.float64)
        else:
            values = draw(st.lists(st.sampled_from([-1, 0, 7, 10**6]), min_size=n, max_size=n))
            out[name] = np.array(values, dtype=np.int64)
    return out


@pytest.mark.slow  # seconds: make test runs it, make check does not
@settings(max_examples=examples(200), deadline=None)
@given(st.lists(stored_rank(), min_size=1, max_size=12))
def test_many_ranks_read_like_one_rank_at_a_time(ranks):
    hosts = {r: f"node-{r}" for r in range(len(ranks))}
    many = _step_columns_many(*concatenated(ranks), hosts)
    assert len(many) == len(ranks)
    for rank, (arrays, (cols, n, last, dropped)) in enumerate(zip(ranks, many, strict=True)):
        one, one_dropped = _step_columns(rank, hosts[rank], arrays)
        assert (n, last, dropped) == (len(arrays["step"]), int(arrays["step"][-1]), one_dropped)
        assert (cols.rank, cols.host, cols.present()) == (one.rank, one.host, one.present())
        for name in ALL_COLUMNS:
            a, b = getattr(one, name), getattr(cols, name)
            assert (a is None) == (b is None), name
            if a is not None:
                assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
    # The concatenation handed to the accumulator is what it would build from the one-rank
    # batches; none when a rank's rows had to be read the one-rank way (they left rows out).
    ones = [_step_columns(rank, hosts[rank], arrays)[0] for rank, arrays in enumerate(ranks)]
    if many.filled is None:
        assert any(_step_columns(rank, hosts[rank], a)[1] for rank, a in enumerate(ranks)) or any(
            (np.diff(a["t_start_ns"]) <= 0).any() for a in ranks
        )
    else:
        expected = _filled_many(ones)
        assert set(many.filled) == set(expected)
        for name, values in expected.items():
            got = many.filled[name]
            assert got.dtype == values.dtype and np.array_equal(got, values, equal_nan=True), name


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(stored_rank(rising=True), min_size=1, max_size=12))
def test_rows_that_rise_are_handed_on_as_one_concatenation(ranks):
    hosts = {r: f"node-{r}" for r in range(len(ranks))}
    many = _step_columns_many(*concatenated(ranks), hosts)
    assert many.filled is not None
    expected = _filled_many([_step_columns(rank, hosts[rank], arrays)[0] for rank, arrays in enumerate(ranks)])
    for name, values in expected.items():
        assert np.array_equal(many.filled[name], values, equal_nan=True), name

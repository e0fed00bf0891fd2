"""The run's best stretch, with the windows' stretches planned once for every figure (assess asks
for four), against a search of every start window by hand."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.evidence import best_stretch, stretch_plan
from tests.examples import examples

# A window's denominator is none or at least a nanosecond's worth: below that a ratio of sums can
# overflow to inf, and inf - inf makes the quartile NaN, which equals nothing (hypothesis found one).
DEN = st.one_of(st.just(0.0), st.floats(1e-9, 50))
WINDOWS = st.lists(st.tuples(st.sampled_from((0.0, 0.5, 1.0, 3.0, 8.0)), st.floats(0, 1e3), DEN), max_size=60)


def by_hand(rows, need, lower_is_better):
    length, num, den = ([r[k] for r in rows] for k in range(3))
    p_len, p_num, p_den = ([0.0, *itertools.accumulate(v)] for v in (length, num, den))
    best = None
    for i in range(len(rows)):
        j = next((j for j in range(i + 1, len(rows) + 1) if p_len[j] >= p_len[i] + need * (1 - 1e-12)), None)
        if j is None or p_den[j] - p_den[i] <= 0:
            continue
        value = (p_num[j] - p_num[i]) / (p_den[j] - p_den[i])
        if best is None or (value < best if lower_is_better else value > best):
            best = value
    return best


@settings(max_examples=examples(300), deadline=None)
@given(WINDOWS, st.sampled_from((1.0, 4.0, 10.0)), st.booleans())
def test_a_planned_best_stretch_is_the_best_of_every_start_window(rows, need, lower_is_better):
    length, num, den = (np.array([r[k] for r in rows], dtype=np.float64) for k in range(3))
    kw = {"need": need, "lower_is_better": lower_is_better, "start_ns": 0, "width_ns": 10, "ranks": 2}
    plan = stretch_plan(length, need)

    planned = best_stretch(num, den, length, plan=plan, **kw) if plan is not None else None
    unplanned = best_stretch(num, den, length, **kw)

    expected = by_hand(rows, need, lower_is_better)
    assert (planned.best if planned else None) == expected
    assert planned == unplanned
    # The plan depends on the lengths alone: another figure over the same windows reuses it.
    other = best_stretch(num[::-1].copy(), den, length, plan=plan, **kw) if plan is not None else None
    assert other == best_stretch(num[::-1].copy(), den, length, **kw)

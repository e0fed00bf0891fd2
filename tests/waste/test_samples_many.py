"""System samples appended in one call for all batches equal the counts, histograms and sums made
by hand from the raw samples (and what one call per batch makes): the analysis pass appends a
run's new samples at once."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.waste.core.model import PriceSegment, RunAccumulator, RunConfig, SystemSamples
from tests.examples import examples
from tests.waste.factories import S

START = 100 * S
CONFIG = RunConfig(gpu_count=8, world_size=8, allocation_start_ns=START, price_segments=(PriceSegment(0, 10**6 * S, 2),))
PCT = st.one_of(st.floats(0, 100), st.just(float("nan")), st.floats(100, 150))


@st.composite
def batches(draw: st.DrawFn) -> list[SystemSamples]:
    out = []
    for _ in range(draw(st.integers(0, 12))):
        n = draw(st.integers(0, 15))
        t = draw(st.lists(st.integers(START - 20 * S, START + 600 * S), min_size=n, max_size=n))
        host = draw(st.sampled_from(("node-0", "node-1", "node-2")))

        def col(n: int = n) -> list[float]:
            return draw(st.lists(PCT, min_size=n, max_size=n))

        if draw(st.booleans()):
            out.append(SystemSamples(host=host, t_ns=np.array(t, dtype=np.int64), gpu_util_pct=col(), rank=0))
        else:
            steal = col() if draw(st.booleans()) else None
            out.append(SystemSamples(host=host, t_ns=np.array(t, dtype=np.int64), cpu_other_pct=col(), cpu_steal_pct=steal))
    return out


def by_hand(samples: list[SystemSamples]) -> dict[str, dict[str, object]]:
    hosts: dict[str, dict[str, object]] = {}
    for b in samples:
        kept = [i for i, t in enumerate(b.t_ns.tolist()) if t >= START]
        if not kept:
            continue
        h = hosts.setdefault(b.host, {"other": [], "steal": [], "gpu": []})
        for key, values in (("other", b.cpu_other_pct), ("steal", b.cpu_steal_pct), ("gpu", b.gpu_util_pct)):
            if values is not None:
                h[key] += [float(values[i]) for i in kept if math.isfinite(values[i])]  # type: ignore[operator]
    return hosts


def hist(values: list[float]) -> list[int]:
    out = [0] * 101
    for v in values:
        out[min(max(math.floor(v), 0), 100)] += 1
    return out


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_samples_appended_at_once_equal_the_counts_made_by_hand(samples):
    at_once = RunAccumulator(CONFIG)
    one_by_one = RunAccumulator(CONFIG)

    at_once.add_samples_many(samples)
    for b in samples:
        one_by_one.add_samples(b)

    expected = by_hand(samples)
    assert set(at_once.hosts) == set(expected) == set(one_by_one.hosts)
    for host, want in expected.items():
        got = at_once.hosts[host]
        assert (got.other_n, got.steal_n, got.gpu_util_n) == tuple(len(want[k]) for k in ("other", "steal", "gpu"))
        assert got.other_hist == hist(want["other"]) and got.steal_hist == hist(want["steal"])
        assert got.other_sum == pytest.approx(math.fsum(want["other"]), abs=1e-9)
        assert got.steal_sum == pytest.approx(math.fsum(want["steal"]), abs=1e-9)
        assert got.gpu_util_sum == pytest.approx(math.fsum(want["gpu"]), abs=1e-9)
        assert one_by_one.hosts[host].other_hist == got.other_hist and one_by_one.hosts[host].gpu_util_n == got.gpu_util_n
    kept = [t for b in samples for t in b.t_ns.tolist() if t >= START]
    assert at_once.max_t_seen == (max(kept) if kept else None)
    # GPU utilisation by chart window, by hand: the window of each kept, finite sample.
    width = at_once.windows.width_ns
    assert width == one_by_one.windows.width_ns
    want_sum = [0.0] * at_once.windows.sums.shape[1]
    for b in samples:
        if b.gpu_util_pct is not None:
            for t, v in zip(b.t_ns.tolist(), b.gpu_util_pct.tolist(), strict=True):
                if t >= START and math.isfinite(v):
                    want_sum[(t - START) // width] += v
    assert at_once.windows.field("gpu_util_sum").tolist() == pytest.approx(want_sum, abs=1e-9)
    assert at_once.windows.field("gpu_util_samples").tolist() == one_by_one.windows.field("gpu_util_samples").tolist()

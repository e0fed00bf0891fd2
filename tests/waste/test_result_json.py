"""The result's JSON, serialized once in C (chart windows from their arrays), against a plain
Python walk of the same analysis whose chart windows are computed the way they were before they
were held as arrays: one Python value per window, None where nothing was counted."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings

from phantomhub.waste.core.finalize import build_analysis
from phantomhub.waste.core.model import DEFAULT_RECOVERABILITY, RunAccumulator, RunInputs, world_size_for
from phantomhub.waste.core.recommendations import recommend
from phantomhub.waste.core.result import Analysis, WindowSeries, json_bytes
from phantomhub.waste.core.windows import FIELDS
from tests.examples import examples
from tests.waste.strategies import runs

SETTINGS = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def finished(run: RunInputs) -> tuple[RunAccumulator, Analysis]:
    cfg = run.config
    ranks = {b.rank for b in run.steps if len(b)}
    world, _ = world_size_for(cfg.world_size, len(ranks), cfg.gpu_count)
    acc = RunAccumulator(dataclasses.replace(cfg, world_size=world))
    for batch in run.steps:
        if len(batch) and int(batch.t_start_ns.max()) < run.end_ns:
            acc.add_steps(batch.take(np.flatnonzero(batch.t_start_ns < run.end_ns)), align=False)
    for samples in run.samples:
        acc.add_samples(samples)
    done = acc.finished(run.end_ns)
    return done, build_analysis(done, end_ns=run.end_ns, recoverability=DEFAULT_RECOVERABILITY, oom_count=0)


def windows_by_hand(acc: RunAccumulator, a: Analysis) -> dict[str, Any]:
    """The chart windows, one window at a time in plain Python from the accumulator's sums."""
    start, end = a.allocation_start_ns, a.end_ns
    win = acc.windows.copy()
    last = max(end, (acc.max_t_seen or start) + 1)
    win.fit(max(last - start - 1, 0))
    win.coarsen_to(win.duration_level())
    width = win.width_ns
    n = max(math.ceil((last - start) / width), 0)
    sums = {name: [float(v) for v in win.sums[i]] + [0.0] * n for i, name in enumerate(FIELDS)}
    peaks = [float(v) for v in win.peak] + [-1.0] * n
    n_rep = a.ranks_reporting
    scale = a.world_size / n_rep if n_rep else 0.0
    peak_total = a.peak_flops_per_gpu * a.gpu_count if a.peak_flops_per_gpu is not None else None
    flops_seen = any(v > 0 for v in sums["flops"][:n])
    out: dict[str, Any] = {"width_ns": width}
    series: dict[str, list[Any]] = {name: [] for name in ("t_start_ns", "steps", "step_starts", "mfu")}

    def ratio(num: float, den: float) -> float | None:
        return num / den if den > 0 else None

    names = ("step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms", "host_ms", "tokens_per_s",
             "samples_per_s", "mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes", "gpu_util_pct")  # fmt: skip
    series.update({name: [] for name in names})
    series["alloc_retries"] = []
    for i in range(n):
        t0 = start + i * width
        length_s = max(min(t0 + width, end) - t0, 0) / 1e9
        s = {name: sums[name][i] for name in FIELDS}
        steps = s["steps"]
        series["t_start_ns"].append(t0)
        series["steps"].append(steps)
        series["step_starts"].append(int(s["step_starts"]))
        for name, field in (("step_ms", "step_ns"), ("data_ms", "data_ns"), ("forward_ms", "forward_ns"),
                            ("backward_ms", "backward_ns"), ("optimizer_ms", "optimizer_ns"), ("comm_ms", "comm_ns"),
                            ("host_ms", "host_ns")):  # fmt: skip
            series[name].append(ratio(s[field] * 1e-6, steps))
        series["tokens_per_s"].append(ratio(s["tokens"] * scale, length_s))
        series["samples_per_s"].append(ratio(s["samples"] * scale, length_s))
        mfu = None if peak_total is None or not flops_seen else ratio(s["flops"] * scale, length_s * peak_total)
        series["mfu"].append(mfu)
        series["mem_allocated_bytes"].append(ratio(s["mem_allocated_sum"], s["mem_rows"]))
        series["mem_reserved_bytes"].append(ratio(s["mem_reserved_sum"], s["mem_rows"]))
        series["mem_peak_bytes"].append(peaks[i] if peaks[i] >= 0 else None)
        series["gpu_util_pct"].append(ratio(s["gpu_util_sum"], s["gpu_util_samples"]))
        series["alloc_retries"].append(int(s["alloc_retries"]))
    order = ("t_start_ns", "steps", "step_starts", "step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms",
             "comm_ms", "host_ms", "tokens_per_s", "samples_per_s", "mfu", "mem_allocated_bytes", "mem_reserved_bytes",
             "mem_peak_bytes", "gpu_util_pct", "alloc_retries")  # fmt: skip
    out.update({name: series[name] for name in order})
    return out


def walk(value: Any) -> Any:
    """Plain JSON types by a Python walk (NaN and infinities are null, as stored)."""
    if isinstance(value, WindowSeries):
        raise AssertionError("window series are compared by hand")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: walk(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): walk(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [walk(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def result_by_hand(acc: RunAccumulator, a: Analysis) -> dict[str, Any]:
    out = {f.name: walk(getattr(a, f.name)) for f in dataclasses.fields(a) if f.name != "windows"}
    out["windows"] = windows_by_hand(acc, a)
    for fig, raw in zip(a.categories, out["categories"], strict=True):
        raw["recoverable_usd"] = fig.recoverable_cents / 100
        raw["recoverable_low_usd"] = fig.recoverable_low_cents / 100
        raw["recoverable_high_usd"] = fig.recoverable_high_cents / 100
    out["cost_usd"] = a.cost_cents / 100
    return out


@SETTINGS
@given(runs())
def test_result_json_equals_a_python_walk_with_windows_computed_one_by_one(run):
    acc, a = finished(run)

    stored = orjson.loads(a.to_json_bytes())

    assert stored == result_by_hand(acc, a)
    assert a.to_json() == stored


@SETTINGS
@given(runs())
def test_window_series_read_as_tuples_of_the_stored_values(run):
    _, a = finished(run)
    stored = orjson.loads(a.to_json_bytes())["windows"]

    assert a.windows.width_ns == stored["width_ns"]
    for name, values in stored.items():
        if name != "width_ns":
            assert getattr(a.windows, name) == tuple(values)
    assert len(a.windows) == len(stored["t_start_ns"])


@SETTINGS
@given(runs())
def test_recommendations_json_equals_their_to_json(run):
    _, a = finished(run)
    recs = recommend(a)

    assert orjson.loads(json_bytes(recs)) == walk([r.to_json() for r in recs])

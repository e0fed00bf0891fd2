"""Figures of a live run over its last few minutes, read from the stored analysis only.

Pure: takes the analysis ``result`` JSON (phantomhub/waste/core/result.py Analysis.to_json) and reads
its chart windows (``result["windows"]``, phantomhub/waste/core/diagnostics.py window_series), never
raw step rows. A window holds, summed over the reporting ranks, ``steps`` step-equivalents and
per-step means (``step_ms``, ``data_ms``, ``comm_ms``, ``host_ms``), so ``steps × step_ms`` is
the rank-time inside steps in the window; ``mfu`` and ``tokens_per_s`` are over the window's
length.

The span read is the trailing ``window_s`` seconds ending at the end of the last window in which
a step ran (the latest telemetry the analysis has seen), so a figure does not sink because the
newest batch has not arrived yet; a run with no telemetry at all is the silent-run rule's case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phantomhub.planning.burn import run_usd_per_hour

__all__ = ["WindowFigures", "recent_figures", "run_usd_per_hour"]


@dataclass(frozen=True)
class WindowFigures:
    from_ns: int
    to_ns: int
    seconds: float
    windows: int
    steps: float
    useful_share: float
    waste_share: float
    shares: Mapping[str, float]  # data_stall, comm_exposed, host_overhead, idle, compute_inefficiency
    mfu: float | None
    tokens_per_s: float | None
    useful_basis: str  # "mfu" (FLOPs against the target MFU) or "compute_time" (no FLOPs or peak)


def _at(values: Sequence[Any] | None, i: int) -> float:
    if values is None or i >= len(values):
        return 0.0
    v = values[i]
    return 0.0 if v is None else float(v)


def recent_figures(result: Mapping[str, Any], *, window_s: float, target_mfu: float) -> WindowFigures | None:
    """Waste share, MFU and tokens/s over the trailing ``window_s`` seconds of telemetry.

    useful share = mean MFU over the span / target MFU (at most 1) where FLOPs and the GPU's peak
    are known, as the waste model's useful_compute does; otherwise compute time (step time minus
    data, comm and host time) / rank-time of the span. waste share = 1 − useful share. Idle =
    rank-time of the span outside any step.
    """
    win = result.get("windows") or {}
    t0s: Sequence[int] = win.get("t_start_ns") or []
    steps: Sequence[float] = win.get("steps") or []
    width = int(win.get("width_ns") or 0)
    if not t0s or width <= 0:
        return None
    live = [i for i, s in enumerate(steps) if s and s > 0]
    if not live:
        return None
    last = live[-1]
    end_ns = int(result.get("end_ns") or (t0s[last] + width))
    to_ns = min(t0s[last] + width, end_ns)
    lo = to_ns - int(window_s * 1e9)
    chosen = [i for i in range(last + 1) if t0s[i] >= lo] or [last]
    ranks = max(int(result.get("ranks_reporting") or 1), 1)
    length_ns = step_ns = data_ns = comm_ns = host_ns = 0.0
    mfu_sum = tps_sum = 0.0
    mfu_known = False
    n_steps = 0.0
    for i in chosen:
        length = max(min(t0s[i] + width, end_ns) - t0s[i], 0)
        st = _at(steps, i)
        n_steps += st
        length_ns += length
        step_ns += st * _at(win.get("step_ms"), i) * 1e6
        data_ns += st * _at(win.get("data_ms"), i) * 1e6
        comm_ns += st * _at(win.get("comm_ms"), i) * 1e6
        host_ns += st * _at(win.get("host_ms"), i) * 1e6
        mfus = win.get("mfu") or []
        if i < len(mfus) and mfus[i] is not None:
            mfu_known = True
            mfu_sum += float(mfus[i]) * length
        tps_sum += _at(win.get("tokens_per_s"), i) * length
    rank_ns = length_ns * ranks
    if rank_ns <= 0:
        return None
    compute_ns = max(step_ns - data_ns - comm_ns - host_ns, 0.0)
    idle_ns = max(rank_ns - step_ns, 0.0)
    mfu = mfu_sum / length_ns if mfu_known else None
    if mfu is not None and target_mfu > 0:
        useful = min(mfu / target_mfu, 1.0, compute_ns / rank_ns) if compute_ns > 0 else min(mfu / target_mfu, 1.0)
        basis = "mfu"
    else:
        useful = min(compute_ns / rank_ns, 1.0)
        basis = "compute_time"
    shares = {
        "data_stall": data_ns / rank_ns,
        "comm_exposed": comm_ns / rank_ns,
        "host_overhead": host_ns / rank_ns,
        "idle": idle_ns / rank_ns,
        "compute_inefficiency": max(compute_ns / rank_ns - useful, 0.0),
    }
    tokens = tps_sum / length_ns if result.get("tokens_per_s") is not None else None
    return WindowFigures(
        from_ns=min(t0s[i] for i in chosen),
        to_ns=to_ns,
        seconds=length_ns / 1e9,
        windows=len(chosen),
        steps=n_steps,
        useful_share=useful,
        waste_share=1.0 - useful,
        shares=shares,
        mfu=mfu,
        tokens_per_s=tokens,
        useful_basis=basis,
    )

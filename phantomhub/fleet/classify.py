"""Which class a GPU sample falls in, and who holds it (pure: no Django).

Rules (the node collector's contract): a `run` owner among the GPU's processes, or else a
registered run the server matched to the GPU by host and GPU UUID or index, makes it
instrumented (the run's own analysis prices that time, the fleet never prices it again); else a
process present or memory held above the driver's baseline is busy when utilization is at least
BUSY_UTIL_PCT and idle-held below it; else the GPU is empty. A GPU computing with no process
visible (processes in a PID namespace NVML cannot list) counts as busy, and a held GPU whose
utilization is unknown counts as busy too: nothing is called idle without evidence.

Where DCGM reports SM activity (DCGM_FI_PROF_SM_ACTIVE: the fraction of cycles an SM had a warp
resident, over all SMs), it decides busy instead of utilization: NVML's utilization is the share
of time *any* kernel ran, so one tiny kernel in a loop reads 100% while 131 of 132 SMs sit idle.
Busy when sm_active >= BUSY_SM_ACTIVE (the same 5%); a null sm_active falls back to utilization.
"""

from __future__ import annotations

from collections.abc import Sequence

BUSY_UTIL_PCT = 5.0
BUSY_SM_ACTIVE = 0.05
MEM_BASELINE_BYTES = 256 * 2**20

INSTRUMENTED, BUSY_UNINSTRUMENTED, IDLE_HELD, EMPTY = 1, 2, 3, 4


def gpu_classify(
    *,
    util_pct: float | None,
    mem_used_bytes: int | None,
    processes: Sequence[tuple[int | None, str | None, int | None]],
    sm_active: float | None = None,
    run_holder: int | None = None,
) -> tuple[int, int | None]:
    """(class, holder owner id) of one GPU sample. `processes`: (owner id, owner kind, memory bytes);
    `run_holder`: the owner of a registered run the server matched to this GPU by host and GPU
    (phantomhub/fleet/runs.py), for sources that list no pids."""
    runs = [p for p in processes if p[1] == "run"]
    if runs:
        return INSTRUMENTED, max(runs, key=lambda p: p[2] or 0)[0]
    if run_holder is not None:
        return INSTRUMENTED, run_holder
    held = bool(processes) or (mem_used_bytes or 0) > MEM_BASELINE_BYTES
    activity = util_pct if sm_active is None else sm_active
    threshold = BUSY_UTIL_PCT if sm_active is None else BUSY_SM_ACTIVE
    busy = activity is not None and activity >= threshold
    holder = max(processes, key=lambda p: p[2] or 0)[0] if processes else None
    if busy:
        return BUSY_UNINSTRUMENTED, holder
    if held:
        return (BUSY_UNINSTRUMENTED if activity is None else IDLE_HELD), holder
    return EMPTY, None

"""Which class a GPU sample falls in, and who holds it (pure: no Django).

Rules (the node collector's contract): a `run` owner among the GPU's processes makes it
instrumented (the run's own analysis prices that time, the fleet never prices it again); else a
process present or memory held above the driver's baseline is busy when utilization is at least
BUSY_UTIL_PCT and idle-held below it; else the GPU is empty. A GPU computing with no process
visible (processes in a PID namespace NVML cannot list) counts as busy, and a held GPU whose
utilization is unknown counts as busy too: nothing is called idle without evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

BUSY_UTIL_PCT = 5.0
MEM_BASELINE_BYTES = 256 * 2**20

INSTRUMENTED, BUSY_UNINSTRUMENTED, IDLE_HELD, EMPTY = 1, 2, 3, 4


def gpu_classify(
    *, util_pct: float | None, mem_used_bytes: int | None, processes: Sequence[tuple[int | None, str | None, int | None]]
) -> tuple[int, int | None]:
    """(class, holder owner id) of one GPU sample. `processes`: (owner id, owner kind, memory bytes)."""
    runs = [p for p in processes if p[1] == "run"]
    if runs:
        return INSTRUMENTED, max(runs, key=lambda p: p[2] or 0)[0]
    held = bool(processes) or (mem_used_bytes or 0) > MEM_BASELINE_BYTES
    busy = util_pct is not None and util_pct >= BUSY_UTIL_PCT
    holder = max(processes, key=lambda p: p[2] or 0)[0] if processes else None
    if busy:
        return BUSY_UNINSTRUMENTED, holder
    if held:
        return (BUSY_UNINSTRUMENTED if util_pct is None else IDLE_HELD), holder
    return EMPTY, None

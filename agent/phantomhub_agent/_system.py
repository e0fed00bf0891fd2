"""About once a second: this process's CPU, other processes' CPU, steal, RSS, and NVML readings.

CPU figures are percentages of the whole node's capacity (0-100), so "other" and "process" add
up to the node's busy share. "Process" covers this rank and its children (DataLoader workers);
with psutil it also covers the whole torchrun job when launched by torchrun, so that sibling ranks
are not reported as contention. Without psutil, /proc is read directly (Linux); elsewhere the node
figures are null.

NVML readings cover only the job's own devices: the CUDA device this rank uses, translated to the
physical index through CUDA_VISIBLE_DEVICES (indices or UUIDs).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from ._log import logger

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CHILDREN_REFRESH_S = 30.0


def _read_proc_stat() -> tuple[float, float, float] | None:
    """(total, busy_without_steal, steal) jiffies of the node from /proc/stat."""
    try:
        with open("/proc/stat", "rb") as fh:
            first = fh.readline().split()
    except OSError:
        return None
    if not first or first[0] != b"cpu":
        return None
    values = [float(v) for v in first[1:]]
    values += [0.0] * (10 - len(values))
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    # guest time is already counted in user/nice
    busy = user + nice + system + irq + softirq
    return busy + idle + iowait + steal, busy, steal


def _read_rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        pass
    try:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024)
    except Exception:
        return None


class CpuSampler:
    def __init__(self) -> None:
        self.ncpu = os.cpu_count() or 1
        self._psutil: Any = None
        self._proc: Any = None
        self._job_root: Any = None
        try:
            import psutil

            self._psutil = psutil
            self._proc = psutil.Process()
            if os.environ.get("TORCHELASTIC_RUN_ID"):
                self._job_root = self._proc.parent()
        except Exception:
            self._psutil = None
        self._procs: list[Any] = []
        self._procs_refresh_at = 0.0
        self._last_node: tuple[float, float, float] | None = None
        self._last_proc_s: float | None = None
        self._last_wall: float | None = None

    def _node_times(self) -> tuple[float, float, float] | None:
        if self._psutil is not None:
            try:
                t = self._psutil.cpu_times()
                steal = float(getattr(t, "steal", 0.0))
                idle = float(t.idle) + float(getattr(t, "iowait", 0.0))
                busy = sum(float(getattr(t, name, 0.0)) for name in ("user", "nice", "system", "irq", "softirq"))
                return busy + idle + steal, busy, steal
            except Exception:
                return None
        return _read_proc_stat()

    def _job_processes(self) -> list[Any]:
        # Listing children walks all of /proc (milliseconds, holding the GIL): do it rarely.
        now = time.monotonic()
        if now >= self._procs_refresh_at:
            self._procs_refresh_at = now + CHILDREN_REFRESH_S
            root = self._job_root or self._proc
            try:
                self._procs = [root, *root.children(recursive=True)]
            except Exception:
                self._procs = [root]
        return self._procs

    def _job_cpu_seconds(self) -> float | None:
        if self._psutil is not None:
            total = 0.0
            alive = []
            for proc in self._job_processes():
                try:
                    times = proc.cpu_times()
                except Exception:  # noqa: S112 - a child exited: forget it
                    continue
                alive.append(proc)
                total += float(times.user) + float(times.system)
            self._procs = alive
            return total
        t = os.times()
        return t.user + t.system

    def sample(self) -> tuple[float | None, float | None, float | None, int | None]:
        """(process %, other processes %, steal %, RSS bytes) since the previous call."""
        now = time.monotonic()
        node = self._node_times()
        proc_s = self._job_cpu_seconds()
        rss: int | None = None
        if self._proc is not None:
            try:
                rss = int(self._proc.memory_info().rss)
            except Exception:
                rss = None
        if rss is None:
            rss = _read_rss_bytes()
        process_pct = other_pct = steal_pct = None
        if self._last_wall is not None and proc_s is not None and self._last_proc_s is not None:
            wall = now - self._last_wall
            if wall > 0:
                process_pct = _clamp(100.0 * (proc_s - self._last_proc_s) / (wall * self.ncpu))
        if node is not None and self._last_node is not None:
            d_total = node[0] - self._last_node[0]
            if d_total > 0:
                busy_pct = 100.0 * (node[1] - self._last_node[1]) / d_total
                steal_pct = _clamp(100.0 * (node[2] - self._last_node[2]) / d_total)
                if process_pct is not None:
                    other_pct = _clamp(busy_pct - process_pct)
        self._last_wall, self._last_proc_s, self._last_node = now, proc_s, node
        return _round(process_pct), _round(other_pct), _round(steal_pct), rss


def _clamp(value: float) -> float:
    return min(100.0, max(0.0, value))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def physical_gpu_ids(logical: Sequence[int], visible: str | None) -> list[str | int]:
    """Maps torch's logical device indices to NVML handles' keys (an index or a UUID string)."""
    if not visible:
        return list(logical)
    tokens = [tok.strip() for tok in visible.split(",") if tok.strip()]
    out: list[str | int] = []
    for idx in logical:
        if idx >= len(tokens):
            continue
        token = tokens[idx]
        out.append(int(token) if token.isdigit() else token)
    return out


class GpuSampler:
    """NVML readings for a fixed list of (logical index, physical id) devices."""

    def __init__(self, logical: Sequence[int], visible: str | None) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self.devices: list[tuple[int, Any]] = []
        for idx, phys in zip(logical, physical_gpu_ids(logical, visible)):
            if isinstance(phys, int):
                handle = pynvml.nvmlDeviceGetHandleByIndex(phys)
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(phys)
            self.devices.append((idx, handle))

    def driver_version(self) -> str | None:
        try:
            value = self._nvml.nvmlSystemGetDriverVersion()
            return value.decode() if isinstance(value, bytes) else str(value)
        except Exception:
            return None

    def sample(self) -> list[tuple[int, float | None, int | None, int | None, float | None]]:
        """(device, util %, SM clock MHz, memory used bytes, power W) per device."""
        nvml = self._nvml
        rows = []
        for idx, handle in self.devices:
            rows.append(
                (
                    idx,
                    _try(lambda h=handle: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)),
                    _try(lambda h=handle: int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))),
                    _try(lambda h=handle: int(nvml.nvmlDeviceGetMemoryInfo(h).used)),
                    _try(lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                )
            )
        return rows


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def open_gpu_sampler(logical: Sequence[int]) -> GpuSampler | None:
    if not logical:
        return None
    try:
        return GpuSampler(logical, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except ImportError:
        logger.debug("phantomhub: nvidia-ml-py not installed; no GPU utilization samples")
    except Exception as exc:
        logger.info("phantomhub: NVML unavailable (%s); no GPU utilization samples", exc)
    return None


class SystemSampler:
    """Produces sample rows in SAMPLE_COLUMNS order: one host row, plus one per own GPU."""

    def __init__(self, gpu_devices: Sequence[int]) -> None:
        self.cpu = CpuSampler()
        self.gpu = open_gpu_sampler(gpu_devices)
        self.cpu.sample()  # prime the deltas

    def sample(self, t_ns: int) -> list[list[Any]]:
        process_pct, other_pct, steal_pct, rss = self.cpu.sample()
        rows: list[list[Any]] = [[t_ns, None, None, None, None, None, process_pct, other_pct, steal_pct, rss]]
        if self.gpu is not None:
            for idx, util, clock, mem, power in self.gpu.sample():
                rows.append([t_ns, idx, util, clock, mem, power, None, None, None, None])
        return rows

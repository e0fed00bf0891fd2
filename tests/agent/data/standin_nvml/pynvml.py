"""A stand-in for ``pynvml`` (nvidia-ml-py): the GPUs are the only thing the tests may fake.

It implements the calls the node collector makes, with NVML's units and error behaviour
(milliwatts, bytes, MHz; ``NVMLError`` subclasses for unsupported readings; all-ones for a
process's unknown memory). The GPUs' states come from a JSON file named by
``NVML_STANDIN_STATE`` (re-read whenever it changes, so a test can change them while a collector
runs in another process), or from ``set_state`` in-process. A state is::

    {"gpus": [{"uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3", "util": 97, "mem_used": 123,
               "mem_total": 456, "power_mw": 350000, "sm_clock": 1980,
               "compute": [[pid, used_bytes_or_null], ...], "graphics": [[pid, used], ...],
               "unsupported": ["power", ...]}, ...]}

Put this directory first on ``sys.path`` (or PYTHONPATH) and ``import pynvml`` finds it.
"""

from __future__ import annotations

import json
import os
import threading
from types import SimpleNamespace
from typing import Any

NVML_CLOCK_SM = 1
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1
STANDIN = True

_lock = threading.Lock()
_state: dict[str, Any] = {"gpus": []}
_state_mtime: float | None = None
_initialized = 0
calls: dict[str, int] = {}


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class NVMLError_Uninitialized(NVMLError):
    def __str__(self) -> str:
        return "Uninitialized"


def set_state(state: dict[str, Any]) -> None:
    global _state, _state_mtime
    with _lock:
        _state = state
        _state_mtime = None


def _gpus() -> list[dict[str, Any]]:
    global _state, _state_mtime
    path = os.environ.get("NVML_STANDIN_STATE")
    if path:
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            mtime = None
        if mtime is not None and mtime != _state_mtime:
            with open(path, encoding="utf-8") as fh:
                _state = json.load(fh)
            _state_mtime = mtime
    return list(_state["gpus"])


def _count(name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


def _gpu(handle: int, reading: str) -> dict[str, Any]:
    if not _initialized:
        raise NVMLError_Uninitialized()
    gpu = _gpus()[handle]
    if reading in gpu.get("unsupported", ()):
        raise NVMLError_NotSupported()
    return gpu


def nvmlInit() -> None:
    global _initialized
    _count("nvmlInit")
    _initialized += 1


def nvmlShutdown() -> None:
    global _initialized
    _count("nvmlShutdown")
    _initialized = max(0, _initialized - 1)


def nvmlDeviceGetCount() -> int:
    if not _initialized:
        raise NVMLError_Uninitialized()
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetUUID(handle: int) -> str:
    return str(_gpu(handle, "uuid")["uuid"])


def nvmlDeviceGetName(handle: int) -> bytes:
    return str(_gpu(handle, "name")["name"]).encode()


def nvmlDeviceGetUtilizationRates(handle: int) -> Any:
    _count("nvmlDeviceGetUtilizationRates")
    gpu = _gpu(handle, "utilization")
    return SimpleNamespace(gpu=int(gpu["util"]), memory=int(gpu.get("mem_util", 0)))


def nvmlDeviceGetMemoryInfo(handle: int) -> Any:
    gpu = _gpu(handle, "memory")
    total, used = int(gpu["mem_total"]), int(gpu["mem_used"])
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(_gpu(handle, "power")["power_mw"])


def nvmlDeviceGetClockInfo(handle: int, clock_type: int) -> int:
    if clock_type != NVML_CLOCK_SM:
        raise NVMLError_NotSupported()
    return int(_gpu(handle, "clock")["sm_clock"])


def _procs(handle: int, kind: str) -> list[Any]:
    gpu = _gpu(handle, kind)
    out = []
    for pid, used in gpu.get(kind, []):
        out.append(SimpleNamespace(pid=int(pid), usedGpuMemory=NVML_VALUE_NOT_AVAILABLE if used is None else int(used)))
    return out


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[Any]:
    return _procs(handle, "compute")


def nvmlDeviceGetGraphicsRunningProcesses(handle: int) -> list[Any]:
    return _procs(handle, "graphics")

"""Where GPU readings come from: NVML (the driver's library, through ``pynvml``) or a
dcgm-exporter ``/metrics`` page.

Both give, per GPU, one ``GpuReading``: utilization, memory used and total, power, SM clock and
the holders of the GPU. NVML names the holders by pid (their owners are read from /proc later);
dcgm-exporter knows no pids, but with its Kubernetes mapping on, it labels each GPU's series with
the pod, namespace and container using it: the pod becomes the GPU's holder, with pid 0 and a
known owner.
A reading NVML does not support (or a metric the page lacks) is None, sent as null.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import urllib.request
from typing import Any

from .._log import OnceLogger

MIB = 1024 * 1024
# NVML's "not available" for a process's used memory (unsigned long long, all ones).
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1


@dataclasses.dataclass
class Holder:
    pid: int
    mem_used_bytes: int | None
    owner: dict[str, Any] | None = None  # known at the source (dcgm-exporter's pod labels)


@dataclasses.dataclass
class GpuReading:
    index: int
    uuid: str | None
    model: str | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_active: float | None = None  # DCGM profiling: fraction of time an SM had a warp resident
    holders: list[Holder] = dataclasses.field(default_factory=list)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Readings through an ``pynvml`` module (the real one, or a stand-in in tests)."""

    name = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self.nvml = nvml
        self.once = OnceLogger()
        nvml.nvmlInit()
        count = int(nvml.nvmlDeviceGetCount())
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.uuids = [self._call(f"uuid-{i}", nvml.nvmlDeviceGetUUID, h) for i, h in enumerate(self.handles)]
        self.models = [self._call(f"name-{i}", nvml.nvmlDeviceGetName, h) for i, h in enumerate(self.handles)]
        self.errors = 0

    def _call(self, key: str, fn: Any, *args: Any) -> Any:
        try:
            value = fn(*args)
        except Exception as exc:  # NVMLError_NotSupported, a GPU fallen off the bus, ...
            self.once.warning(f"nvml-{key}", "phantomhub node: NVML %s failed: %s", key, exc)
            return None
        return _text(value) if isinstance(value, bytes) else value

    @property
    def hostname(self) -> str | None:
        return None

    def read(self) -> list[GpuReading]:
        nvml = self.nvml
        out = []
        for i, handle in enumerate(self.handles):
            util = self._call("utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
            mem = self._call("memory", nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = self._call("power", nvml.nvmlDeviceGetPowerUsage, handle)
            clock = self._call("clock", nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, "NVML_CLOCK_SM", 1))
            out.append(
                GpuReading(
                    index=i,
                    uuid=self.uuids[i],
                    model=self.models[i],
                    util_pct=float(util.gpu) if util is not None else None,
                    mem_used_bytes=int(mem.used) if mem is not None else None,
                    mem_total_bytes=int(mem.total) if mem is not None else None,
                    power_w=power_mw / 1000.0 if power_mw is not None else None,
                    sm_clock_mhz=float(clock) if clock is not None else None,
                    holders=self._holders(handle),
                )
            )
        return out

    def _holders(self, handle: Any) -> list[Holder]:
        by_pid: dict[int, Holder] = {}
        for kind in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(self.nvml, kind, None)
            if fn is None:
                continue
            procs = self._call(kind, fn, handle) or []
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                mem = None if used is None or used >= NVML_VALUE_NOT_AVAILABLE else int(used)
                pid = int(proc.pid)
                held = by_pid.get(pid)
                if held is None:
                    by_pid[pid] = Holder(pid=pid, mem_used_bytes=mem)
                elif mem is not None and (held.mem_used_bytes is None or mem > held.mem_used_bytes):
                    held.mem_used_bytes = mem
        return sorted(by_pid.values(), key=lambda h: h.pid)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutting down: nothing to do about it
            self.nvml.nvmlShutdown()


# -- dcgm-exporter -----------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r'\\[\\"n]')


def _unescape(value: str) -> str:
    def one(match: re.Match[str]) -> str:
        return _ESCAPES[match.group(0)]

    return _ESCAPE.sub(one, value)


WANTED = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_PROF_SM_ACTIVE",
}


def parse_prometheus(text: str, wanted: set[str] | None = None) -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of each sample line of a Prometheus text exposition."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, label_text, value_text = match.groups()
        if wanted is not None and name not in wanted:
            continue
        labels: dict[str, str] = {}
        if label_text:
            for key, raw_value in _LABEL.findall(label_text):
                labels[key] = _unescape(str(raw_value))
        try:
            number = float(value_text)
        except ValueError:
            continue
        out.append((name, labels, number))
    return out


def readings_from_dcgm(text: str) -> tuple[list[GpuReading], str | None]:
    """The GPUs of a dcgm-exporter page, and the host it names (its ``Hostname`` label)."""
    gpus: dict[int, GpuReading] = {}
    free: dict[int, float] = {}
    reserved: dict[int, float] = {}
    hostname = None
    for name, labels, value in parse_prometheus(text, WANTED):
        if not labels.get("gpu", "").isdigit() or math.isnan(value):
            continue
        index = int(labels["gpu"])
        hostname = hostname or labels.get("Hostname")
        gpu = gpus.get(index)
        if gpu is None:
            gpu = gpus[index] = GpuReading(index=index, uuid=labels.get("UUID"), model=labels.get("modelName"))
        pod = labels.get("pod") or labels.get("exported_pod")
        if pod and not gpu.holders:
            # One holder per GPU: the server keys processes by (GPU, time, pid) and a page has no
            # pids (several pods on one GPU, under MIG, count as its first).
            namespace = labels.get("namespace") or labels.get("exported_namespace")
            owner: dict[str, Any] = {"kind": "k8s", "namespace": namespace, "pod": pod, "labels": {}}
            gpu.holders.append(Holder(pid=0, mem_used_bytes=None, owner=owner))
        if name == "DCGM_FI_DEV_GPU_UTIL":
            gpu.util_pct = value
        elif name == "DCGM_FI_DEV_FB_USED":
            gpu.mem_used_bytes = int(value * MIB)
        elif name == "DCGM_FI_DEV_FB_FREE":
            free[index] = value
        elif name == "DCGM_FI_DEV_FB_RESERVED":
            reserved[index] = value
        elif name == "DCGM_FI_DEV_POWER_USAGE":
            gpu.power_w = value
        elif name == "DCGM_FI_DEV_SM_CLOCK":
            gpu.sm_clock_mhz = value
        elif name == "DCGM_FI_PROF_SM_ACTIVE":
            gpu.sm_active = value
    for index, gpu in gpus.items():
        if gpu.mem_used_bytes is not None and index in free:
            # dcgm-exporter reports framebuffer used, free and reserved (MiB); the total is their sum.
            gpu.mem_total_bytes = gpu.mem_used_bytes + int((free[index] + reserved.get(index, 0.0)) * MIB)
        if gpu.holders:
            gpu.holders[0].mem_used_bytes = gpu.mem_used_bytes  # the pod holds the memory in use
    return [gpus[i] for i in sorted(gpus)], hostname


class DcgmSource:
    """Readings scraped from a dcgm-exporter ``/metrics`` URL once per interval."""

    name = "dcgm"

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--dcgm-url must be an http(s) URL, not {url!r}")
        self.url = url
        self.timeout_s = timeout_s
        self.hostname: str | None = None

    def read(self) -> list[GpuReading]:
        request = urllib.request.Request(self.url, headers={"Accept": "text/plain"})  # noqa: S310 - http(s) checked above
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
            text = response.read(16 << 20).decode("utf-8", "replace")
        readings, hostname = readings_from_dcgm(text)
        self.hostname = hostname or self.hostname
        return readings

    def close(self) -> None:
        pass

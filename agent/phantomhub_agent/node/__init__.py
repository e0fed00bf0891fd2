"""``phantomhub-agent node``: the node collector, a small daemon per GPU host.

Every interval (default 15 s) it reads each GPU through NVML or a dcgm-exporter page, names the
owner of every process holding one (a PhantomHub run, a Kubernetes pod, a Slurm job, else a Unix
user) and sends one ``POST /api/v1/nodes/samples`` with the training agent's delivery guarantees.
See docs/node-collector.md.
"""

from __future__ import annotations

from ._collector import Collector, NodeSender, payload_build
from ._owners import OwnerConfig, OwnerResolver
from ._sources import DcgmSource, GpuReading, Holder, NvmlSource, parse_prometheus, readings_from_dcgm

__all__ = [
    "Collector",
    "DcgmSource",
    "GpuReading",
    "Holder",
    "NodeSender",
    "NvmlSource",
    "OwnerConfig",
    "OwnerResolver",
    "parse_prometheus",
    "payload_build",
    "readings_from_dcgm",
]

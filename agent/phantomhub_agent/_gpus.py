"""Which GPUs this rank holds, named as the node collector names them: UUID and physical index.

Sent with the run's registration (``environment.gpus``, beside ``environment.host`` and
``environment.rank``), so the server can tell that a GPU a node reports belongs to this run
however the node reads it: a dcgm-exporter page lists no pids, and without this a GPU the run
holds would count a second time as "busy, uninstrumented".

torch numbers the GPUs it sees (``CUDA_VISIBLE_DEVICES`` may renumber them); the node reports
NVML's physical index and the GPU's UUID. The UUID comes from
``torch.cuda.get_device_properties(i).uuid`` where CUDA is in use, else from NVML (``pynvml``)
when installed; the physical index from ``CUDA_VISIBLE_DEVICES`` (a number at the device's
position) or from NVML. A rank without a GPU sends nothing. Never raises: what cannot be read
is left out.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ._system import physical_gpu_ids


def _uuid_text(value: Any) -> str | None:
    """NVML's form, ``GPU-<hex groups>``: torch's ``_CUuuid`` prints the bare groups."""
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    text = text.strip()
    if not text:
        return None
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _torch_uuid(index: int) -> str | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None  # never initialise CUDA here: the training loop decides when
        return _uuid_text(getattr(torch.cuda.get_device_properties(index), "uuid", None))
    except Exception:
        return None


def _nvml(module: Any = None) -> Any:
    """NVML initialised (``pynvml``, or the module given), or None where it cannot be."""
    try:
        if module is None:
            import pynvml

            module = pynvml
        module.nvmlInit()
        return module
    except Exception:
        return None


def _from_nvml(nvml: Any, physical: str | int) -> tuple[int | None, str | None]:
    """(index, uuid) of one device named by its physical index or its UUID."""
    index = physical if isinstance(physical, int) else None
    uuid = None if isinstance(physical, int) else _uuid_text(physical)
    if nvml is None:
        return index, uuid
    try:
        if isinstance(physical, int):
            handle = nvml.nvmlDeviceGetHandleByIndex(physical)
        else:
            handle = nvml.nvmlDeviceGetHandleByUUID(physical)
    except Exception:
        return index, uuid
    if uuid is None:
        with contextlib.suppress(Exception):
            uuid = _uuid_text(nvml.nvmlDeviceGetUUID(handle))
    if index is None:
        with contextlib.suppress(Exception):
            index = int(nvml.nvmlDeviceGetIndex(handle))
    return index, uuid


def rank_gpus(logical: Sequence[int], visible: str | None = None, *, nvml: Any = None) -> list[dict[str, Any]]:
    """``[{"index": physical index or None, "uuid": "GPU-..." or None}]`` of torch's devices
    ``logical``; a device neither can be named by is left out."""
    if not logical:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    physical = physical_gpu_ids(list(logical), visible)
    if len(physical) != len(logical):  # a logical index past CUDA_VISIBLE_DEVICES: unknown
        return []
    out: list[dict[str, Any]] = []
    handle, opened = None, False
    for idx, phys in zip(logical, physical):
        uuid = _torch_uuid(idx)
        need_nvml = uuid is None or not isinstance(phys, int)
        if need_nvml and not opened:
            handle, opened = _nvml(nvml), True
        index, nvml_uuid = _from_nvml(handle if need_nvml else None, phys)
        uuid = uuid or nvml_uuid
        if index is not None or uuid is not None:
            out.append({"index": index, "uuid": uuid})
    if handle is not None:
        with contextlib.suppress(Exception):
            handle.nvmlShutdown()  # NVML counts its inits: the sampler's own stays open
    return out

"""The node collector's request (POST /api/v1/nodes/samples), checked field by field.

Every refusal is a 400 naming the field (`gpus.util_pct[3]`, `owners[1].kind`), raised before
anything is written. Limits follow the rest of ingest (phantomhub/telemetry/bounds.py): the same
timestamp range, JSON documents (labels, owners) bounded in size and values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from phantomhub.errors import invalid
from phantomhub.telemetry.bounds import INT64_MAX, BoundsError, json_check
from phantomhub.telemetry.columns import EPOCH_NS_MAX, EPOCH_NS_MIN

MAX_GPU_INDEX = 255
MAX_ENTRIES = 20_000  # GPU or process entries in one request: 8 GPUs x 15 s batches of an hour and more
MAX_OWNERS = 2_000
MAX_OWNER_BYTES = 8 * 1024
MAX_LABELS_BYTES = 16 * 1024
MAX_INTERVAL_S = 3_600
MAX_COUNTERS = 32
COUNTER_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
OWNER_KINDS = {
    "run": {"project", "run_id", "server_run_id"},
    "k8s": {"namespace", "pod", "labels"},
    "slurm": {"job_id", "account", "partition", "user"},
    "user": {"user"},
}
NODE_FIELDS = {
    "hostname": 255,
    "provider": 64,
    "region": 64,
    "instance_type": 64,
    "resource_id": 255,
    "gpu_model": 128,
    "collector_version": 64,
}
GPU_COLUMNS = (
    "t_ns", "gpu_index", "gpu_uuid", "util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "sm_clock_mhz", "sm_active",
)  # fmt: skip
GPU_REQUIRED = ("t_ns", "gpu_index")
PROCESS_COLUMNS = ("t_ns", "gpu_index", "pid", "mem_used_bytes", "owner")
PROCESS_REQUIRED = ("t_ns", "gpu_index", "pid")


@dataclass(frozen=True)
class NodeBatch:
    node: dict[str, Any]  # hostname, provider, ..., labels, source, gpu_count
    interval_s: int
    gpus: dict[str, list[Any]]  # every GPU_COLUMNS name, None where unknown
    processes: dict[str, list[Any]]
    owners: list[dict[str, Any]]
    counters: dict[str, int] | None = None  # the collector's sender counters when it sent them


def _object(value: Any, field: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(field or "body", "must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        where = f"{field}.{unknown[0]}" if field else unknown[0]
        raise invalid(where, f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return value


def _text(value: Any, field: str, limit: int, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or len(value) > limit or (required and not value.strip()):
        raise invalid(field, f"must be a {'non-empty ' if required else ''}string of at most {limit} characters")
    return value


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(field, f"must be an integer in [{lo}, {hi}]")
    return value


def _json(value: Any, field: str, limit: int) -> None:
    try:
        json_check(value, max_bytes=limit)
    except BoundsError as exc:
        raise invalid(f"{field}.{exc.path}" if exc.path else field, exc.message) from None


def _node(value: Any) -> dict[str, Any]:
    body = _object(value, "node", {*NODE_FIELDS, "gpu_count", "labels", "source"})
    node: dict[str, Any] = {
        name: _text(body.get(name), f"node.{name}", limit, required=name == "hostname") for name, limit in NODE_FIELDS.items()
    }
    node["gpu_count"] = _int(body.get("gpu_count", 0), "node.gpu_count", 0, MAX_GPU_INDEX + 1)
    source = body.get("source", "nvml")
    if source not in ("nvml", "dcgm"):
        raise invalid("node.source", "must be 'nvml' or 'dcgm'")
    node["source"] = source
    labels = body.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise invalid("node.labels", "must be an object of strings")
    _json(labels, "node.labels", MAX_LABELS_BYTES)
    node["labels"] = labels
    return node


def _owner(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str) or value["kind"] not in OWNER_KINDS:
        raise invalid(f"{field}.kind", f"must be one of {', '.join(OWNER_KINDS)}")
    kind = value["kind"]
    body = _object(value, field, {"kind", *OWNER_KINDS[kind]})
    _json(body, field, MAX_OWNER_BYTES)
    owner: dict[str, Any] = {"kind": kind}
    for name in sorted(OWNER_KINDS[kind]):
        item = body.get(name)
        if name == "labels":
            if not isinstance(item or {}, dict) or not all(isinstance(v, str) for v in (item or {}).values()):
                raise invalid(f"{field}.labels", "must be an object of strings")
            owner["labels"] = item or {}
        elif item is not None:
            owner[name] = _text(item, f"{field}.{name}", 255)
    if kind == "run" and not (owner.get("project") and owner.get("run_id")):
        raise invalid(f"{field}.run_id", "a run owner names its project and run_id")
    return owner


def _column(columns: dict[str, Any], name: str, field: str, n: int | None) -> list[Any]:
    values = columns.get(name)
    if not isinstance(values, list):
        raise invalid(f"{field}.{name}", "must be a list")
    if n is not None and len(values) != n:
        raise invalid(f"{field}.{name}", f"has {len(values)} entries where {field}.t_ns has {n}")
    if len(values) > MAX_ENTRIES:
        raise invalid(f"{field}.{name}", f"holds more than {MAX_ENTRIES} entries (send smaller batches)")
    return values


def _ints(values: list[Any], field: str, lo: int, hi: int, *, nullable: bool) -> list[int | None]:
    for i, v in enumerate(values):
        if v is None and nullable:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise invalid(f"{field}[{i}]", f"must be an integer in [{lo}, {hi}]{' or null' if nullable else ''}")
    return values


def _floats(values: list[Any], field: str, hi: float) -> list[float | None]:
    out: list[float | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= hi:
            raise invalid(f"{field}[{i}]", f"must be a number in [0, {hi:g}] or null")
        out.append(float(v))
    return out


def _columns(value: Any, field: str, names: tuple[str, ...], required: tuple[str, ...]) -> dict[str, list[Any]]:
    body = _object(value, field, set(names))
    for name in required:
        if name not in body:
            raise invalid(f"{field}.{name}", "this field is required")
    n = len(_column(body, "t_ns", field, None))
    return {name: (_column(body, name, field, n) if name in body else [None] * n) for name in names}


def _gpus(value: Any, gpu_count: int) -> dict[str, list[Any]]:
    cols = _columns(value, "gpus", GPU_COLUMNS, GPU_REQUIRED)
    _ints(cols["t_ns"], "gpus.t_ns", EPOCH_NS_MIN, EPOCH_NS_MAX - 1, nullable=False)
    top = max(gpu_count - 1, 0) if gpu_count else MAX_GPU_INDEX
    _ints(cols["gpu_index"], "gpus.gpu_index", 0, top, nullable=False)
    for i, v in enumerate(cols["gpu_uuid"]):
        if v is not None and (not isinstance(v, str) or len(v) > 96):
            raise invalid(f"gpus.gpu_uuid[{i}]", "must be a string of at most 96 characters or null")
    for name in ("mem_used_bytes", "mem_total_bytes"):
        _ints(cols[name], f"gpus.{name}", 0, INT64_MAX, nullable=True)
    cols["util_pct"] = _floats(cols["util_pct"], "gpus.util_pct", 100.0)
    cols["power_w"] = _floats(cols["power_w"], "gpus.power_w", 100_000.0)
    cols["sm_clock_mhz"] = _floats(cols["sm_clock_mhz"], "gpus.sm_clock_mhz", 100_000.0)
    cols["sm_active"] = _floats(cols["sm_active"], "gpus.sm_active", 1.0)  # DCGM_FI_PROF_SM_ACTIVE, a ratio
    seen: set[tuple[int, int]] = set()
    for i, key in enumerate(zip(cols["gpu_index"], cols["t_ns"], strict=True)):
        if key in seen:
            raise invalid(f"gpus.t_ns[{i}]", "the same GPU and time appear twice in the batch")
        seen.add(key)
    return cols


def _processes(value: Any, owners: int, gpu_count: int) -> dict[str, list[Any]]:
    cols = _columns(value, "processes", PROCESS_COLUMNS, PROCESS_REQUIRED)
    _ints(cols["t_ns"], "processes.t_ns", EPOCH_NS_MIN, EPOCH_NS_MAX - 1, nullable=False)
    top = max(gpu_count - 1, 0) if gpu_count else MAX_GPU_INDEX
    _ints(cols["gpu_index"], "processes.gpu_index", 0, top, nullable=False)
    _ints(cols["pid"], "processes.pid", 0, 2**31 - 1, nullable=False)
    _ints(cols["mem_used_bytes"], "processes.mem_used_bytes", 0, INT64_MAX, nullable=True)
    if owners == 0:
        for i, v in enumerate(cols["owner"]):
            if v is not None:
                raise invalid(f"processes.owner[{i}]", "names an owner but owners is empty")
    else:
        _ints(cols["owner"], "processes.owner", 0, owners - 1, nullable=True)
    seen: set[tuple[int, int, int]] = set()
    for i, key in enumerate(zip(cols["gpu_index"], cols["t_ns"], cols["pid"], strict=True)):
        if key in seen:
            raise invalid(f"processes.pid[{i}]", "the same GPU, time and pid appear twice in the batch")
        seen.add(key)
    return cols


def _counters(value: Any) -> dict[str, int] | None:
    """The collector's cumulative sender counters: short snake_case names, non-negative int64."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_COUNTERS:
        raise invalid("counters", f"must be an object of at most {MAX_COUNTERS} counters")
    for name, count in value.items():
        if not COUNTER_NAME.fullmatch(name):
            raise invalid(f"counters.{name[:64]}", "a counter name is lowercase letters, digits and _ (at most 64)")
        _int(count, f"counters.{name}", 0, INT64_MAX)
    return dict(value)


def node_batch_parse(body: Any) -> NodeBatch:
    body = _object(body, "", {"node", "interval_s", "gpus", "processes", "owners", "counters"})
    for name in ("node", "gpus"):
        if name not in body:
            raise invalid(name, "this field is required")
    node = _node(body["node"])
    interval_s = _int(body.get("interval_s", 15), "interval_s", 1, MAX_INTERVAL_S)
    raw_owners = body.get("owners", [])
    if not isinstance(raw_owners, list) or len(raw_owners) > MAX_OWNERS:
        raise invalid("owners", f"must be a list of at most {MAX_OWNERS} owners")
    owners = [_owner(o, f"owners[{i}]") for i, o in enumerate(raw_owners)]
    gpus = _gpus(body["gpus"], node["gpu_count"])
    processes = _processes(body.get("processes", {"t_ns": [], "gpu_index": [], "pid": []}), len(owners), node["gpu_count"])
    counters = _counters(body.get("counters"))
    return NodeBatch(node=node, interval_s=interval_s, gpus=gpus, processes=processes, owners=owners, counters=counters)

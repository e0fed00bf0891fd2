"""Inputs of the waste model: run configuration, per-rank step columns, system samples.

Plain frozen dataclasses over numpy arrays, so the model can be fed from the database, from a
JSON batch or from a test without any framework in between.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Every billed GPU-second lands in exactly one of these. Order is the order of every table.
CATEGORIES: tuple[str, ...] = (
    "useful_compute",
    "compute_inefficiency",
    "data_stall",
    "comm_exposed",
    "host_overhead",
    "idle",
)
# The five categories a step's time is split into; idle is whatever no step covers.
STEP_CATEGORIES: tuple[str, ...] = CATEGORIES[:5]

DEFAULT_TARGET_MFU = 0.5
# Version of the model's rules and state: part of every config fingerprint, so a state or result
# made by another version never matches and the run is analysed afresh. Bump it whenever the same
# rows and config would give a different analysis or accumulator state.
# 2: FLOPs credited to kept step time, chart windows spread steps and are at least a step wide.
# 3: recoverable dollars from evidence (evidence.py); 0 FLOPs is "not counted"; one world size.
# 4: jobs: rework steps and restarts as idle labels (rework, restart), the lost work priced; the
#    rank table carries a sixth piece column (rework) and rework sums.
MODEL_VERSION = 4

# Caps an organization may set on the share of each category called recoverable
# (docs/waste-model.md). The estimate itself comes from evidence (evidence.py); a cap only cuts it.
# useful_compute is the work the model needs: never recoverable.
DEFAULT_RECOVERABILITY: Mapping[str, float] = MappingProxyType(
    {
        "useful_compute": 0.0,
        "compute_inefficiency": 1.0,
        "data_stall": 1.0,
        "comm_exposed": 1.0,
        "host_overhead": 1.0,
        "idle": 1.0,
    }
)

REQUIRED_COLUMNS: tuple[str, ...] = ("step", "t_start_ns", "dur_ns")
STAGE_COLUMNS: tuple[str, ...] = (
    "data_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "comm_ns",
)
OPTIONAL_INT_COLUMNS: tuple[str, ...] = (
    *STAGE_COLUMNS,
    "tokens",
    "samples",
    "mem_allocated",
    "mem_reserved",
    "mem_peak",
    "alloc_retries",
)
OPTIONAL_COLUMNS: tuple[str, ...] = (*OPTIONAL_INT_COLUMNS, "flops")
ALL_COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
_NO_COLUMNS = dict.fromkeys(ALL_COLUMNS)


def _as_int64(name: str, values: Any) -> IntArray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D column, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: non-finite values in an integer column")
        arr = np.rint(arr)
    return np.ascontiguousarray(arr, dtype=np.int64)


def _as_float64(name: str, values: Any) -> FloatArray:
    arr = np.ascontiguousarray(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D column, got shape {arr.shape}")
    return arr


@dataclass(frozen=True, eq=False)
class StepColumns:
    """One rank's step rows, columnar (docs/api.md, "POST /api/v1/runs/{id}/steps"). Optional
    columns may be None (unmeasured).

    Units: ``*_ns`` are nanoseconds, ``mem_*`` bytes, ``flops`` model FLOPs of the step on this rank
    (NaN = not counted for that step). ``host`` names the node, for straggler and contention reports.
    """

    rank: int
    host: str
    step: IntArray
    t_start_ns: IntArray
    dur_ns: IntArray
    data_ns: IntArray | None = None
    forward_ns: IntArray | None = None
    backward_ns: IntArray | None = None
    optimizer_ns: IntArray | None = None
    comm_ns: IntArray | None = None
    flops: FloatArray | None = None
    tokens: IntArray | None = None
    samples: IntArray | None = None
    mem_allocated: IntArray | None = None
    mem_reserved: IntArray | None = None
    mem_peak: IntArray | None = None
    alloc_retries: IntArray | None = None

    def __post_init__(self) -> None:
        n = None
        for name in ALL_COLUMNS:
            raw = getattr(self, name)
            if raw is None:
                continue
            arr = _as_float64(name, raw) if name == "flops" else _as_int64(name, raw)
            object.__setattr__(self, name, arr)
            if n is None:
                n = len(arr)
            elif len(arr) != n:
                raise ValueError(f"{name}: {len(arr)} rows, expected {n} like the other columns")

    @classmethod
    def from_columns(cls, *, rank: int, host: str, columns: Mapping[str, Any]) -> StepColumns:
        """Build from a mapping of column name -> sequence (the wire's columnar JSON)."""
        unknown = set(columns) - set(ALL_COLUMNS)
        if unknown:
            raise ValueError(f"unknown step column(s): {sorted(unknown)}")
        missing = [c for c in REQUIRED_COLUMNS if columns.get(c) is None]
        if missing:
            raise ValueError(f"missing required step column(s): {missing}")
        return cls(rank=rank, host=host, **{k: v for k, v in columns.items() if v is not None})

    @classmethod
    def trusted(cls, *, rank: int, host: str, columns: Mapping[str, Any], present: tuple[str, ...] | None = None) -> StepColumns:
        """From 1-D int64 (flops: float64) arrays of equal length, without checking them again
        (columns read back from the database, already checked at ingest). ``present``: the
        optional columns among them, in OPTIONAL_COLUMNS order, when the caller knows them."""
        cols = object.__new__(cls)
        fields = dict(_NO_COLUMNS)
        fields.update(columns)
        fields["rank"], fields["host"] = rank, host
        if present is not None:
            fields["_present"] = present
        cols.__dict__.update(fields)  # frozen: __setattr__ refuses, the instance's dict does not
        return cols

    def __len__(self) -> int:
        return len(self.step)

    def present(self) -> tuple[str, ...]:
        """Names of the optional columns this batch carries."""
        known: tuple[str, ...] | None = self.__dict__.get("_present")
        return known if known is not None else tuple(c for c in OPTIONAL_COLUMNS if getattr(self, c) is not None)

    def take(self, index: npt.NDArray[Any]) -> StepColumns:
        """Rows selected by an index or boolean mask, same rank and host."""
        cols: dict[str, Any] = {c: getattr(self, c) for c in ALL_COLUMNS}
        picked: dict[str, Any] = {c: (None if v is None else v[index]) for c, v in cols.items()}
        return StepColumns(rank=self.rank, host=self.host, **picked)


@dataclass(frozen=True, eq=False)
class SystemSamples:
    """About-once-a-second samples from one host (and one GPU when ``rank`` is set).

    Percentages are 0-100: ``gpu_util_pct`` from NVML, ``cpu_other_pct`` the node's CPU used by
    processes other than the trainers, ``cpu_steal_pct`` hypervisor steal from /proc/stat.
    """

    host: str
    t_ns: IntArray
    gpu_util_pct: FloatArray | None = None
    cpu_other_pct: FloatArray | None = None
    cpu_steal_pct: FloatArray | None = None
    rank: int | None = None

    def __post_init__(self) -> None:
        t = _as_int64("t_ns", self.t_ns)
        object.__setattr__(self, "t_ns", t)
        for name in ("gpu_util_pct", "cpu_other_pct", "cpu_steal_pct"):
            raw = getattr(self, name)
            if raw is None:
                continue
            arr = _as_float64(name, raw)
            if len(arr) != len(t):
                raise ValueError(f"{name}: {len(arr)} rows, expected {len(t)}")
            object.__setattr__(self, name, arr)


@dataclass(frozen=True)
class PriceSegment:
    """Price in force over [start_ns, end_ns), per GPU-hour. Segments must not overlap."""

    start_ns: int
    end_ns: int
    usd_per_gpu_hour: Decimal | Fraction | float | int

    def price(self) -> Fraction:
        """The price as an exact fraction (a float is read as its shortest decimal repr)."""
        value = self.usd_per_gpu_hour
        if isinstance(value, float):
            return Fraction(repr(value))
        return Fraction(value)


@dataclass(frozen=True)
class Phase:
    """A named stretch of the run with no training steps by design (eval, checkpoint, ...)."""

    name: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RunConfig:
    """What must stay fixed while steps are accumulated (the incremental state depends on it).

    ``gpu_count`` GPUs are billed from ``allocation_start_ns``; ``world_size`` ranks share them, so
    one rank drives ``gpu_count / world_size`` GPUs. ``peak_flops_per_gpu`` is the dense peak at the
    run's dtype, or None when the GPU model is unknown (then MFU is unknown and all compute counts
    as useful_compute, see docs/waste-model.md).
    """

    gpu_count: int
    world_size: int
    allocation_start_ns: int
    price_segments: tuple[PriceSegment, ...] = ()
    phases: tuple[Phase, ...] = ()
    peak_flops_per_gpu: float | None = None
    target_mfu: float = DEFAULT_TARGET_MFU
    gpu_memory_bytes: int | None = None
    dtype: str | None = None
    # A job's attempts (docs/waste-model.md, "Jobs"): step rows numbered at or below
    # ``rework_through_step`` redo work an earlier attempt already computed (idle label
    # ``rework``, no FLOPs credited); start-up before the first step and tear-down after the last
    # are the cost of a restart (idle label ``restart``) when there is an earlier attempt, or a
    # later one after a failure.
    rework_through_step: int | None = None
    restart_before_first_step: bool = False
    restart_after_last_step: bool = False

    def __post_init__(self) -> None:
        if self.gpu_count <= 0:
            raise ValueError("gpu_count must be positive")
        if self.world_size <= 0:
            raise ValueError("world_size must be positive")
        if not 0.0 < self.target_mfu <= 1.0:
            raise ValueError("target_mfu must be in (0, 1]")
        if self.peak_flops_per_gpu is not None and not self.peak_flops_per_gpu > 0:
            raise ValueError("peak_flops_per_gpu must be positive or None")
        object.__setattr__(self, "price_segments", tuple(self.price_segments))
        object.__setattr__(self, "phases", tuple(self.phases))
        for seg in self.price_segments:
            if seg.end_ns <= seg.start_ns:
                raise ValueError(f"price segment ends before it starts: {seg}")
            if seg.price() < 0:
                raise ValueError(f"negative price: {seg}")
        for ph in self.phases:
            if ph.end_ns < ph.start_ns:
                raise ValueError(f"phase ends before it starts: {ph}")

    @property
    def gpus_per_rank(self) -> float:
        """GPUs one rank drives: its FLOPs are measured against this many devices' peak."""
        return self.gpu_count / self.world_size

    def fingerprint(self) -> dict[str, Any]:
        """JSON form; two configs with equal fingerprints give equal analyses of equal steps."""
        return {
            "model_version": MODEL_VERSION,
            "gpu_count": self.gpu_count,
            "world_size": self.world_size,
            "allocation_start_ns": self.allocation_start_ns,
            "price_segments": [[s.start_ns, s.end_ns, str(s.price())] for s in self.price_segments],
            "phases": [[p.name, p.start_ns, p.end_ns] for p in self.phases],
            "peak_flops_per_gpu": self.peak_flops_per_gpu,
            "target_mfu": self.target_mfu,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "dtype": self.dtype,
            "rework_through_step": self.rework_through_step,
            "restart_before_first_step": self.restart_before_first_step,
            "restart_after_last_step": self.restart_after_last_step,
        }

    @classmethod
    def from_fingerprint(cls, data: Mapping[str, Any]) -> RunConfig:
        """The config back from ``fingerprint()`` (the model version is not part of the config)."""
        return cls(
            gpu_count=int(data["gpu_count"]),
            world_size=int(data["world_size"]),
            allocation_start_ns=int(data["allocation_start_ns"]),
            price_segments=tuple(PriceSegment(int(a), int(b), Fraction(p)) for a, b, p in data["price_segments"]),
            phases=tuple(Phase(str(n), int(a), int(b)) for n, a, b in data["phases"]),
            peak_flops_per_gpu=data["peak_flops_per_gpu"],
            target_mfu=float(data["target_mfu"]),
            gpu_memory_bytes=data["gpu_memory_bytes"],
            dtype=data["dtype"],
            rework_through_step=data.get("rework_through_step"),
            restart_before_first_step=bool(data.get("restart_before_first_step", False)),
            restart_after_last_step=bool(data.get("restart_after_last_step", False)),
        )


@dataclass(frozen=True, eq=False)
class RunInputs:
    """Everything ``analyze`` needs for one run.

    ``end_ns`` is the finish time, or the last sign of life of a live run. ``oom_count`` is passed
    in because an OOM usually kills the process before a step row can say so.
    """

    config: RunConfig
    end_ns: int
    steps: Sequence[StepColumns] = ()
    samples: Sequence[SystemSamples] = ()
    recoverability: Mapping[str, float] = field(default_factory=lambda: DEFAULT_RECOVERABILITY)
    oom_count: int = 0
    refs: Any = None  # evidence.References: peer and project runs (None: none)


def world_size_for(declared: int, ranks_seen: int, gpu_count: int) -> tuple[int, tuple[str, ...]]:
    """One scaling for billing and FLOPs: more ranks reporting than ``world_size`` says means the
    declared size is wrong, so the ranks seen count (each drives gpu_count / ranks GPUs)."""
    notes: list[str] = []
    world = max(declared, ranks_seen)
    if ranks_seen > declared:
        notes.append(
            f"{ranks_seen} ranks reported steps but the run declared world_size {declared}: taken as {ranks_seen}, "
            f"so each rank drives {gpu_count / ranks_seen:g} GPU(s) for billing and MFU alike"
        )
    return world, tuple(notes)


def recoverability_check(factors: Mapping[str, float]) -> dict[str, float]:
    """Defaults overridden by ``factors``; every factor must be within [0, 1]."""
    unknown = set(factors) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown recoverability categories: {sorted(unknown)}")
    merged = {**DEFAULT_RECOVERABILITY, **factors}
    for name, value in merged.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"recoverability[{name}] must be within [0, 1], got {value}")
    return merged

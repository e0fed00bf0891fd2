"""The waste model's output: frozen dataclasses with a ``to_json`` for storage and the API."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Scalar = float | int | str | bool | None


@dataclass(frozen=True)
class Explained:
    """Where a figure comes from: the formula as text and its inputs with their values."""

    value: Scalar
    unit: str
    formula: str
    inputs: Mapping[str, Scalar]


@dataclass(frozen=True)
class CategoryFigure:
    category: str
    gpu_seconds: float
    usd_cents: int  # integer cents; all categories add up to the run's cost_cents
    share: float  # of billed GPU-seconds
    recoverability: float
    recoverable_usd: float  # usd_cents / 100 x recoverability

    @property
    def usd(self) -> float:
        return self.usd_cents / 100


@dataclass(frozen=True)
class IdleFigure:
    """Part of idle by cause: startup, gap, teardown, phase:<name>, or no_steps."""

    label: str
    gpu_seconds: float
    usd_cents: int  # all labels add up to the idle category's usd_cents


@dataclass(frozen=True)
class RankFigure:
    rank: int
    host: str
    steps: int
    gpu_seconds: Mapping[str, float]  # per category, for the GPUs this rank stands for
    usd: Mapping[str, float]  # per category, exact share (not cent-rounded)
    step_ns_mean: float | None
    compute_ns_mean: float | None
    data_ns_mean: float | None
    comm_ns_mean: float | None
    host_ns_mean: float | None
    mfu_step_time: float | None
    tokens: int
    flops: float
    mem_peak_bytes: int | None
    slow_step_share: float | None  # share of aligned steps it arrived >= 5% after the median
    caused_wait_gpu_seconds: float  # others' comm wait attributed to this rank


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    aligned_steps: int
    slow_step_share: float
    blamed_steps: int  # straggling steps in which it arrived last
    excess_ns_mean: float  # its arrival minus the median arrival, mean over blamed steps
    compute_ns_mean: float | None
    median_rank_compute_ns_mean: float | None
    data_ns_mean: float | None
    median_rank_data_ns_mean: float | None
    caused_wait_gpu_seconds: float
    caused_wait_usd: float


@dataclass(frozen=True)
class MemoryDiagnostics:
    capacity_bytes: int | None
    peak_bytes_max: int | None
    peak_rank: int | None
    peak_fraction_of_capacity: float | None
    headroom_bytes: int | None
    reserved_bytes_max: int | None
    allocated_bytes_max: int | None
    fragmentation_mean: float | None  # mean over steps of 1 - allocated/reserved
    alloc_retries_total: int | None
    alloc_retries_per_1k_steps: float | None
    oom_count: int


@dataclass(frozen=True)
class HostFigure:
    host: str
    ranks: tuple[int, ...]
    samples: int
    cpu_other_pct_mean: float | None
    cpu_other_pct_p95: float | None
    cpu_steal_pct_mean: float | None
    cpu_steal_pct_p95: float | None
    gpu_util_pct_mean: float | None
    host_overhead_share: float | None  # host_overhead / step time of this host's ranks
    data_stall_share: float | None
    contended: bool


@dataclass(frozen=True)
class HostDiagnostics:
    hosts: tuple[HostFigure, ...]
    gpu_util_pct_mean: float | None
    host_overhead_share: float | None


@dataclass(frozen=True)
class WindowSeries:
    """Columnar chart data; ``None`` where a window had nothing to measure."""

    width_ns: int
    t_start_ns: tuple[int, ...]
    steps: tuple[int, ...]
    step_ms: tuple[float | None, ...]
    data_ms: tuple[float | None, ...]
    forward_ms: tuple[float | None, ...]
    backward_ms: tuple[float | None, ...]
    optimizer_ms: tuple[float | None, ...]
    comm_ms: tuple[float | None, ...]
    host_ms: tuple[float | None, ...]
    tokens_per_s: tuple[float | None, ...]
    samples_per_s: tuple[float | None, ...]
    mfu: tuple[float | None, ...]
    mem_allocated_bytes: tuple[float | None, ...]
    mem_reserved_bytes: tuple[float | None, ...]
    mem_peak_bytes: tuple[float | None, ...]
    gpu_util_pct: tuple[float | None, ...]
    alloc_retries: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.t_start_ns)


@dataclass(frozen=True)
class Analysis:
    allocation_start_ns: int
    end_ns: int
    gpu_count: int
    world_size: int
    ranks_reporting: int
    steps: int
    billed_gpu_seconds: float
    cost_cents: int
    unpriced_gpu_seconds: float
    categories: tuple[CategoryFigure, ...]
    idle: tuple[IdleFigure, ...]
    waste_cents: int  # everything but useful_compute
    recoverable_usd: float
    recoverability: Mapping[str, float]
    target_mfu: float
    dtype: str | None
    peak_flops_per_gpu: float | None
    peak_known: bool
    flops_known: bool
    achieved_flops_per_gpu: float | None
    mfu: float | None  # over billed time
    mfu_step_time: float | None  # over time inside steps
    mfu_compute: float | None  # over compute time only
    tokens_per_s: float | None
    samples_per_s: float | None
    run_hours: float
    usd_per_month_at_run_rate: float | None
    ranks: tuple[RankFigure, ...]
    stragglers: tuple[Straggler, ...]
    memory: MemoryDiagnostics
    host: HostDiagnostics
    windows: WindowSeries
    explain: Mapping[str, Explained]
    warnings: tuple[str, ...]

    @property
    def cost_usd(self) -> float:
        return self.cost_cents / 100

    def category(self, name: str) -> CategoryFigure:
        for fig in self.categories:
            if fig.category == name:
                return fig
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; tuples become lists, mappings dicts."""
        out = to_jsonable(self)
        assert isinstance(out, dict)
        out["cost_usd"] = self.cost_usd
        return out


def to_jsonable(value: Any) -> Any:
    """Dataclasses, mappings and tuples as plain JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value

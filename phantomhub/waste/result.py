"""The waste model's output: frozen dataclasses with a ``to_json`` for storage and the API."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import orjson

from phantomhub.waste.evidence import CategoryEvidence, RunProfile

Scalar = float | int | str | bool | None

# Units of explain inputs, read from how their names end (longest suffix first); names that end
# otherwise need an entry in ``input_units``.
_UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_usd_per_gpu_hour", "USD/GPU-h"),
    ("_usd_per_gpu_ns", "USD/GPU-ns"),
    ("_gpu_seconds", "GPU-s"),
    ("_gpu_hours", "GPU-h"),
    ("_flops_per_gpu", "FLOP/s"),
    ("_per_1k_steps", "per 1k steps"),
    ("_rank_ns", "rank-ns"),
    ("_seconds", "s"),
    ("_hours", "h"),
    ("_bytes", "bytes"),
    ("_cents", "cents"),
    ("_usd", "USD"),
    ("_pct", "%"),
    ("_ns", "ns"),
    ("_share", "ratio"),
    ("_mfu", "ratio"),
    ("_count", "count"),
    ("_steps", "count"),
    ("_rows", "count"),
    ("_samples", "count"),
    ("_rank", "rank"),
    ("_per_month", "h/month"),
)
_UNIT_NAMES: Mapping[str, str] = {
    "gpu_count": "count",
    "world_size": "count",
    "ranks_reporting": "count",
    "recoverability": "ratio",
    "target_mfu": "ratio",
    "dtype": "",
    "gpus_per_rank": "GPUs",
    "flops": "FLOP",
    "flops_reported": "FLOP",
    "tokens": "count",
    "samples": "count",
    "mfu": "ratio",
    "fragmentation": "ratio",
}


_AGGREGATES: tuple[str, ...] = ("_max", "_mean", "_min", "_sum", "_total")


@cache  # a pure function of a name, called for every explain input of every pass
def unit_of(name: str) -> str | None:
    """The unit an explain input's name implies (``peak_bytes_max`` -> bytes), or None."""
    if name in _UNIT_NAMES:
        return _UNIT_NAMES[name]
    for suffix, unit in _UNIT_SUFFIXES:
        if name.endswith(suffix) or name == suffix[1:]:
            return unit
    for agg in _AGGREGATES:
        if name.endswith(agg):
            return unit_of(name[: -len(agg)])
    return None


@dataclass(frozen=True)
class Explained:
    """Where a figure comes from: the formula as text, its inputs with their values and units.

    ``input_units`` is filled from the input names (``unit_of``); give the units of inputs whose
    names imply none (those get "", which the tests forbid except for text such as a dtype).
    """

    value: Scalar
    unit: str
    formula: str
    inputs: Mapping[str, Scalar]
    input_units: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        units = dict(self.input_units)
        for name in self.inputs:
            if name not in units:
                units[name] = unit_of(name) or ""
        object.__setattr__(self, "input_units", units)


@dataclass(frozen=True)
class CategoryFigure:
    category: str
    gpu_seconds: float
    usd_cents: int  # integer cents; all categories add up to the run's cost_cents
    share: float  # of billed GPU-seconds
    cap: float  # the organization's cap on the share of the category called recoverable
    recoverable_cents: int  # evidence-based counterfactual (phantomhub/waste/evidence.py)
    recoverable_low_cents: int
    recoverable_high_cents: int
    evidence: CategoryEvidence

    @property
    def recoverable_usd(self) -> float:
        return self.recoverable_cents / 100

    @property
    def usd(self) -> float:
        return self.usd_cents / 100


@dataclass(frozen=True)
class IdleFigure:
    """Part of idle by cause: startup, gap, teardown, phase:<name>, or no_steps."""

    label: str
    gpu_seconds: float
    usd_cents: int  # all labels add up to the idle category's usd_cents
    recoverable_cents: int = 0  # all labels add up to idle's recoverable before its cap
    evidence: CategoryEvidence | None = None


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
    """Columnar chart data; ``None`` where a window had nothing to measure.

    ``steps`` are step-equivalents (each step adds the share of its span inside the window, so
    0 means no step ran); ``step_starts`` counts the steps that started in it.
    """

    width_ns: int
    t_start_ns: tuple[int, ...]
    steps: tuple[float, ...]
    step_starts: tuple[int, ...]
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
    recoverable_usd: float  # Σ categories' evidence-based recoverable cents / 100
    recoverable_low_usd: float
    recoverable_high_usd: float
    recoverability: Mapping[str, float]  # the caps per category
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
    profile: RunProfile | None = None  # step signature and per-step figures, for peer runs
    # Rows the server refused or left out: non_rising_start (start not after the rank's previous
    # row), reused_step (a step number already stored with another start, e.g. after a restart).
    dropped_rows: Mapping[str, int] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float:
        return self.cost_cents / 100

    def category(self, name: str) -> CategoryFigure:
        for fig in self.categories:
            if fig.category == name:
                return fig
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; tuples become lists, mappings dicts. Through orjson, which walks
        dataclasses in C: a 1,024-rank analysis has tens of thousands of values."""
        out = orjson.loads(orjson.dumps(self, default=_plain, option=orjson.OPT_NON_STR_KEYS))
        assert isinstance(out, dict)
        out["cost_usd"] = self.cost_usd
        for fig, raw in zip(self.categories, out["categories"], strict=True):
            raw["recoverable_usd"] = fig.recoverable_usd
            raw["recoverable_low_usd"] = fig.recoverable_low_cents / 100
            raw["recoverable_high_usd"] = fig.recoverable_high_cents / 100
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):  # MappingProxyType and other read-only mappings
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def to_jsonable(value: Any) -> Any:
    """Dataclasses, mappings and tuples as plain JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value

"""The waste model's output: frozen dataclasses with a ``to_json`` for storage and the API."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import orjson

from phantomhub.waste.core.evidence import CategoryEvidence, RunProfile

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
    recoverable_cents: int  # evidence-based counterfactual (phantomhub/waste/core/evidence.py)
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
class LostCause:
    """One cause of a job's lost work in this attempt (docs/waste-model.md, "Jobs"): ``rework``
    (label rework), ``restart`` (label restart) or ``checkpoint`` (phase:checkpoint and
    phase:restore). Its cents are the sum of its labels' cents in idle's largest-remainder split,
    so causes and idle add up exactly."""

    cause: str
    labels: tuple[str, ...]
    gpu_seconds: float
    usd_cents: int

    @property
    def usd(self) -> float:
        return self.usd_cents / 100


@dataclass(frozen=True)
class LostWork:
    """The attempt's lost work by cause (rework, restart, checkpoint) and in total; part of idle."""

    causes: tuple[LostCause, ...]
    gpu_seconds: float
    usd_cents: int
    # The restart cause's two sides, {"before": ..., "after": ...}: before the first step (this
    # attempt restarting) and after the last (this attempt failing). GPU-seconds, and cents that
    # add up to the restart cause's (largest remainder).
    restart_gpu_seconds: Mapping[str, float] = field(default_factory=dict)
    restart_cents: Mapping[str, int] = field(default_factory=dict)

    @property
    def usd(self) -> float:
        return self.usd_cents / 100

    def cause(self, name: str) -> LostCause:
        for c in self.causes:
            if c.cause == name:
                return c
        raise KeyError(name)


NO_LOST = LostWork(
    causes=(
        LostCause("rework", ("rework",), 0.0, 0),
        LostCause("restart", ("restart",), 0.0, 0),
        LostCause("checkpoint", ("phase:checkpoint", "phase:restore"), 0.0, 0),
    ),
    gpu_seconds=0.0,
    usd_cents=0,
)


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
    # A job's lost work on this rank (rework, restart, checkpoint): GPU-seconds and exact dollars.
    lost_gpu_seconds: Mapping[str, float] = field(default_factory=dict)
    lost_usd: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    aligned_steps: int
    slow_step_share: float
    blamed_steps: int  # straggling steps in which it arrived last
    excess_ns_mean: float  # its arrival minus the median arrival, mean over blamed steps
    compute_ns_mean: float | None
    median_rank_compute_ns_mean: float | None  # the other ranks' median
    data_ns_mean: float | None
    median_rank_data_ns_mean: float | None  # the other ranks' median
    caused_wait_gpu_seconds: float
    caused_wait_usd: float
    # Its own time ahead of the other ranks: per step, what it spends beyond the other ranks'
    # median on data, compute and host overhead (each part counted where it is larger), over its
    # live steps; the part of the fix's saving that lands on the slow rank itself.
    lead_ns_mean: float = 0.0
    own_excess_gpu_seconds: float = 0.0
    own_excess_usd: dict[str, float] = field(default_factory=dict)  # category -> USD

    @property
    def saving_usd(self) -> float:
        """What removing its slowness saves the job: the others' wait and its own excess."""
        return self.caused_wait_usd + sum(self.own_excess_usd.values())


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


# The chart series of WindowSeries, in their JSON order; these hold whole counts (ints in JSON).
WINDOW_SERIES: tuple[str, ...] = (
    "t_start_ns", "steps", "step_starts", "step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms",
    "host_ms", "tokens_per_s", "samples_per_s", "mfu", "mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes",
    "gpu_util_pct", "alloc_retries",
)  # fmt: skip
_WINDOW_INTS = frozenset({"t_start_ns", "step_starts", "alloc_retries"})


class _Series:
    """A WindowSeries column read as a tuple (None where the array holds NaN), made on first use."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: WindowSeries | None, owner: type) -> Any:
        if obj is None:
            return self
        return obj.series(self.name)


class WindowSeries:
    """Columnar chart data; ``None`` where a window had nothing to measure.

    ``steps`` are step-equivalents (each step adds the share of its span inside the window, so
    0 means no step ran); ``step_starts`` counts the steps that started in it.

    Held as numpy arrays (int64 for whole counts, float64 with NaN for "nothing to measure"):
    a live run's ~2,000 windows x 18 series are written to JSON from the arrays in C (orjson
    writes a float64 exactly as the Python float, and NaN as null), with no Python float per
    value. Each series reads as a tuple of Python values, built the first time it is read.
    """

    t_start_ns: tuple[int, ...] = _Series()  # type: ignore[assignment]
    steps: tuple[float, ...] = _Series()  # type: ignore[assignment]
    step_starts: tuple[int, ...] = _Series()  # type: ignore[assignment]
    step_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    data_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    forward_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    backward_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    optimizer_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    comm_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    host_ms: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    tokens_per_s: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    samples_per_s: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    mfu: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    mem_allocated_bytes: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    mem_reserved_bytes: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    mem_peak_bytes: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    gpu_util_pct: tuple[float | None, ...] = _Series()  # type: ignore[assignment]
    alloc_retries: tuple[int, ...] = _Series()  # type: ignore[assignment]

    __slots__ = ("_arrays", "_tuples", "width_ns")

    def __init__(self, width_ns: int, arrays: Mapping[str, np.ndarray]) -> None:
        if set(arrays) != set(WINDOW_SERIES):
            raise ValueError(f"window series needs exactly {WINDOW_SERIES}, got {sorted(arrays)}")
        n = len(arrays["t_start_ns"])
        fixed: dict[str, np.ndarray] = {}
        for name in WINDOW_SERIES:
            dtype = np.int64 if name in _WINDOW_INTS else np.float64
            column = np.ascontiguousarray(arrays[name], dtype=dtype)  # orjson writes C-contiguous arrays only
            if column.shape != (n,):
                raise ValueError(f"window series {name} has shape {column.shape}, expected ({n},)")
            fixed[name] = column
        self.width_ns = int(width_ns)
        self._arrays = fixed
        self._tuples: dict[str, tuple[Any, ...]] = {}

    def array(self, name: str) -> np.ndarray:
        """The series as stored (read-only view)."""
        view = self._arrays[name].view()
        view.flags.writeable = False
        return view

    def series(self, name: str) -> tuple[Any, ...]:
        got = self._tuples.get(name)
        if got is None:
            values = self._arrays[name]
            if name in _WINDOW_INTS:
                got = tuple(values.tolist())
            else:
                boxed = values.astype(object)
                boxed[np.isnan(values)] = None
                got = tuple(boxed.tolist())
            self._tuples[name] = got
        return got

    def json_columns(self) -> dict[str, Any]:
        """The JSON object of the series: width_ns, then each series as an array (orjson with
        OPT_SERIALIZE_NUMPY writes them; NaN becomes null)."""
        return {"width_ns": self.width_ns, **self._arrays}

    def __len__(self) -> int:
        return len(self._arrays["t_start_ns"])

    def _key(self) -> tuple[Any, ...]:
        return (self.width_ns, *(self.series(name) for name in WINDOW_SERIES))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WindowSeries):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"WindowSeries(width_ns={self.width_ns}, windows={len(self)})"


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
    # A job's lost work in this attempt: rework, restart and checkpoint time, priced (part of idle).
    lost: LostWork = NO_LOST

    @property
    def cost_usd(self) -> float:
        return self.cost_cents / 100

    def category(self, name: str) -> CategoryFigure:
        for fig in self.categories:
            if fig.category == name:
                return fig
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; tuples become lists, mappings dicts (``to_json_bytes``, parsed)."""
        out = orjson.loads(self.to_json_bytes())
        assert isinstance(out, dict)
        return out

    def to_json_bytes(self, *, ranks: bool = True) -> bytes:
        """The JSON that ``to_json`` parses, serialized once: the nested dataclasses are walked
        by orjson in C, the chart windows written from their arrays. Besides the fields: the
        run's ``cost_usd``, and each category's ``recoverable_usd`` / ``_low_usd`` / ``_high_usd``
        (after its fields, as ``to_json`` has always listed them). ``ranks=False`` leaves the
        per-rank figures out (stored apart: ``ranks_json_bytes``)."""
        top: dict[str, Any] = {name: getattr(self, name) for name in _analysis_fields() if ranks or name != "ranks"}
        top["categories"] = [
            {
                **{name: getattr(fig, name) for name in _category_fields()},
                "recoverable_usd": fig.recoverable_usd,
                "recoverable_low_usd": fig.recoverable_low_cents / 100,
                "recoverable_high_usd": fig.recoverable_high_cents / 100,
            }
            for fig in self.categories
        ]
        top["cost_usd"] = self.cost_usd
        return json_bytes(top)

    def ranks_json_bytes(self) -> bytes:
        """The per-rank figures as a JSON list, as ``to_json`` lists them under ``ranks``."""
        return json_bytes(self.ranks)


@cache
def _analysis_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Analysis))


@cache
def _category_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(CategoryFigure))


def json_bytes(value: Any) -> bytes:
    """``value`` as JSON, dataclasses walked in C: non-string keys become strings (as the standard
    library's encoder makes them), read-only mappings dicts, window series and numpy values as
    their numbers, NaN and infinities null (as orjson writes any float)."""
    return orjson.dumps(value, default=_plain, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def _plain(value: Any) -> Any:
    if isinstance(value, WindowSeries):
        return value.json_columns()
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

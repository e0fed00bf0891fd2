"""Recommendations: rules over an Analysis, each with evidence, concrete fixes and a saving.

Pure (no framework imports). The recommendations **partition** the run's recoverable dollars
(the evidence-based counterfactuals of evidence.py): each recoverable cent of a category is
claimed by at most one recommendation, so their ``saving_usd`` never add up to more than the
run's ``recoverable_usd``. Who claims what:

- data stall and host overhead: ``HOST_CONTENTION`` of a contended host claims only what the
  contention demonstrably costs: its ranks' share of the category's recoverable cents, times the
  excess of that host's per-step share over the run's uncontended hosts (nothing when every host
  is contended, or there is one: then no comparison shows the contention caused the wait);
  ``DATA_STALL`` / ``HOST_OVERHEAD`` claim the rest;
- a slow rank's ``STRAGGLER`` claims everything removing its slowness saves (up to what is left of
  each category): the others' measured wait for it (exposed communication) and its own time
  beyond the other ranks' median (data stall, compute inefficiency, host overhead);
  ``COMM_EXPOSED``, ``DATA_STALL``, ``HOST_OVERHEAD`` and ``LOW_MFU`` claim the rest;
- compute inefficiency: ``LOW_MFU``; idle: ``IDLE``. A job's lost work (idle labels ``rework``,
  ``restart``, ``phase:checkpoint``, ``phase:restore``) is never recoverable in the run's own
  figures (evidence.py): the job's checkpoint advice (checkpointing.py) claims it, once.

A priced rule that ends up claiming nothing is not issued as a $0 saving: when another
recommendation claimed its category's recoverable dollars (the cause named there), it is left
out; when nothing in its category is recoverable (no demonstrated better level), it stays as an
unpriced finding (``saving_usd=None``) that says so.

``saving_usd`` is what this run would have saved. A monthly figure needs to know how often the
work recurs, which one run cannot tell: the service adds it (waste/selectors.py) from the
project's trailing 30 days. Rules whose waste cannot be priced separately (memory fragmentation,
OOMs, unknown peak) carry ``saving_usd=None``. Thresholds live in ``Thresholds`` and are
documented in docs/waste-model.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from phantomhub.waste.core.money import cents_allocate
from phantomhub.waste.core.result import Analysis, CategoryFigure, Explained, HostFigure, Straggler, to_jsonable

GIB = 2**30


@dataclass(frozen=True)
class Thresholds:
    """When a rule fires. Shares are of billed GPU-seconds unless said otherwise."""

    data_stall_share: float = 0.05
    comm_exposed_share: float = 0.05
    host_overhead_share: float = 0.05
    idle_share: float = 0.10
    compute_inefficiency_share: float = 0.10
    # Severity by share of billed time: >= high -> "high", >= medium -> "medium", else "low".
    severity_high_share: float = 0.20
    severity_medium_share: float = 0.10
    # Straggler severity by the share of billed time its slowness costs (the others' wait and its own excess).
    straggler_high_share: float = 0.05
    straggler_medium_share: float = 0.02
    fragmentation_mean: float = 0.25
    alloc_retries_per_1k_steps: float = 1.0
    # "Room for a larger batch" when peak memory is at most this share of capacity.
    batch_headroom_peak_fraction: float = 0.70
    # "nvidia-smi looks busy" when GPU util is at least this while MFU is below busy_mfu_below.
    busy_gpu_util_pct: float = 80.0
    busy_mfu_below: float = 0.30


DEFAULT_THRESHOLDS = Thresholds()
_SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass(frozen=True)
class Evidence:
    observation: str
    value: float | int | str | None
    unit: str


@dataclass(frozen=True)
class Recommendation:
    code: str
    title: str
    category: str  # a waste category, or "memory" / "setup" for diagnostics without a price
    severity: str  # high | medium | low | info
    evidence: tuple[Evidence, ...]
    fixes: tuple[str, ...]
    saving_usd: float | None  # what this run would have saved: the recoverable dollars it claims
    # How the saving was computed (formula and inputs); value is the saving itself.
    explain: Explained | None = None
    claims: Mapping[str, float] = field(default_factory=dict)  # category -> recoverable USD claimed

    def to_json(self) -> dict[str, Any]:
        out = to_jsonable(self)
        assert isinstance(out, dict)
        return out


Claims = dict[str, dict[str, int]]  # recommendation key -> category -> recoverable cents


def claims_partition(a: Analysis) -> Claims:
    """Every recoverable cent of every category to at most one recommendation key (see module doc)."""
    cents = {f.category: f.recoverable_cents for f in a.categories}
    out: Claims = {}

    def give(key: str, cat: str, want: int) -> None:
        take = max(min(want, cents[cat]), 0)
        if take:
            out.setdefault(key, {})[cat] = out.get(key, {}).get(cat, 0) + take
            cents[cat] -= take

    calm = [h for h in a.host.hosts if not h.contended and h.ranks]
    for h in _contended(a) if calm else ():
        mine = [r for r in a.ranks if r.host == h.host]
        for cat, attr in (("data_stall", "data_stall_share"), ("host_overhead", "host_overhead_share")):
            total = sum(r.usd[cat] for r in a.ranks)
            share = sum(r.usd[cat] for r in mine) / total if total > 0 else 0.0
            give(
                f"HOST_CONTENTION:{h.host}",
                cat,
                math.floor(a.category(cat).recoverable_cents * share * _excess(h, calm, attr) + 1e-9),
            )
    for st in a.stragglers:
        give(f"STRAGGLER:{st.rank}", "comm_exposed", math.floor(st.caused_wait_usd * 100 + 1e-9))
        for cat, usd in st.own_excess_usd.items():
            give(f"STRAGGLER:{st.rank}", cat, math.floor(usd * 100 + 1e-9))
    for key, cat in (("DATA_STALL", "data_stall"), ("HOST_OVERHEAD", "host_overhead"), ("COMM_EXPOSED", "comm_exposed"),
                     ("LOW_MFU", "compute_inefficiency"), ("IDLE", "idle")):  # fmt: skip
        give(key, cat, cents[cat])
    return out


def _excess(h: HostFigure, calm: list[HostFigure], attr: str) -> float:
    """Share of a contended host's per-step data stall (or host overhead) beyond what the run's
    uncontended hosts show: the part the contention demonstrably costs."""
    mine = getattr(h, attr)
    others = [getattr(x, attr) for x in calm if getattr(x, attr) is not None]
    if not mine or not others:
        return 0.0
    return max(0.0, 1.0 - (sum(others) / len(others)) / mine)


def _claimed(a: Analysis, claims: Claims, key: str) -> tuple[float, Explained, dict[str, float]]:
    """The saving of recommendation ``key``: the recoverable dollars it claims, explained."""
    mine = claims.get(key, {})
    saving = sum(mine.values()) / 100
    inputs: dict[str, float | int | None] = {}
    for cat, c in mine.items():
        fig = a.category(cat)
        inputs[f"{cat}_recoverable_usd"] = fig.recoverable_usd
        inputs[f"claimed_{cat}_usd"] = c / 100
    parts = " + ".join(f"claimed share of {cat} recoverable" for cat in mine) or "nothing left to claim"
    return (
        saving,
        Explained(
            saving,
            "USD",
            f"{parts}; each category's recoverable dollars are a counterfactual against a demonstrated "
            "reference (see the category's explanation), and no dollar is claimed by two recommendations",
            inputs,
        ),
        {cat: c / 100 for cat, c in mine.items()},
    )


# The product's words for the categories and idle causes (texts people read; codes stay codes).
WORDS = {
    "useful_compute": "useful compute",
    "compute_inefficiency": "compute inefficiency",
    "data_stall": "data stall",
    "comm_exposed": "exposed communication",
    "host_overhead": "host overhead",
    "idle": "idle",
    "startup": "start-up",
    "teardown": "tear-down",
    "gap": "gaps between steps",
    "no_steps": "no step telemetry",
    "rework": "rework (steps an earlier attempt already computed)",
    "restart": "restarts",
}


def _words(label: str) -> str:
    if label.startswith("phase:"):
        return f"'{label[6:]}' phases"
    return WORDS.get(label, label.replace("_", " "))


def _unpriced(reason: str) -> Explained:
    return Explained(None, "USD", f"not priced separately: {reason}", {})


def _severity(share: float, t: Thresholds) -> str:
    if share >= t.severity_high_share:
        return "high"
    if share >= t.severity_medium_share:
        return "medium"
    return "low"


def _category_evidence(fig: CategoryFigure, a: Analysis) -> list[Evidence]:
    return [
        Evidence(f"{_words(fig.category)}, share of billed GPU time", round(fig.share, 4), "ratio"),
        Evidence(f"{_words(fig.category)}, GPU-hours", _hours(fig.gpu_seconds), "GPU-h"),
        # A category that cost under a cent says so rather than "$0.00" beside a real share of time.
        Evidence(f"{_words(fig.category)}, cost", fig.usd, "USD")
        if fig.usd_cents > 0 or fig.gpu_seconds <= 0 or not _priced(a)
        else Evidence(f"{_words(fig.category)}, cost: under a cent", None, ""),
        Evidence(fig.evidence.summary, fig.recoverable_usd, "USD"),
    ]


def _hours(gpu_seconds: float) -> float:
    """GPU-hours unrounded (to 9 decimals, for tidy JSON): the page rounds once, as it rounds the
    same figure elsewhere (0.0014 GPU-h, not a 0.001 rounded here beside it)."""
    return round(gpu_seconds / 3600, 9)


def _footed_parts(saving: float | None, wait_usd: float, own_usd: float) -> tuple[float, float]:
    """A straggler's two costs in cents that add up to its saving (largest remainder), so its
    evidence never reads $71.09 in parts beside a $71.08 saving."""
    total = round(saving * 100) if saving is not None else round((wait_usd + own_usd) * 100)
    parts = cents_allocate(total, {"wait": Fraction(wait_usd), "own": Fraction(own_usd)})
    return parts["wait"] / 100, parts["own"] / 100


def _priced(a: Analysis) -> bool:
    """Some of the run's billed time has a price (a $0.00 category then cost under a cent)."""
    return a.unpriced_gpu_seconds < a.billed_gpu_seconds


def _mean_over_ranks(analysis: Analysis, attr: str) -> float | None:
    values = [getattr(r, attr) for r in analysis.ranks if getattr(r, attr) is not None]
    return sum(values) / len(values) if values else None


def _contended(analysis: Analysis) -> list[HostFigure]:
    return [h for h in analysis.host.hosts if h.contended]


def _data_stall(a: Analysis, t: Thresholds, claims: Claims) -> list[Recommendation]:
    fig = a.category("data_stall")
    if fig.share < t.data_stall_share:
        return []
    ev = _category_evidence(fig, a)
    data_ms = _mean_over_ranks(a, "data_ns_mean")
    step_ms = _mean_over_ranks(a, "step_ns_mean")
    if data_ms is not None and step_ms:
        ev.append(Evidence("mean wait for the next batch per step", round(data_ms / 1e6, 2), "ms"))
        ev.append(Evidence("share of step time waiting for data", round(data_ms / step_ms, 4), "ratio"))
    fixes = [
        "Raise DataLoader(num_workers=...): start at 4-8 per GPU, up to the CPU cores per GPU on the "
        "node, and watch that CPU is not saturated.",
        "DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True), so host-to-device copies overlap compute.",
        "DataLoader(prefetch_factor=4) so each worker keeps batches queued through slow stretches.",
        "DataLoader(persistent_workers=True) so workers are not re-forked at every epoch start.",
        "Parallelise the pipeline itself: pre-tokenize or pre-decode offline, shard reads across "
        "workers, cache the dataset on local NVMe, or move augmentation to the GPU.",
    ]
    if _contended(a):
        fixes.append("Free CPU for the loader workers first: see the CPU contention recommendation.")
    saving, explain, claimed = _claimed(a, claims, "DATA_STALL")
    return [
        Recommendation(
            code="DATA_STALL",
            title="GPUs wait for input batches",
            category="data_stall",
            severity=_severity(fig.share, t),
            evidence=tuple(ev),
            fixes=tuple(fixes),
            saving_usd=saving,
            claims=claimed,
            explain=explain,
        )
    ]


def _comm(a: Analysis, t: Thresholds, claims: Claims) -> list[Recommendation]:
    fig = a.category("comm_exposed")
    if fig.share < t.comm_exposed_share:
        return []
    ev = _category_evidence(fig, a)
    comm_ms = _mean_over_ranks(a, "comm_ns_mean")
    if comm_ms is not None:
        ev.append(Evidence("mean exposed gradient-sync wait per step", round(comm_ms / 1e6, 2), "ms"))
    straggler_usd = sum(s.caused_wait_usd for s in a.stragglers)
    if straggler_usd:
        ev.append(Evidence("of which caused by stragglers (see the straggler recommendation)", round(straggler_usd, 2), "USD"))
    fixes = (
        "DistributedDataParallel(bucket_cap_mb=...): try 50-100 (default 25) so fewer, larger "
        "all-reduces start earlier in backward.",
        "Keep the sync overlapped with backward: avoid find_unused_parameters=True unless needed; "
        "set static_graph=True and gradient_as_bucket_view=True.",
        "With gradient accumulation, run the non-final micro-steps under model.no_sync() so "
        "gradients are synchronised once per optimizer step.",
        "Compress gradients when bandwidth-bound: register_comm_hook with bf16_compress_hook or PowerSGD.",
        "Check the transport: NCCL over InfiniBand/EFA/NVLink rather than TCP sockets (NCCL_DEBUG=INFO prints it).",
    )
    # The straggler-caused part has its own recommendation; do not count it twice.
    saving, explain, claimed = _claimed(a, claims, "COMM_EXPOSED")
    return [
        Recommendation(
            code="COMM_EXPOSED",
            title="Gradient synchronisation is not hidden behind compute",
            category="comm_exposed",
            severity=_severity(fig.share, t),
            evidence=tuple(ev),
            fixes=fixes,
            saving_usd=saving,
            claims=claimed,
            explain=explain,
        )
    ]


def _straggler(a: Analysis, s: Straggler, t: Thresholds, claims: Claims) -> Recommendation:
    """A slow rank: what its slowness costs the others and itself, and where to look."""
    saving, explain, claimed = _claimed(a, claims, f"STRAGGLER:{s.rank}")
    wait_usd, own_usd = _footed_parts(saving, s.caused_wait_usd, sum(s.own_excess_usd.values()))
    share = (s.caused_wait_gpu_seconds + s.own_excess_gpu_seconds) / a.billed_gpu_seconds if a.billed_gpu_seconds else 0.0
    severity = "high" if share >= t.straggler_high_share else "medium" if share >= t.straggler_medium_share else "low"
    data_heavy = (
        s.data_ns_mean is not None
        and s.median_rank_data_ns_mean is not None
        and s.data_ns_mean > 1.5 * s.median_rank_data_ns_mean + 1e6
    )
    one_node = len({r.host for r in a.ranks}) == 1
    saving_usd: float | None = saving
    if not saving and 0 < s.saving_usd < 0.01:  # a short or cheap run: measured, but no whole cent
        saving_usd, claimed = None, {}
        explain = _unpriced(
            f"what fixing it saves comes to ${s.saving_usd:.4f} on this run, under a cent: too little to price a saving"
        )
    return Recommendation(
        code="STRAGGLER",
        title=f"Rank {s.rank} holds the other ranks up" if one_node else f"Rank {s.rank} on {s.host} holds the other ranks up",
        category="comm_exposed",
        severity=severity,
        evidence=_straggler_evidence(s, wait_usd, own_usd, data_heavy),
        fixes=_straggler_fixes(s, one_node, data_heavy),
        saving_usd=saving_usd,
        claims=claimed,
        explain=explain,
    )


def _straggler_evidence(s: Straggler, wait_usd: float, own_usd: float, data_heavy: bool) -> tuple[Evidence, ...]:
    """How often and by how much the rank is slow, and the cost of the others' wait and of its own
    excess (in cents that add up to the saving)."""
    ev = [
        Evidence(
            f"share of steps in which rank {s.rank} on {s.host} is at least 5% slower than the median rank",
            round(s.slow_step_share, 4),
            "ratio",
        ),
        Evidence("mean lead over the other ranks per step (data, compute and host time beyond their median)",
                 round(s.lead_ns_mean / 1e6, 2), "ms"),
        Evidence(
            "the other ranks' exposed communication spent waiting for it", _hours(s.caused_wait_gpu_seconds), "GPU-h"
        ),
        Evidence("cost of that wait", wait_usd, "USD"),
        Evidence("its own time beyond the other ranks", _hours(s.own_excess_gpu_seconds), "GPU-h"),
        Evidence("cost of its own excess", own_usd, "USD"),
    ]  # fmt: skip
    if s.compute_ns_mean is not None and s.median_rank_compute_ns_mean:
        ev.append(
            Evidence(
                "its compute per step vs the median rank",
                round(s.compute_ns_mean / s.median_rank_compute_ns_mean, 3),
                "ratio",
            )
        )
    if data_heavy and s.data_ns_mean is not None:
        ev.append(Evidence("its data wait per step", round(s.data_ns_mean / 1e6, 2), "ms"))
    return tuple(ev)


def _straggler_fixes(s: Straggler, one_node: bool, data_heavy: bool) -> tuple[str, ...]:
    """Where to look: the rank's GPU and its own work when every rank shares one node, else the
    node; its loader first when it waits for data much longer than the others."""
    if one_node:  # every rank shares the node: the rank, not the node, is slow
        fixes = [
            f"Rank {s.rank}'s GPU on {s.host}: nvidia-smi -q -d CLOCK,PERFORMANCE -i <its GPU> for thermal or power "
            "throttling, and its PCIe/NVLink link (nvidia-smi topo -m).",
            f"Work that only rank {s.rank} does: logging, checkpointing or evaluation on rank 0, an uneven data "
            "shard; move it off the critical path or spread it over the ranks.",
            "Rebalance work per rank (pack or bucket sequence lengths) when the slowness follows the data.",
        ]
    else:
        fixes = [
            f"Inspect node {s.host}: nvidia-smi -q -d CLOCK,PERFORMANCE for thermal or power throttling, "
            "XID/ECC errors in dmesg, a degraded PCIe or NVLink link.",
            f"Look for other processes on {s.host} (CPU contention) and compare its data shard sizes.",
            f"Cordon {s.host} and rerun on another node; if the slowness follows the rank rather than "
            "the node, rebalance work per rank (pack or bucket sequence lengths).",
        ]
    if data_heavy:
        fixes.insert(0, f"Rank {s.rank} waits for data much longer than the others: check its loader and storage path.")
    return tuple(fixes)


def _low_mfu(a: Analysis, t: Thresholds, claims: Claims) -> list[Recommendation]:
    fig = a.category("compute_inefficiency")
    if not (a.peak_known and a.flops_known) or fig.share < t.compute_inefficiency_share:
        return []
    ev = _category_evidence(fig, a)
    ev.append(Evidence("MFU over billed time", None if a.mfu is None else round(a.mfu, 4), "ratio"))
    ev.append(Evidence("MFU over compute time", None if a.mfu_compute is None else round(a.mfu_compute, 4), "ratio"))
    ev.append(Evidence("target MFU", a.target_mfu, "ratio"))
    util = a.host.gpu_util_pct_mean
    if util is not None and util >= t.busy_gpu_util_pct and (a.mfu or 0.0) < t.busy_mfu_below:
        ev.append(Evidence("GPU utilization looks busy (nvidia-smi) while MFU is low", round(util, 1), "%"))
    fixes = []
    mem = a.memory
    if mem.peak_fraction_of_capacity is not None and mem.peak_fraction_of_capacity <= t.batch_headroom_peak_fraction:
        ev.append(Evidence("peak memory share of GPU capacity", round(mem.peak_fraction_of_capacity, 3), "ratio"))
        fixes.append(
            f"Raise the micro-batch: peak memory is {mem.peak_fraction_of_capacity:.0%} of "
            f"{(mem.capacity_bytes or 0) / GIB:.0f} GiB, and larger matmuls run closer to peak."
        )
    if (a.dtype or "").lower() in ("", "fp32", "float32", "tf32"):
        fixes.append(
            "Train in bf16 mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16)): "
            "the tensor-core bf16 peak is many times the fp32 rate."
        )
    fixes += [
        "torch.compile(model) to fuse elementwise kernels and cut launches; fused optimizers "
        "(torch.optim.AdamW(fused=True)); FlashAttention through scaled_dot_product_attention.",
        "Check the FLOPs you report (about 6 x parameters x tokens per step for a dense transformer): "
        "a wrong count misstates MFU.",
    ]
    saving, explain, claimed = _claimed(a, claims, "LOW_MFU")
    return [
        Recommendation(
            code="LOW_MFU",
            title="Kernels run well below the target MFU",
            category="compute_inefficiency",
            severity=_severity(fig.share, t),
            evidence=tuple(ev),
            fixes=tuple(fixes),
            saving_usd=saving,
            claims=claimed,
            explain=explain,
        )
    ]


def _host_overhead(a: Analysis, t: Thresholds, claims: Claims) -> list[Recommendation]:
    fig = a.category("host_overhead")
    if fig.share < t.host_overhead_share:
        return []
    ev = _category_evidence(fig, a)
    host_ms = _mean_over_ranks(a, "host_ns_mean")
    if host_ms is not None:
        ev.append(Evidence("mean unmeasured (host-side) time per step", round(host_ms / 1e6, 2), "ms"))
    fixes = [
        "Remove sync points from the step: .item(), .cpu(), printing tensors; log every N steps.",
        "CUDA graphs for small, launch-bound steps: torch.compile(mode='reduce-overhead').",
        "Move per-step Python work (metrics, bookkeeping) off the critical path or to a thread.",
    ]
    if _contended(a):
        fixes.append("Busy CPUs on the node slow the Python loop: see the CPU contention recommendation.")
    saving, explain, claimed = _claimed(a, claims, "HOST_OVERHEAD")
    return [
        Recommendation(
            code="HOST_OVERHEAD",
            title="Step time that no stage accounts for (Python, launches, sync points)",
            category="host_overhead",
            severity=_severity(fig.share, t),
            evidence=tuple(ev),
            fixes=tuple(fixes),
            saving_usd=saving,
            claims=claimed,
            explain=explain,
        )
    ]


def _host_contention(a: Analysis, t: Thresholds, claims: Claims) -> list[Recommendation]:
    out = []
    for h in _contended(a):
        mine = [r for r in a.ranks if r.host == h.host]
        exposed = sum(r.usd["host_overhead"] + r.usd["data_stall"] for r in mine)
        ev = [
            Evidence(f"CPU used by other processes on {h.host}, mean", _r(h.cpu_other_pct_mean, 1), "%"),
            Evidence(f"CPU used by other processes on {h.host}, p95", _r(h.cpu_other_pct_p95, 1), "%"),
            Evidence(f"CPU steal on {h.host}, mean", _r(h.cpu_steal_pct_mean, 2), "%"),
            Evidence(f"host overhead, share of step time on {h.host}", _r(h.host_overhead_share, 4), "ratio"),
            Evidence("host overhead, share of step time over the whole run", _r(a.host.host_overhead_share, 4), "ratio"),
            Evidence(f"host overhead and data stall, cost of the ranks on {h.host}", round(exposed, 2), "USD"),
        ]
        fixes = [
            f"Find and stop background processes on {h.host} (top sorted by CPU: stray notebooks, "
            "other jobs, heavy monitoring agents).",
            "Pin each trainer and its DataLoader workers to the cores of its GPU's NUMA node "
            "(numactl --cpunodebind=N --membind=N, or taskset) and set OMP_NUM_THREADS to the cores "
            "per process.",
        ]
        if (h.cpu_steal_pct_mean or 0.0) >= 5.0:
            fixes.append(
                "CPU steal means the hypervisor hands your vCPUs to other tenants: use dedicated or "
                "bare-metal instances, or a larger instance size."
            )
        share = h.host_overhead_share or 0.0
        if any(not x.contended and x.ranks for x in a.host.hosts):
            saving, explain, claimed = _claimed(a, claims, f"HOST_CONTENTION:{h.host}")
        else:
            saving, claimed = None, {}
            explain = _unpriced(
                "no uncontended host in the run shows what its ranks would do without the contention, so "
                "their data-stall and host-overhead dollars stay with those recommendations"
            )
        out.append(
            Recommendation(
                code="HOST_CONTENTION",
                title=f"CPU contention on {h.host}",
                category="host_overhead",
                severity="medium" if share >= t.host_overhead_share else "low",
                evidence=tuple(ev),
                fixes=tuple(fixes),
                saving_usd=saving,
                claims=claimed,
                explain=explain,
            )
        )
    return out


_IDLE_FIXES = {
    "startup": "Shorten start-up: pre-built images, datasets cached on local disk, parallel checkpoint "
    "loading (torch.distributed.checkpoint), and allocate GPUs only once inputs are staged.",
    "gap": "Gaps between steps (hangs, blocking I/O, stalls): find where they cluster in the step-time "
    "chart and check logs at those times.",
    "teardown": "Release GPUs as soon as training ends: exit after the final checkpoint and upload artifacts from a CPU node.",
    "no_steps": "No step telemetry: check that the agent runs on every rank.",
    "rework": "Rework and restarts are the job's lost work: see the job's checkpoint advice (interval and "
    "asynchronous saves) and its failure causes; they are priced there, not here.",
    "restart": "Rework and restarts are the job's lost work: see the job's checkpoint advice (interval and "
    "asynchronous saves) and its failure causes; they are priced there, not here.",
}


def _idle(a: Analysis, t: Thresholds, claims: Claims) -> list[Recommendation]:
    fig = a.category("idle")
    if fig.share < t.idle_share:
        return []
    ev = _category_evidence(fig, a)
    fixes = []
    for part in sorted(a.idle, key=lambda i: -i.gpu_seconds):
        if part.gpu_seconds <= 0:
            continue
        ev.append(Evidence(f"idle: {_words(part.label)}", _hours(part.gpu_seconds), "GPU-h"))
        if part.label.startswith("phase:"):
            name = part.label[len("phase:") :]
            if "checkpoint" in name or "ckpt" in name or "save" in name:
                fixes.append(
                    f"'{name}' phases: checkpoint asynchronously "
                    "(torch.distributed.checkpoint.async_save) so training continues while state is written."
                )
            else:
                fixes.append(
                    f"'{name}' phases: run them less often or on a subset, or asynchronously on a separate, cheaper GPU."
                )
        elif part.label in _IDLE_FIXES and _IDLE_FIXES[part.label] not in fixes:
            fixes.append(_IDLE_FIXES[part.label])
    saving, explain, claimed = _claimed(a, claims, "IDLE")
    return [
        Recommendation(
            code="IDLE",
            title="GPUs allocated with no training step running",
            category="idle",
            severity=_severity(fig.share, t),
            evidence=tuple(ev),
            fixes=tuple(fixes),
            saving_usd=saving,
            claims=claimed,
            explain=explain,
        )
    ]


def _memory(a: Analysis, t: Thresholds) -> list[Recommendation]:
    mem = a.memory
    out = []
    frag = mem.fragmentation_mean
    retries = mem.alloc_retries_per_1k_steps
    if (frag is not None and frag >= t.fragmentation_mean) or (retries is not None and retries >= t.alloc_retries_per_1k_steps):
        ev = [
            Evidence("mean fragmentation (1 - allocated/reserved)", _r(frag, 3), "ratio"),
            Evidence("allocator retries (each forces a device sync)", mem.alloc_retries_total, "count"),
            Evidence("allocator retries per 1,000 steps", _r(retries, 2), "per 1k steps"),
            Evidence("reserved memory, max", mem.reserved_bytes_max, "bytes"),
            Evidence("allocated memory, max", mem.allocated_bytes_max, "bytes"),
        ]
        out.append(
            Recommendation(
                code="MEMORY_FRAGMENTATION",
                title="The CUDA caching allocator is fragmented or retrying",
                category="memory",
                severity="medium" if retries is not None and retries >= t.alloc_retries_per_1k_steps else "low",
                evidence=tuple(ev),
                fixes=(
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the allocator grows segments "
                    "instead of fragmenting them.",
                    "Keep tensor shapes stable (pad or bucket variable sequence lengths) so cached blocks are reused.",
                    "Near capacity, lower the peak with activation checkpointing (torch.utils.checkpoint).",
                ),
                saving_usd=None,
                explain=_unpriced(
                    "the device syncs that allocator retries force already count as host overhead, "
                    "and fragmentation costs memory, not GPU time"
                ),
            )
        )
    if mem.oom_count > 0:
        out.append(
            Recommendation(
                code="OOM",
                title="The run hit out-of-memory errors",
                category="memory",
                severity="high",
                evidence=(
                    Evidence("out-of-memory errors", mem.oom_count, "count"),
                    Evidence("peak memory share of GPU capacity", _r(mem.peak_fraction_of_capacity, 3), "ratio"),
                ),
                fixes=(
                    "Activation checkpointing (torch.utils.checkpoint) on the largest blocks.",
                    "A smaller micro-batch with gradient accumulation to keep the effective batch.",
                    "Shard optimizer state and gradients (FSDP or ZeRO) across ranks.",
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation OOMs.",
                ),
                saving_usd=None,
                explain=_unpriced(
                    "what an OOM costs (lost work, the restart) shows in other categories or runs and "
                    "cannot be told apart in this run's telemetry"
                ),
            )
        )
    return out


def _setup(a: Analysis) -> list[Recommendation]:
    if a.peak_known and a.flops_known:
        return []
    missing = []
    if not a.peak_known:
        missing.append("the GPU model or dtype is not in the catalog")
    if not a.flops_known:
        missing.append("no FLOPs were reported")
    return [
        Recommendation(
            code="MFU_UNKNOWN",
            title="MFU cannot be computed, so compute inefficiency is not priced",
            category="setup",
            severity="info",
            evidence=tuple(Evidence(m, None, "") for m in missing),
            fixes=(
                "Report the GPU model and dtype in the run metadata (or add the GPU to the catalog).",
                "Report FLOPs per step: the agent's FLOP counter, or 6 x parameters x tokens.",
            ),
            saving_usd=None,
            explain=_unpriced("without a peak or FLOPs, compute inefficiency cannot be told from useful compute"),
        )
    ]


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _nothing_claimed(a: Analysis, r: Recommendation) -> Recommendation | None:
    """A priced rule with a $0 saving (module doc): left out when another recommendation claimed
    its category's recoverable dollars, else an unpriced finding saying why."""
    if r.saving_usd is None or r.saving_usd > 0:
        return r
    if r.category in {f.category for f in a.categories} and a.category(r.category).recoverable_cents > 0:
        return None
    tiny = _priced(a) and r.category in {f.category for f in a.categories} and a.category(r.category).usd_cents <= 0
    reason = (
        f"its {_words(r.category)} cost under a cent on this run: too little to price a saving"
        if tiny
        else f"nothing of its {_words(r.category)} is recoverable: no stretch of this run, comparable finished run or "
        "target demonstrates a better level (docs/waste-model.md, section 4)"
    )
    return dataclasses.replace(r, saving_usd=None, claims={}, explain=_unpriced(reason))


def recommend(analysis: Analysis, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Recommendation, ...]:
    """Every rule that fires, largest saving first (unpriced ones last, by severity)."""
    t = thresholds
    c = claims_partition(analysis)
    fired: list[Recommendation] = [
        *_data_stall(analysis, t, c),
        *_comm(analysis, t, c),
        *(_straggler(analysis, s, t, c) for s in analysis.stragglers),
        *_low_mfu(analysis, t, c),
        *_host_overhead(analysis, t, c),
        *_host_contention(analysis, t, c),
        *_idle(analysis, t, c),
        *_memory(analysis, t),
        *_setup(analysis),
    ]
    recs = [r for r in (_nothing_claimed(analysis, r) for r in fired) if r is not None]
    return tuple(
        sorted(
            recs,
            key=lambda r: (
                r.saving_usd is None,
                -(r.saving_usd or 0.0),
                _SEVERITY_RANK[r.severity],
                r.code,
            ),
        )
    )

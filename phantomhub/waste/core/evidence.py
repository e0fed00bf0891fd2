"""Recoverable dollars as measured counterfactuals (docs/waste-model.md, section 4).

For each category, recoverable = what the run spent on it minus what it would have spent at a
**reference that has actually been achieved**, with that evidence named:

- ``own_stretch``: the run's own best sustained stretch of at least ``STRETCH_MIN_STEPS`` steps
  per rank (from the accumulator's time windows): a loader that kept up for that long can keep up;
- ``peers``: finished runs of the same project on the same GPU model, with the same world size
  (and GPU count and dtype where both runs say), whose step is comparable (FLOPs, tokens and
  samples per step per rank each within ``PEER_TOLERANCE`` where both report them): the better
  quartile of their per-step figure;
- ``straggler``: the other ranks' measured wait for a slow rank (exposed communication), and the
  slow rank's own time beyond the other ranks' median (data stall, compute inefficiency, host
  overhead): the other ranks demonstrate that level on the same step;
- ``project_median``: the project's median start-up (or tear-down) for those idle parts;
- ``none``: nothing demonstrated a better level; then nothing is called recoverable.

Per-step categories (data stall, exposed communication, host overhead) are priced as
``usd x max(0, 1 - reference / run_value)``, with values in ns per step: removing the excess wait
of every step removes that share of the category's GPU time. Compute inefficiency is priced at a
reference MFU over compute time: ``compute_usd x (1 - run_mfu / reference_mfu)``, never more than
the inefficiency itself (the reference is capped at the target MFU, which is the high end).

The range: ``low`` uses the conservative version of each reference (the run's better-quartile
non-overlapping stretch, the peers' median), ``high`` the best single one (the best stretch, the
best peer, the target). An organization may cap each category's recoverable share (the old
"recoverability" factors, default 1): the cap cuts the figure and ``capped`` says so.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from phantomhub.waste.core.inputs import FloatArray, IntArray
from phantomhub.waste.core.windows import WindowSums

STRETCH_MIN_STEPS = 200  # per rank: "a few hundred steps" of sustained behaviour
PEER_TOLERANCE = 0.10  # FLOPs / tokens / samples per step within ±10% of this run's
PEERS_MAX = 50  # most recent comparable peers considered
NO_EVIDENCE = "none"


@dataclass(frozen=True)
class RunProfile:
    """A finished run's step signature and per-step figures (per rank), stored for its peers."""

    live_steps: int  # steps with time outside phases, all ranks
    ranks: int
    flops_per_step: float | None
    tokens_per_step: float | None
    samples_per_step: float | None
    data_ns_per_step: float | None
    comm_ns_per_step: float | None
    host_ns_per_step: float | None
    gap_ns_per_step: float | None
    mfu_compute: float | None
    startup_s: float | None  # mean over ranks: allocation start to the first step
    teardown_s: float | None  # mean over ranks: last step to the end
    # The job's shape. Profiles stored before these were kept lack them (None): the reporting
    # ranks stand in for the world size, and an unknown GPU count or dtype matches any.
    world_size: int | None = None
    gpu_count: int | None = None
    dtype: str | None = None

    def shape(self) -> tuple[int, int | None, str | None]:
        """(world size, GPU count, dtype): what a peer must share to be compared at all."""
        return (self.world_size or self.ranks, self.gpu_count, (self.dtype or "").lower() or None)

    def shape_matches(self, other: RunProfile) -> bool:
        """The same world size, and the same GPU count and dtype where both runs say: a 2-rank
        job's step (with gradient sync and a possible straggler) is no reference for 1 rank."""
        mine, theirs = self.shape(), other.shape()
        return mine[0] == theirs[0] and all(a is None or b is None or a == b for a, b in zip(mine[1:], theirs[1:]))

    def signature_matches(self, other: RunProfile, tolerance: float = PEER_TOLERANCE) -> bool:
        """Comparable runs: the same shape (``shape_matches``), and every per-step work figure
        both report agrees within ``tolerance``, with at least one reported by both."""
        if not self.shape_matches(other):
            return False
        compared = 0
        for name in ("flops_per_step", "tokens_per_step", "samples_per_step"):
            a, b = getattr(self, name), getattr(other, name)
            if a is None or b is None or a <= 0 or b <= 0:
                continue
            compared += 1
            if abs(a - b) > tolerance * max(a, b):
                return False
        return compared > 0

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunProfile | None:
        try:
            return cls(**{f: data.get(f) for f in cls.__dataclass_fields__})  # type: ignore[arg-type]
        except TypeError:
            return None


@dataclass(frozen=True)
class Peer:
    run_id: str
    profile: RunProfile


@dataclass(frozen=True)
class References:
    """What other runs demonstrate. ``peers``: candidate finished runs of the same project and GPU
    model, most recent first (``assess`` keeps those whose step matches, ``signature_matches``).
    ``project``: the project's finished runs of any step, for start-up and tear-down medians."""

    peers: tuple[Peer, ...] = ()
    project: tuple[Peer, ...] = ()


NO_REFERENCES = References()


@dataclass(frozen=True)
class StretchWindow:
    t_start_ns: int
    t_end_ns: int
    steps: float  # per rank


@dataclass(frozen=True)
class CategoryEvidence:
    kind: str  # own_stretch | peers | straggler | target | project_median | none
    summary: str
    unit: str  # of the values below: ms/step, MFU, s
    run_value: float | None
    reference_value: float | None
    low_reference: float | None
    high_reference: float | None
    window: StretchWindow | None = None
    peer_run_ids: tuple[str, ...] = ()
    capped: bool = False


@dataclass(frozen=True)
class Recoverable:
    """One category's (or idle part's) recoverable cents, its range and evidence."""

    cents: int
    low_cents: int
    high_cents: int
    evidence: CategoryEvidence
    formula: str = ""
    inputs: Mapping[str, float | int | str | None] = field(default_factory=dict)


def none_recoverable(reason: str, unit: str = "", run_value: float | None = None) -> Recoverable:
    return Recoverable(0, 0, 0, CategoryEvidence(NO_EVIDENCE, reason, unit, run_value, None, None, None))


# -- the run's own best sustained stretch -----------------------------------------------------


@dataclass(frozen=True)
class Stretch:
    best: float  # best value of any stretch of at least the minimum length
    quartile: float  # better quartile of consecutive non-overlapping stretches
    window: StretchWindow


@dataclass(frozen=True, eq=False)
class StretchPlan:
    """What ``best_stretch`` needs of the windows' lengths alone: the same for every figure of
    one run (assess asks for four), so it is made once."""

    p_len: FloatArray  # prefix sums of the lengths
    lo: IntArray  # stretches that end inside the run: first window
    hi: IntArray  # ... and one past the last
    starts: IntArray  # consecutive non-overlapping stretches (for the quartile)
    ends: IntArray


def stretch_plan(length: FloatArray, need: float) -> StretchPlan | None:
    """The stretches of at least ``need`` of ``length`` (None: the run is shorter than that)."""
    n = len(length)
    p_len = np.concatenate(([0.0], np.cumsum(length)))
    if n == 0 or p_len[-1] < need or need <= 0:
        return None
    lo = np.arange(n)
    hi = np.searchsorted(p_len, p_len[:-1] + need * (1 - 1e-12), side="left")
    chain = hi.tolist()  # where a stretch starting at each window ends (the blocks below walk it)
    ok = hi <= n
    starts, ends = [], []
    b = 0
    while True:
        e = chain[b] if b < n else int(np.searchsorted(p_len, p_len[b] + need * (1 - 1e-12), side="left"))
        if e > n:
            break
        starts.append(b)
        ends.append(e)
        b = e
    return StretchPlan(p_len, lo[ok], hi[ok], np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


def best_stretch(
    num: FloatArray,
    den: FloatArray,
    length: FloatArray,
    *,
    need: float,
    lower_is_better: bool,
    start_ns: int,
    width_ns: int,
    ranks: int,
    plan: StretchPlan | None = None,
) -> Stretch | None:
    """Best ``Σnum / Σden`` over runs of consecutive windows holding at least ``need`` of
    ``length`` (step-equivalents, all ranks), or None when the run is shorter than that.
    ``plan``: ``stretch_plan(length, need)``, when the caller has made it."""
    if plan is None:
        plan = stretch_plan(length, need)
        if plan is None:
            return None
    p_len = plan.p_len
    p_num = np.concatenate(([0.0], np.cumsum(num)))
    p_den = np.concatenate(([0.0], np.cumsum(den)))
    lo, hi = plan.lo, plan.hi
    d = p_den[hi] - p_den[lo]
    ok = d > 0
    lo, hi, d = lo[ok], hi[ok], d[ok]
    if not len(lo):
        return None
    values = (p_num[hi] - p_num[lo]) / d
    k = int(np.argmin(values) if lower_is_better else np.argmax(values))
    starts, ends = plan.starts, plan.ends
    bd = p_den[ends] - p_den[starts]
    with_den = bd > 0
    blocks = ((p_num[ends] - p_num[starts])[with_den] / bd[with_den]).tolist()
    quartile = float(np.percentile(blocks, 25 if lower_is_better else 75)) if blocks else float(values[k])
    i, j = int(lo[k]), int(hi[k])
    while i < j and length[i] <= 0:  # the stretch starts and ends where steps ran
        i += 1
    while j > i and length[j - 1] <= 0:
        j -= 1
    window = StretchWindow(start_ns + i * width_ns, start_ns + j * width_ns, float(p_len[j] - p_len[i]) / max(ranks, 1))
    return Stretch(float(values[k]), quartile, window)


# -- category figures -------------------------------------------------------------------------


def _cents_at(usd_cents: int, fraction: float) -> int:
    """Whole cents of ``usd_cents x fraction`` (floor, so parts never exceed the category)."""
    if not math.isfinite(fraction) or fraction <= 0:
        return 0
    return min(usd_cents, math.floor(usd_cents * min(fraction, 1.0) + 1e-9))


def _peer_values(peers: Sequence[Peer], attr: str) -> list[tuple[str, float]]:
    out = []
    for p in peers:
        v = getattr(p.profile, attr)
        if v is not None and math.isfinite(v):
            out.append((p.run_id, float(v)))
    return out


def _capped(rec: Recoverable, usd_cents: int, cap: float) -> Recoverable:
    limit = math.floor(usd_cents * cap + 1e-9)
    if rec.cents <= limit and rec.high_cents <= limit:
        return rec
    ev = rec.evidence
    capped_ev = CategoryEvidence(
        ev.kind, ev.summary + f" Capped at {cap:.0%} of the category by the organization's settings.", ev.unit,
        ev.run_value, ev.reference_value, ev.low_reference, ev.high_reference, ev.window, ev.peer_run_ids,
        capped=rec.cents > limit,
    )  # fmt: skip
    return Recoverable(
        min(rec.cents, limit), min(rec.low_cents, limit), min(rec.high_cents, limit), capped_ev,
        f"min({rec.formula}, cap * usd)" if rec.formula else rec.formula, {**rec.inputs, "cap": cap},
    )  # fmt: skip


def percent_text(ratio: float) -> str:
    """A share as people read it: 39.5%, 0.0075% (never a bare 0.0% for a small non-zero)."""
    return f"{ratio:.1%}" if ratio >= 0.01 or ratio == 0 else f"{ratio * 100:.2g}%"


def duration_text(ns: float) -> str:
    """A per-step duration as people read it: 850 µs, 2.10 ms, 8.33 s."""
    if ns >= 1e9:
        return f"{ns / 1e9:,.2f} s"
    if ns >= 1e6 or ns == 0:
        return f"{ns / 1e6:,.2f} ms"
    return f"{ns / 1e3:,.0f} µs"


def seconds_text(seconds: float) -> str:
    """A span as the pages write it (format.ts formatSeconds): 4.2 s, 12.3 s, 2 m 14 s, 1 h 05 m."""
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    whole = int(seconds + 0.5)  # half up, as Math.round
    h, m, sec = whole // 3600, whole % 3600 // 60, whole % 60
    if h >= 24:
        return f"{h // 24} d {h % 24} h"
    return f"{h} h {m:02d} m" if h else f"{m} m {sec:02d} s"


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


@dataclass(frozen=True)
class Levels:
    """The references a run's own stretches and its peers demonstrate for one figure."""

    reference: float  # the better of own best stretch and peers' better quartile
    kind: str  # which of the two it is
    conservative: float  # the better of own better-quartile block and peers' median
    best: float  # the best single one: own best stretch or best peer


def _levels(stretch: Stretch | None, pv: list[tuple[str, float]], *, lower_is_better: bool) -> Levels | None:
    better = min if lower_is_better else max
    candidates: list[tuple[float, str]] = []
    conservative: list[float] = []
    best: list[float] = []
    if stretch is not None:
        candidates.append((stretch.best, "own_stretch"))
        conservative.append(stretch.quartile)
        best.append(stretch.best)
    if pv:
        values = np.array([v for _, v in pv])
        candidates.append((float(np.percentile(values, 25 if lower_is_better else 75)), "peers"))
        conservative.append(float(np.percentile(values, 50)))
        best.append(float(better(values)))
    if not candidates:
        return None
    reference, kind = better(candidates)
    return Levels(reference, kind, better(conservative), better(best))


def _demonstrated(
    kind: str, stretch: Stretch | None, pv: list[tuple[str, float]], *, did: str, run_did: str, lower_is_better: bool
) -> tuple[str, tuple[str, ...]]:
    """The evidence in words, and the peer runs it cites (best first)."""
    if kind == "own_stretch":
        assert stretch is not None
        return f"In its best stretch of {stretch.window.steps:,.0f} steps the run {did}; over the whole run it {run_did}.", ()
    runs = "A comparable finished run" if len(pv) == 1 else f"{len(pv)} comparable finished runs"
    quartile = "" if len(pv) == 1 else " (their better quartile)"
    ordered = sorted(pv, key=lambda x: x[1] if lower_is_better else -x[1])
    return f"{runs} of this project {did}{quartile}; this run {run_did}.", tuple(rid for rid, _ in ordered)


def per_step_recoverable(
    *,
    label: str,
    usd_cents: int,
    run_ns: float | None,
    stretch: Stretch | None,
    peers: Sequence[Peer],
    attr: str,
    cap: float,
) -> Recoverable:
    """A per-step wait (data stall, exposed comm, host overhead): priced at the best demonstrated
    ns per step, ``usd x (1 - reference / run_value)``."""
    if not run_ns:
        return none_recoverable(f"Nothing spent on {label}: nothing to recover.", "ms/step", _ms(run_ns))
    if usd_cents <= 0:  # time was spent, but it cost under a cent: say so, not "nothing"
        return none_recoverable(
            f"The run spent {duration_text(run_ns)} per step on {label}, but that rounds to $0.00 (under a cent, "
            "or time no price covers): too little to count as recoverable.",
            "ms/step",
            _ms(run_ns),
        )
    pv = _peer_values(peers, attr)
    levels = _levels(stretch, pv, lower_is_better=True)
    if levels is None:
        return none_recoverable(
            f"No evidence: the run has fewer than {STRETCH_MIN_STEPS} steps per rank to compare stretches "
            "and no comparable finished run of the project on this GPU model.",
            "ms/step",
            _ms(run_ns),
        )
    ref, kind, low_ref, high_ref = levels.reference, levels.kind, levels.conservative, levels.best

    def fraction(r: float) -> float:
        return 1.0 - r / run_ns

    point = _cents_at(usd_cents, fraction(ref))
    summary, peer_ids = _demonstrated(
        kind, stretch, pv, did=f"spent {duration_text(ref)} per step on {label}", run_did=f"spent {duration_text(run_ns)}",
        lower_is_better=True,
    )  # fmt: skip
    if point == 0:
        summary += " No better level was demonstrated, so none of it is counted as recoverable."
    ev = CategoryEvidence(
        kind, summary, "ms/step", run_ns / 1e6, ref / 1e6, low_ref / 1e6, high_ref / 1e6,
        stretch.window if kind == "own_stretch" and stretch else None, peer_ids,
    )  # fmt: skip
    rec = Recoverable(
        point,
        min(_cents_at(usd_cents, fraction(low_ref)), point),
        max(_cents_at(usd_cents, fraction(high_ref)), point),
        ev,
        "usd * max(0, 1 - reference_ms_per_step / run_ms_per_step)",
        {"usd": usd_cents / 100, "reference_ms_per_step": ref / 1e6, "run_ms_per_step": run_ns / 1e6},
    )  # fmt: skip
    return _capped(rec, usd_cents, cap)


def compute_recoverable(
    *,
    compute_cents: int,
    inefficiency_cents: int,
    run_mfu: float | None,
    target_mfu: float,
    stretch: Stretch | None,
    peers: Sequence[Peer],
    cap: float,
) -> Recoverable:
    """Compute inefficiency at the best demonstrated MFU over compute time (never above target):
    ``compute_usd x (1 - run_mfu / reference_mfu)``, at most the inefficiency."""
    if inefficiency_cents <= 0:
        return none_recoverable("No compute inefficiency to recover.", "MFU", run_mfu)
    if not run_mfu:
        return none_recoverable("No evidence: MFU is unknown (no FLOPs or no peak for this GPU and dtype).", "MFU")
    pv = _peer_values(peers, "mfu_compute")
    levels = _levels(stretch, pv, lower_is_better=False)
    if levels is None:
        return none_recoverable(
            f"No evidence: fewer than {STRETCH_MIN_STEPS} steps per rank and no comparable finished run; the "
            f"target MFU ({target_mfu:.0%}) alone is not a demonstrated level.",
            "MFU",
            run_mfu,
        )
    kind = levels.kind
    ref = min(levels.reference, target_mfu)
    low_ref = min(levels.conservative, ref)

    def cents(r: float) -> int:
        return min(_cents_at(compute_cents, 1.0 - run_mfu / r), inefficiency_cents) if r > 0 else 0

    point = cents(ref)
    summary, peer_ids = _demonstrated(
        kind, stretch, pv, did=f"ran at {percent_text(ref)} MFU over compute time",
        run_did=f"averaged {percent_text(run_mfu)}", lower_is_better=False,
    )  # fmt: skip
    if point == 0:
        summary += " No better level was demonstrated, so none of it is counted as recoverable."
    summary += f" The high end assumes the target MFU of {target_mfu:.0%}."
    ev = CategoryEvidence(
        kind, summary, "MFU", run_mfu, ref, low_ref, target_mfu,
        stretch.window if kind == "own_stretch" and stretch else None, peer_ids,
    )  # fmt: skip
    rec = Recoverable(
        point,
        min(cents(low_ref), point),
        max(cents(target_mfu), point),
        ev,
        "min(compute_usd * max(0, 1 - run_mfu / reference_mfu), compute_inefficiency_usd)",
        {"compute_usd": compute_cents / 100, "compute_inefficiency_usd": inefficiency_cents / 100,
         "run_mfu": run_mfu, "reference_mfu": ref},
    )  # fmt: skip
    return _capped(rec, inefficiency_cents, cap)


def median_recoverable(*, label: str, usd_cents: int, run_s: float | None, project: Sequence[Peer], attr: str) -> Recoverable:
    """Start-up or tear-down idle at the project's median: ``usd x (1 - median / run_value)``."""
    if not run_s:
        return none_recoverable(f"No {label}: nothing to recover.", "s", run_s)
    if usd_cents <= 0:  # time was spent, but it cost under a cent: say so, not "No start-up"
        return none_recoverable(
            f"The run spent {seconds_text(run_s)} on {label}, but that rounds to $0.00 (under a cent, or time no "
            "price covers): too little to count as recoverable.",
            "s",
            run_s,
        )
    pv = _peer_values(project, attr)
    if not pv:
        return none_recoverable(f"No evidence: no other finished run of the project to compare its {label} with.", "s", run_s)
    values = np.array([v for _, v in pv])
    median, p75, best = float(np.median(values)), float(np.percentile(values, 75)), float(values.min())

    def cents(r: float) -> int:
        return _cents_at(usd_cents, 1.0 - r / run_s)

    point = cents(median)
    runs = "The project's other finished run" if len(pv) == 1 else f"The project's {len(pv)} other finished runs"
    summary = f"{runs} took a median {seconds_text(median)} of {label}; this run took {seconds_text(run_s)}."
    if point == 0:
        summary += " This run was no slower, so none of it is counted as recoverable."
    ev = CategoryEvidence(
        "project_median", summary, "s", run_s, median, p75, best, None,
        tuple(rid for rid, _ in sorted(pv, key=lambda x: x[1])),
    )  # fmt: skip
    return Recoverable(
        point, min(cents(p75), point), max(cents(best), point), ev,
        "usd * max(0, 1 - project_median_seconds / run_seconds)",
        {"usd": usd_cents / 100, "project_median_seconds": median, "run_seconds": run_s},
    )  # fmt: skip


def windows_stretch(
    windows: WindowSums,
    *,
    num_fields: Sequence[str],
    den_fields: Sequence[str] | None,
    ranks: int,
    start_ns: int,
    lower_is_better: bool,
    scale: float = 1.0,
    plan: StretchPlan | None = None,
) -> Stretch | None:
    """Best stretch of ``Σ num_fields / Σ den_fields`` (per step when ``den_fields`` is None);
    ``plan``: ``stretch_plan`` of the windows' steps and STRETCH_MIN_STEPS * ranks."""
    length = windows.field("steps")
    num = sum((windows.field(f) for f in num_fields), np.zeros_like(length)) * scale
    den = length if den_fields is None else sum((windows.field(f) for f in den_fields), np.zeros_like(length))
    return best_stretch(
        num, den, length, need=STRETCH_MIN_STEPS * ranks, lower_is_better=lower_is_better,
        start_ns=start_ns, width_ns=windows.width_ns, ranks=ranks, plan=plan,
    )  # fmt: skip


def _idle_summary(parts: Mapping[str, Recoverable]) -> Recoverable:
    """Idle's figure: the sum of its parts, named by the part that recovers most."""
    cents = sum(r.cents for r in parts.values())
    low = sum(r.low_cents for r in parts.values())
    high = sum(r.high_cents for r in parts.values())
    named = {k: r for k, r in parts.items() if r.evidence.kind != NO_EVIDENCE}
    if not named:
        return Recoverable(0, 0, 0, CategoryEvidence(
            NO_EVIDENCE, "No evidence that any of the idle time could have been avoided: " + " ".join(
                r.evidence.summary for r in parts.values()), "s", None, None, None, None))  # fmt: skip
    _lead_label, lead = max(named.items(), key=lambda kv: (kv[1].cents, kv[1].high_cents))
    summary = " ".join(f"{_IDLE_WORDS.get(k, k)} — {r.evidence.summary}" for k, r in named.items())
    ev = lead.evidence
    return Recoverable(
        cents, low, high,
        CategoryEvidence(ev.kind, summary, ev.unit, ev.run_value, ev.reference_value, ev.low_reference,
                         ev.high_reference, ev.window, ev.peer_run_ids, any(r.evidence.capped for r in parts.values())),
        "Σ idle parts' recoverable (" + ", ".join(named) + ")",
        {f"{k}_recoverable_usd": r.cents / 100 for k, r in parts.items()},
    )  # fmt: skip


_IDLE_WORDS = {
    "startup": "Start-up",
    "teardown": "Tear-down",
    "gap": "Gaps between steps",
    "no_steps": "No steps",
    "rework": "Rework (steps an earlier attempt already computed)",
    "restart": "Restart (start-up and tear-down around a failure)",
    "phase:checkpoint": "Checkpoint saves",
    "phase:restore": "Checkpoint restores",
}


def assess(
    *,
    windows: WindowSums,
    start_ns: int,
    ranks: int,
    peak_flops_per_rank: float | None,
    cat_cents: Mapping[str, int],
    idle_cents: Mapping[str, int],
    profile: RunProfile,
    straggler_cents: int,
    target_mfu: float,
    refs: References,
    caps: Mapping[str, float],
    straggler_own_cents: Mapping[str, int] | None = None,
) -> tuple[dict[str, Recoverable], dict[str, Recoverable]]:
    """Each category's recoverable figure, and each idle part's (their sum is idle's)."""
    n = max(ranks, 1)
    peers = [p for p in refs.peers if profile.signature_matches(p.profile)][:PEERS_MAX]

    plan = stretch_plan(windows.field("steps"), STRETCH_MIN_STEPS * n)  # the same for every figure below

    def stretch(fields: Sequence[str]) -> Stretch | None:
        if plan is None:
            return None
        return windows_stretch(
            windows, num_fields=fields, den_fields=None, ranks=n, start_ns=start_ns, lower_is_better=True, plan=plan
        )

    out: dict[str, Recoverable] = {
        "useful_compute": none_recoverable("Useful compute is the work itself: nothing to recover."),
    }
    if peak_flops_per_rank and plan is not None:
        mfu_stretch = windows_stretch(
            windows, num_fields=("flops",), den_fields=("forward_ns", "backward_ns", "optimizer_ns"), ranks=n,
            start_ns=start_ns, lower_is_better=False, scale=1e9 / peak_flops_per_rank, plan=plan,
        )  # fmt: skip
    else:
        mfu_stretch = None
    out["compute_inefficiency"] = compute_recoverable(
        compute_cents=cat_cents["useful_compute"] + cat_cents["compute_inefficiency"],
        inefficiency_cents=cat_cents["compute_inefficiency"],
        run_mfu=profile.mfu_compute,
        target_mfu=target_mfu,
        stretch=mfu_stretch,
        peers=peers,
        cap=caps["compute_inefficiency"],
    )
    for cat, fld, attr, label in (
        ("data_stall", "data_ns", "data_ns_per_step", "waiting for data"),
        ("host_overhead", "host_ns", "host_ns_per_step", "time no stage measured (host overhead)"),
        ("comm_exposed", "comm_ns", "comm_ns_per_step", "gradient sync not hidden behind compute"),
    ):
        out[cat] = per_step_recoverable(
            label=label, usd_cents=cat_cents[cat], run_ns=getattr(profile, attr), stretch=stretch((fld,)),
            peers=peers, attr=attr, cap=caps[cat],
        )  # fmt: skip
    comm = out["comm_exposed"]
    straggler_cents = min(straggler_cents, math.floor(cat_cents["comm_exposed"] * caps["comm_exposed"] + 1e-9))
    if straggler_cents > comm.cents:
        out["comm_exposed"] = Recoverable(
            straggler_cents, min(comm.low_cents, straggler_cents) if comm.low_cents else straggler_cents,
            max(comm.high_cents, straggler_cents),
            CategoryEvidence(
                "straggler",
                f"The other ranks waited ${straggler_cents / 100:,.2f} for slower ranks to reach the gradient sync "
                "(measured arrival times).", "ms/step", comm.evidence.run_value, None, None, None,
            ),
            "max(stragglers caused_wait_usd, per-step evidence)",
            {"stragglers_caused_wait_usd": straggler_cents / 100, "per_step_recoverable_usd": comm.cents / 100},
        )  # fmt: skip

    for cat, own in (straggler_own_cents or {}).items():
        fig = out[cat]
        own = min(own, math.floor(cat_cents[cat] * caps[cat] + 1e-9))
        if own > fig.cents:
            out[cat] = Recoverable(
                own, min(fig.low_cents, own) if fig.low_cents else own, max(fig.high_cents, own),
                CategoryEvidence(
                    "straggler",
                    f"A slow rank spent ${own / 100:,.2f} of {cat.replace('_', ' ')} beyond the other ranks' median "
                    "per step (the other ranks show that level on the same steps).", fig.evidence.unit,
                    fig.evidence.run_value, None, None, None,
                ),
                f"max(stragglers own_excess_usd[{cat}], per-step evidence)",
                {"stragglers_own_excess_usd": own / 100, "per_step_recoverable_usd": fig.cents / 100},
            )  # fmt: skip

    parts: dict[str, Recoverable] = {}
    for label, cents in idle_cents.items():
        if label in ("startup", "teardown"):
            attr = f"{label}_s"
            parts[label] = median_recoverable(
                label=_IDLE_WORDS[label].lower(), usd_cents=cents, run_s=getattr(profile, attr),
                project=refs.project, attr=attr,
            )  # fmt: skip
        elif label == "gap":
            parts[label] = per_step_recoverable(
                label="gaps between steps", usd_cents=cents, run_ns=profile.gap_ns_per_step, stretch=None,
                peers=peers, attr="gap_ns_per_step", cap=1.0,
            )  # fmt: skip
        elif label in ("rework", "restart", "phase:checkpoint", "phase:restore"):
            # A job's lost work: its job-level advice (core/checkpointing.py) claims these dollars,
            # so the run's own counterfactual does not (a dollar is claimed once).
            parts[label] = none_recoverable(
                f"{_IDLE_WORDS.get(label, label)}: work the job lost to failures and checkpoints; what of it can be "
                "saved is the job's checkpoint advice, not counted here."
            )
        elif label.startswith("phase:"):
            parts[label] = none_recoverable(f"'{label[6:]}' phases are work the run asked for: not counted as recoverable.")
        else:
            parts[label] = none_recoverable("No step telemetry: nothing to compare with.")
    idle = _idle_summary(parts)
    out["idle"] = _capped(idle, cat_cents["idle"], caps["idle"])
    return out, parts

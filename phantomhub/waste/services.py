"""Analysis and rollups: raw telemetry + price book → RunAnalysis, RunDay, ProjectDay.

`run_analyze` is idempotent: it recomputes from stored rows (incrementally when it safely can)
and overwrites its outputs, so running it twice, or again after a worker died midway, stores the
same thing. Incremental analysis is used only when nothing the result depends on changed (the
run's configuration fingerprint) and every stored row of every rank is either already folded in
or newer than what was folded in — checked exactly against the per-rank row counts that ingest
keeps in the same transaction as the rows.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from phantomhub.pricing.catalog import gpu_resolve, peak_flops
from phantomhub.pricing.selectors import PriceSegment as PriceSegmentRow
from phantomhub.pricing.selectors import gpu_key_for, run_price_segments
from phantomhub.runtime import collector_paused
from phantomhub.telemetry.bounds import EARLIEST, LATEST, MAX_SPAN, MAX_SPAN_NS, moment_of, ns_of
from phantomhub.telemetry.models import EventKind, Run, RunEvent, RunStatus
from phantomhub.telemetry.selectors import samples_arrays, steps_rows_after
from phantomhub.waste.core.accumulator import MEM_COLUMNS
from phantomhub.waste.core.evidence import PEERS_MAX, Peer, References, RunProfile
from phantomhub.waste.core.inputs import OPTIONAL_COLUMNS
from phantomhub.waste.core.model import (
    Analysis,
    NotAppendable,
    Phase,
    PriceSegment,
    RunAccumulator,
    RunConfig,
    StepBatches,
    StepColumns,
    SystemSamples,
    analysis_from,
    recoverability_check,
    world_size_for,
)
from phantomhub.waste.core.recommendations import recommend
from phantomhub.waste.core.result import json_bytes, to_jsonable
from phantomhub.waste.core.state import StateParts, arrays_pack, arrays_unpack, state_pack, state_unpack
from phantomhub.waste.models import (
    RunAnalysis,
)
from phantomhub.waste.pass_io import (
    JobContext,
    PassInputs,
    PassOutputs,
    Policy,
    RankRows,
    StateWrite,
    analysis_lock,
    pass_inputs_read,
    pass_outputs_write,
)
from phantomhub.waste.rollups import run_days
from phantomhub.waste.scheduling import analyses_invalidate

log = logging.getLogger(__name__)
NS = 10**9
# Price segments are resolved up to this far past allocation start, so a live run's configuration
# (and with it the incremental state) does not change every time the run grows.
PRICE_HORIZON = timedelta(days=400)
_OPTIONAL = ("data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns", "tokens", "samples",
             "mem_allocated", "mem_reserved", "mem_peak", "alloc_retries")  # fmt: skip


def policy_of(inputs: PassInputs) -> Policy:
    return Policy(target_mfu=inputs.target_mfu, recoverability=recoverability_check(inputs.recoverability))


# A worker process keeps the price segments it computed for a run's pricing inputs under the price
# book's version (pass_io: entry count, highest id, latest updated_at): every change made through
# pricing/services.py (create, save, delete) moves it. A change written to the table by hand in
# SQL without touching updated_at is not seen until another change or a restart.
_PRICE_CACHE_MAX = 4096
_price_cache: dict[tuple[Any, ...], list[PriceSegmentRow]] = {}


def _run_price_segments(run: Run, prices_version: str | None) -> list[PriceSegmentRow]:
    end = run.allocation_start + PRICE_HORIZON
    if prices_version is None:
        return run_price_segments(run=run, end=end)
    key = (prices_version, run.gpu_model, run.provider, run.region, run.pricing_tier, run.allocation_start,
           run.price_override_usd_per_gpu_hour)  # fmt: skip
    hit = _price_cache.get(key)
    if hit is None:
        if len(_price_cache) >= _PRICE_CACHE_MAX:
            _price_cache.clear()
        hit = _price_cache[key] = run_price_segments(run=run, end=end)
    return list(hit)


def run_config_and_prices(
    run: Run,
    policy: Policy,
    ranks_seen: int = 0,
    *,
    with_phases: bool = True,
    prices_version: str | None = None,
    job: JobContext | None = None,
) -> tuple[RunConfig, list[PriceSegmentRow]]:
    """The model's configuration for the run, and the price-book segments it was priced with.

    ``job``: the run's place among its job's attempts (``pass_io.JobContext``), which decides its
    rework, its restart labels and where its billing starts (``job_fields``).

    ``prices_version`` (the price book's, read with the pass's inputs) lets a worker reuse the
    segments it computed before. ``ranks_seen`` (ranks with step rows) above the declared world size replaces it: one scaling
    for billing and FLOPs (``world_size_for``). ``with_phases=False``: the caller knows the run has no
    phase events (no read for them)."""
    spec = gpu_resolve(run.gpu_model) if run.gpu_model else None
    peak = peak_flops(spec, run.dtype) if spec and run.dtype else None
    segments = _run_price_segments(run, prices_version)
    phases = [
        Phase(name, t_start_ns, t_start_ns + dur_ns)
        for name, t_start_ns, dur_ns in (
            RunEvent.objects.filter(run=run, kind=EventKind.PHASE)
            .order_by("t_start_ns", "event_id")
            .values_list("name", "t_start_ns", "dur_ns")
            if with_phases
            else []
        )
        if t_start_ns is not None and dur_ns is not None
    ]
    config = RunConfig(
        gpu_count=run.gpu_count,
        world_size=world_size_for(run.world_size, ranks_seen, run.gpu_count)[0],
        allocation_start_ns=billed_from_ns(run, job),
        price_segments=tuple(
            PriceSegment(ns_of(s.start), ns_of(s.end), s.usd_per_gpu_hour) for s in segments if s.usd_per_gpu_hour is not None
        ),
        phases=tuple(phases),
        peak_flops_per_gpu=peak,
        target_mfu=policy.target_mfu,
        gpu_memory_bytes=spec.memory_bytes if spec else None,
        dtype=run.dtype or None,
        **job_fields(run, job),
    )
    return config, segments


def billed_from_ns(run: Run, job: JobContext | None) -> int:
    """Where the run's billing starts. Alone: its allocation start. An attempt of a job is clamped
    so no GPU-second is billed twice (docs/waste-model.md, "Jobs"): ``max(allocation_start,
    min(previous attempts' latest end, started_at))``; the time between an earlier attempt's end
    and a later allocation start is billed by no one."""
    start = ns_of(run.allocation_start)
    if job is None or job.previous_end is None:
        return start
    return max(start, min(ns_of(job.previous_end), ns_of(run.started_at)))


def job_fields(run: Run, job: JobContext | None) -> dict[str, Any]:
    """The RunConfig fields of an attempt: rework through the highest step an earlier attempt
    reached; start-up is a restart's when an attempt came before, tear-down when one comes after
    a run that did not finish (failed or crashed)."""
    if job is None:
        return {}
    return {
        "rework_through_step": job.previous_last_step if job.previous else None,
        "restart_before_first_step": job.previous > 0,
        "restart_after_last_step": job.has_next and run.status in (RunStatus.FAILED, RunStatus.CRASHED),
    }


def _step_columns(rank: int, host: str, arrays: dict[str, np.ndarray], after_ns: int | None = None) -> tuple[StepColumns, int]:
    """The rows as model columns, and how many were left out.

    The model needs start times that rise with the step number. Ingest checks that inside a
    batch; rows of different batches that break it (a clock jump, a restarted job reusing step
    numbers) are left out here, counted, rather than failing the whole analysis. ``after_ns`` is
    the start of the last row already folded in (incremental analysis).
    """
    t = arrays["t_start_ns"]
    floor = np.maximum.accumulate(np.concatenate(([after_ns if after_ns is not None else np.iinfo(np.int64).min], t)))[:-1]
    keep = t > floor
    dropped = int(len(t) - keep.sum())
    if dropped:
        arrays = {name: values[keep] for name, values in arrays.items()}
    cols: dict[str, Any] = {"step": arrays["step"], "t_start_ns": arrays["t_start_ns"]}
    dur = arrays["dur_ns"]
    if (dur < 0).any():  # a step without dur_ns lasts until the next step starts (or 0 for the last)
        nxt = np.append(arrays["t_start_ns"][1:], arrays["t_start_ns"][-1])
        dur = np.where(dur < 0, nxt - arrays["t_start_ns"], dur)
    cols["dur_ns"] = dur
    for name in _OPTIONAL:
        values = arrays[name]
        known = values >= 0
        if known.any():
            cols[name] = np.where(known, values, 0)
    if np.isfinite(arrays["flops"]).any():
        cols["flops"] = arrays["flops"]
    return StepColumns(rank=rank, host=host, **cols), dropped


def _samples(run: Run, since_ns: int, hosts: dict[int, str], pruned: bool | None) -> tuple[list[SystemSamples], int]:
    # Through the telemetry selector, so that a run whose raw rows were archived and pruned is
    # re-analysed with its samples read back from the archive.
    cols = samples_arrays(run_id=run.pk, since_ns=since_ns, pruned=pruned)
    t_ns = cols["t_ns"]
    if not len(t_ns):
        return [], since_ns
    rank, device = cols["rank"], cols["device"]
    # Rows come ordered by (rank, device, t_ns): each (rank, device) is one contiguous slice.
    change = np.flatnonzero((np.diff(rank) != 0) | (np.diff(device) != 0)) + 1
    bounds = [0, *change.tolist(), len(t_ns)]

    def column(name: str, lo: int, hi: int) -> np.ndarray | None:
        arr = np.asarray(cols[name][lo:hi], dtype=np.float64)
        return arr if np.isfinite(arr).any() else None

    out: list[SystemSamples] = []
    for lo, hi in itertools.pairwise(bounds):
        r, d = int(rank[lo]), int(device[lo])
        out.append(
            SystemSamples(
                host=hosts.get(r, f"rank-{r}"),
                t_ns=t_ns[lo:hi].astype(np.int64),
                gpu_util_pct=column("gpu_util_pct", lo, hi) if d >= 0 else None,
                cpu_other_pct=column("cpu_other_pct", lo, hi) if d < 0 else None,
                cpu_steal_pct=column("cpu_steal_pct", lo, hi) if d < 0 else None,
                rank=r if d >= 0 else None,
            )
        )
    return out, int(t_ns.max())


REFERENCES_MAX = PEERS_MAX * 4


def references_from(rows: list[tuple[str, str, Any]], gpu_key: str) -> References:
    """Finished runs of the run's project that may demonstrate better levels (evidence.py):
    peer candidates (same GPU model; the model keeps those with a comparable step) and the
    project's runs (for start-up medians). ``rows``: at most REFERENCES_MAX of the project's
    finished runs with a profile, newest first (read with the pass's inputs)."""
    project: list[Peer] = []
    peers: list[Peer] = []
    for run_id, key, raw in rows:
        profile = RunProfile.from_json(raw) if isinstance(raw, dict) else None
        if profile is None:
            continue
        peer = Peer(str(run_id), profile)
        project.append(peer)
        if key == gpu_key:
            peers.append(peer)
    return References(peers=tuple(peers), project=tuple(project))


@dataclass
class LoadedState:
    """What an incremental pass starts from: the accumulator, the service's bookkeeping, and
    the stored bytes (to rewrite only the parts that changed)."""

    acc: RunAccumulator
    rank_rows: dict[int, int]
    last_step: dict[int, int]
    samples_t: int
    steps_end_ns: int
    dropped: int
    windows: bytes  # as stored (rewritten only when they changed)
    # The days this run's RunDay rows cover, as last written (None: read them from the table).
    days: set[date] | None = None


def _state_load(stored: tuple[bytes, bytes, bytes] | None, config: RunConfig) -> LoadedState | None:
    """The stored state (header, ranks, windows) if it was built under ``config`` and this
    version can read it."""
    if stored is None:
        return None
    try:
        header = orjson.loads(stored[0])
        if header.get("config") != config.fingerprint():
            return None
        ranks = arrays_unpack(stored[1])
        acc = state_unpack(StateParts(header, ranks, arrays_unpack(stored[2])))
        svc = header["service"]
        days = {date.fromisoformat(d) for d in svc["days"]} if "days" in svc else None
    except (NotAppendable, KeyError, TypeError, ValueError, IndexError):
        return None  # a state saved by another version of the model (or unreadable): start over
    return LoadedState(
        acc=acc,
        rank_rows=dict(zip(ranks["svc_rank"].tolist(), ranks["svc_rows"].tolist(), strict=True)),
        last_step=dict(zip(ranks["svc_rank"].tolist(), ranks["svc_last_step"].tolist(), strict=True)),
        samples_t=int(svc["samples_t"]),
        steps_end_ns=int(svc["steps_end_ns"]),
        dropped=int(svc["dropped"]),
        windows=stored[2],
        days=days,
    )


def _state_write(
    loaded: LoadedState | None,
    parts: StateParts,
    *,
    steps_changed: bool,
    rank_rows: dict[int, int],
    last_step: dict[int, int],
    service: dict[str, Any],
) -> StateWrite:
    """The state to store (``parts``: packed with ranks when ``steps_changed`` or nothing was
    loaded); of a loaded one, the rank arrays are rewritten only when steps arrived and the
    windows only when they changed (a pass with only a new sample writes the small header)."""
    header = orjson.dumps({**parts.header, "service": service})
    windows = arrays_pack(parts.windows)
    ranks = None
    if loaded is None or steps_changed:
        svc_rank = sorted(rank_rows)
        ranks = arrays_pack(
            {
                **parts.ranks,
                "svc_rank": np.array(svc_rank, dtype=np.int64),
                "svc_rows": np.array([rank_rows[r] for r in svc_rank], dtype=np.int64),
                "svc_last_step": np.array([last_step[r] for r in svc_rank], dtype=np.int64),
            }
        )
    if loaded is None:
        return StateWrite(header=header, ranks=ranks, windows=windows, new=True)
    return StateWrite(header=header, ranks=ranks, windows=windows if windows != loaded.windows else None, new=False)


class AnalysisRefused(ValueError):
    """The run's stored data cannot be analysed (out-of-range times); the message says why."""


def _span_check(run: Run, end_ns: int | None = None) -> None:
    # The span bounds of telemetry/bounds.py: ingest refuses telemetry outside them, and a stored
    # run beyond them fails its analysis (recorded, isolated) instead of looping for ever.
    if not EARLIEST <= run.allocation_start < LATEST:
        raise AnalysisRefused(f"allocation_start {run.allocation_start.isoformat()} is outside 2000-01-01..2100-01-01")
    if end_ns is not None and end_ns - ns_of(run.allocation_start) > MAX_SPAN_NS:
        raise AnalysisRefused(
            f"the run's telemetry spans more than {MAX_SPAN.days} days from allocation_start "
            f"({run.allocation_start.isoformat()} to {moment_of(min(end_ns, ns_of(LATEST))).isoformat()})"
        )


@collector_paused()
def run_analyze(*, run_id: uuid.UUID) -> RunAnalysis | None:
    """Analyse one run and store the result, its recommendations and its per-day costs.

    Without cyclic garbage collection inside the pass (phantomhub/runtime.py): a collection
    there finds almost nothing and was most of a big run's slowest incremental passes."""
    with transaction.atomic():
        row = analysis_lock(run_id)
        # Read after taking the lock: the seq read here is the one we analyse up to. One read
        # (PostgreSQL) of the run, its settings, ranks, an aggregate of its events (last
        # timestamp, OOMs, whether it has phases), its stored state and its project's references.
        inputs = pass_inputs_read(run_id, REFERENCES_MAX) if row is not None else None
        if row is None or inputs is None:
            return None
        run, ranks, pruned = inputs.run, inputs.ranks, inputs.pruned
        _span_check(run)
        seq = run.ingest_seq
        policy = policy_of(inputs)
        ranks_seen = sum(1 for r in ranks.values() if r.step_rows > 0)
        config, price_rows = run_config_and_prices(
            run, policy, ranks_seen, with_phases=inputs.phase_count > 0, prices_version=inputs.prices_version, job=inputs.job
        )
        hosts = {rank: r.host or f"rank-{rank}" for rank, r in ranks.items()}

        loaded = _state_load(inputs.state, config)
        if loaded is not None:
            acc, rank_rows, last_step, full = loaded.acc, loaded.rank_rows, loaded.last_step, False
            samples_since, steps_end_ns, dropped = loaded.samples_t, loaded.steps_end_ns, loaded.dropped
        else:
            acc, rank_rows, last_step, full = RunAccumulator(config), {}, {}, True
            samples_since, steps_end_ns, dropped = 0, 0, 0

        fetched = _fetch_new_rows(ranks, last_step, rank_rows, full, run.pk, hosts, pruned)
        if fetched is None:  # a late batch landed below what was folded in: start over
            acc, rank_rows, last_step, samples_since, steps_end_ns, full = RunAccumulator(config), {}, {}, 0, 0, True
            dropped = 0
            fetched = _fetch_new_rows(ranks, {}, {}, True, run.pk, hosts, pruned) or FetchedRows()
        fresh = fetched
        try:
            # A from-scratch pass aligns ranks once at the end (the model's rule for full runs).
            acc.add_steps_many(fresh.batches(), align=not full)
        except NotAppendable:
            acc, rank_rows, last_step, full = RunAccumulator(config), {}, {}, True
            fresh = _fetch_new_rows(ranks, {}, {}, True, run.pk, hosts, pruned) or FetchedRows()
            acc.add_steps_many(fresh.batches(), align=False)
            samples_since, steps_end_ns, dropped = 0, 0, 0
        if full:
            # Fold every step all ranks have passed into the straggler counters now, as the live
            # path does batch by batch: the stored state stays small (no tail of every row).
            acc.align_known()
        for cols, fetched_rows, fetched_last, fetched_dropped in fresh:
            rank_rows[cols.rank] = rank_rows.get(cols.rank, 0) + fetched_rows
            last_step[cols.rank] = fetched_last
            dropped += fetched_dropped
            if len(cols):
                steps_end_ns = max(steps_end_ns, int((cols.t_start_ns + cols.dur_ns).max()))
        samples, samples_since = _samples(run, samples_since, hosts, pruned)
        acc.add_samples_many(samples)

        end_ns = _run_end_ns(run, steps_end_ns, samples_since, config.allocation_start_ns, inputs.last_event_ns)
        _span_check(run, end_ns)
        if run.status == RunStatus.CRASHED and run.finished_at is None:
            Run.objects.filter(pk=run.pk).update(finished_at=moment_of(end_ns))
        oom_count = inputs.oom_count
        # The state is packed before the analysis finishes the accumulator in place (no copy).
        steps_changed = full or any(len(cols) for cols, _, _, _ in fresh)
        parts = state_pack(acc, ranks=steps_changed)
        reused = sum(r.reused_step_rows for r in ranks.values())
        analysis = analysis_from(
            acc,
            end_ns=end_ns,
            recoverability=policy.recoverability,
            oom_count=oom_count,
            refs=references_from(inputs.references, gpu_key_for(run.gpu_model)),
            dropped_rows={"non_rising_start": dropped, "reused_step": reused},
            extra_warnings=world_size_for(run.world_size, ranks_seen, run.gpu_count)[1],
            consume=True,
        )
        serialized = _store(row, run, inputs.team_id, analysis, seq)
        day_rows, prune_days, marked = run_days(
            run, inputs.team_id, row, analysis, config, price_rows, old_days=loaded.days if loaded and not full else None
        )
        service: dict[str, Any] = {
            "samples_t": samples_since,
            "steps_end_ns": steps_end_ns,
            "dropped": dropped,
            "days": [d.day.isoformat() for d in day_rows],
        }
        if inputs.job is not None:
            service["job_facts"] = _job_neighbours_update(run, inputs.job, inputs.state, last_step)
        state = _state_write(
            loaded if not full else None,
            parts,
            steps_changed=steps_changed,
            rank_rows=rank_rows,
            last_step=last_step,
            service=service,
        )
        pass_outputs_write(PassOutputs(row, serialized, day_rows, prune_days, marked, timezone.now(), state))
    return row


def _job_neighbours_update(
    run: Run, job: JobContext, stored: tuple[bytes, bytes, bytes] | None, last_step: dict[int, int]
) -> dict[str, Any]:
    """What this attempt tells its neighbours (its job, status, end, highest step), and, when
    that changed since its last pass, their analyses marked stale (the sweep then redoes them):
    the attempts after it (their rework, billing start and restart labels read it) and, when it
    has just joined the job, the attempt before it (whose tear-down may now be a restart's).

    The marks are written once this pass has committed, holding no lock: two attempts' passes
    marking each other inside their transactions could deadlock on their analysis rows. A worker
    killed in the instant between the commit and the marks leaves them unmarked until this
    attempt's facts change again (docs/waste-model.md, "Jobs", limits)."""
    facts = {
        "job": str(job.job_id),
        "status": run.status,
        "end": (run.finished_at or run.last_seen_at).isoformat(),
        "last_step": max(last_step.values(), default=None),
    }
    old = None
    if stored is not None:
        try:
            old = orjson.loads(stored[0]).get("service", {}).get("job_facts")
        except orjson.JSONDecodeError:
            old = None
    if facts == old:
        return facts
    joined = old is None or old.get("job") != facts["job"]
    attempts = Run.objects.filter(job_id=job.job_id)
    ids: list[uuid.UUID] = []
    if job.has_next:
        ids += attempts.filter(Q(started_at__gt=run.started_at) | Q(started_at=run.started_at, id__gt=run.pk)).values_list(
            "pk", flat=True
        )
    if joined and job.previous:
        before = attempts.filter(Q(started_at__lt=run.started_at) | Q(started_at=run.started_at, id__lt=run.pk))
        ids += before.order_by("-started_at", "-id").values_list("pk", flat=True)[:1]
    if ids:
        transaction.on_commit(lambda: analyses_invalidate(run_ids=ids))
    return facts


# A run whose analysis keeps failing is retried with backoff (30 s, 1 min, 2 min, ...) at most
# this many times, then left alone until new telemetry (a higher ingest_seq) or a re-queue.
MAX_ANALYSIS_FAILURES = 5
RETRY_BASE_S = 30


def run_analyze_isolated(*, run_id: uuid.UUID) -> RunAnalysis | None:
    """``run_analyze``, except that a failure is recorded on the run (visible on its page and in
    /metrics) and backed off instead of raised: one tenant's bad data never stops the others.
    Database outages are not the run's fault and propagate (the caller retries them)."""
    try:
        return run_analyze(run_id=run_id)
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:
        log.exception("analysis of run %s failed", run_id)
        analysis_failure_record(run_id=run_id, error=f"{type(exc).__name__}: {exc}")
        return None


def analysis_failure_record(*, run_id: uuid.UUID, error: str) -> None:
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        return
    with transaction.atomic():
        row, _ = RunAnalysis.objects.select_for_update().get_or_create(
            run=run, defaults={"project_id": run.project_id, "team_id": run.project.team_id}
        )
        row.failures = row.failures + 1 if row.failed_seq == run.ingest_seq else 1
        row.failed_seq = run.ingest_seq
        row.error = error[:2000]
        row.retry_at = timezone.now() + timedelta(seconds=RETRY_BASE_S * 2 ** (row.failures - 1))
        row.save(update_fields=["failures", "failed_seq", "error", "retry_at"])


class FetchedRows(list[tuple[StepColumns, int, int, int]]):
    """New rows per rank (columns, rows fetched, last step fetched, rows left out); ``filled``,
    when set, is the batches' columns concatenated in order with every column present (what the
    accumulator would build from them again: ``StepBatches``)."""

    filled: dict[str, np.ndarray] | None = None
    lengths: np.ndarray | None = None  # with ``filled``: the rows of each batch

    def batches(self) -> list[StepColumns]:
        cols = [c for c, _, _, _ in self]
        if self.filled is None or self.lengths is None:
            return cols
        return StepBatches(cols, self.filled, self.lengths)


def _fetch_new_rows(
    ranks: dict[int, RankRows],
    last_step: dict[int, int],
    rank_rows: dict[int, int],
    full: bool,
    run_id: uuid.UUID,
    hosts: dict[int, str],
    pruned: bool | None = None,
) -> FetchedRows | None:
    """New rows per rank, or None when a rank's count shows rows we cannot append.

    One read for all ranks, and only of ranks whose stored row count moved: a live 1,024-rank run
    whose new telemetry is a sample, an event or one step per rank costs one query, not 1,024."""
    if full:
        after = {rank: -1 for rank in ranks}
    else:
        after = {rank: last_step.get(rank, -1) for rank, rr in ranks.items() if rr.step_rows != rank_rows.get(rank, 0)}
    read, bounds, rows = steps_rows_after(run_id=run_id, after=after, pruned=pruned)
    counts = np.diff(bounds).tolist()
    # On a full read, rows committed between the count and the read are fine: the read is the truth.
    if not full and any(rank_rows.get(rank, 0) + n != ranks[rank].step_rows for rank, n in zip(read, counts, strict=True)):
        return None
    with_rows = [i for i, n in enumerate(counts) if n]
    if len(with_rows) < 8:
        out = FetchedRows()
        edges = bounds.tolist()
        for i in with_rows:
            arrays = {name: values[edges[i] : edges[i + 1]] for name, values in rows.items()}
            cols, dropped = _step_columns(read[i], hosts[read[i]], arrays)
            out.append((cols, counts[i], int(arrays["step"][-1]), dropped))
        return out
    if len(with_rows) < len(read):  # ranks without new rows take no room in the columns
        bounds = np.append(bounds[:-1][with_rows], bounds[-1])
        read = [read[i] for i in with_rows]
    return _step_columns_many(read, bounds, rows, hosts)


def _step_columns_many(ranks: list[int], bounds: np.ndarray, cat: dict[str, np.ndarray], hosts: dict[int, str]) -> FetchedRows:
    """``_step_columns`` of many ranks in one vectorised pass (a 1,024-rank run's one new step per
    rank), on their rows as read (``steps_rows_after``: ranks[i]'s rows are bounds[i]:bounds[i + 1],
    at least one each), falling back to the one-rank path for a rank whose start times do not
    rise. The batches' columns are views of one set of columns, handed on as ``filled``."""
    first = bounds[:-1]
    lengths = np.diff(bounds)
    t = cat["t_start_ns"]
    inner = np.ones(len(t), dtype=bool)
    inner[first] = False
    falls = np.logical_or.reduceat(~(np.diff(t, prepend=t[0]) > 0) & inner, first)
    cols: dict[str, Any] = {"step": cat["step"], "t_start_ns": t}
    dur = cat["dur_ns"]
    if (dur < 0).any():  # a step without dur_ns lasts until the next step starts (or 0 for the last)
        nxt = np.append(t[1:], t[-1])
        nxt[bounds[1:] - 1] = t[bounds[1:] - 1]
        dur = np.where(dur < 0, nxt - t, dur)
    cols["dur_ns"] = dur
    filled = dict(cols)
    present: dict[str, list[bool]] = {}
    for name in _OPTIONAL:
        values = cat[name]
        known = values >= 0
        in_rank = np.logical_or.reduceat(known, first)
        present[name] = in_rank.tolist()
        cols[name] = filled[name] = values if known.all() else np.where(known, values, 0)
        if name in MEM_COLUMNS and not in_rank.all():  # a rank without the column: -1 (unmeasured)
            filled[name] = np.where(np.repeat(in_rank, lengths), cols[name], -1)
    flops_known = np.isfinite(cat["flops"])
    in_rank = np.logical_or.reduceat(flops_known, first)
    present["flops"] = in_rank.tolist()
    cols["flops"] = cat["flops"]
    filled["flops"] = cat["flops"] if in_rank.all() else np.where(np.repeat(in_rank, lengths), cat["flops"], np.nan)
    last_step = cat["step"][bounds[1:] - 1].tolist()
    # Ranks mostly carry the same optional columns: the names are worked out once per pattern.
    pattern = np.zeros(len(ranks), dtype=np.int64)
    for bit, name in enumerate(present):
        pattern |= np.array(present[name], dtype=np.int64) << bit
    names_of: dict[int, tuple[list[str], tuple[str, ...]]] = {}
    for p in set(pattern.tolist()):
        has = {name for bit, name in enumerate(present) if p >> bit & 1}
        names_of[p] = (
            [name for name in cols if name not in present or name in has],
            tuple(c for c in OPTIONAL_COLUMNS if c in has),
        )
    out = FetchedRows()
    spans = bounds.tolist()
    falls_l = falls.tolist()
    for i, (rank, p) in enumerate(zip(ranks, pattern.tolist(), strict=True)):
        lo, hi = spans[i], spans[i + 1]
        if falls_l[i]:
            arrays = {name: values[lo:hi] for name, values in cat.items()}
            step_cols, dropped = _step_columns(rank, hosts[rank], arrays)
            out.append((step_cols, hi - lo, last_step[i], dropped))
            continue
        names, carried = names_of[p]
        picked = {name: cols[name][lo:hi] for name in names}
        out.append((StepColumns.trusted(rank=rank, host=hosts[rank], columns=picked, present=carried), hi - lo, last_step[i], 0))
    if not falls.any():
        out.filled, out.lengths = filled, lengths
    return out


def _run_end_ns(run: Run, steps_end_ns: int, samples_t_ns: int, start_ns: int, last_event_ns: int | None) -> int:
    """Billing ends at the finish; otherwise at the last sign of life in the telemetry itself.

    Signs of life are timestamps from the training job's clock (step ends, samples, events), not
    when the server received them: a spool synced a week late must not bill the week.
    """
    end = max(steps_end_ns, samples_t_ns, start_ns, last_event_ns or 0)
    if run.status != RunStatus.RUNNING and run.finished_at is not None:
        end = max(ns_of(run.finished_at), steps_end_ns, start_ns)
    return end


def _store(row: RunAnalysis, run: Run, team_id: int, analysis: Analysis, seq: int) -> dict[str, bytes]:
    """Set the columns of STORED_FIELDS on ``row`` but the result and the recommendations, and
    return those two as JSON, serialized once (pass_io writes them as they are; the per-rank
    figures go apart, as ``row.rank_figures``' bytes). ``row.result``
    and ``row.recommendations`` stay unloaded: a caller that reads them loads them as stored (the
    ~375 kB result is not parsed back into Python for a worker that never looks at it)."""
    serialized = {"result": analysis.to_json_bytes(ranks=False), "recommendations": json_bytes(recommend(analysis))}
    row.rank_figures = analysis.ranks_json_bytes()
    row.project_id, row.team_id = run.project_id, team_id
    row.error, row.failures, row.failed_seq, row.retry_at = "", 0, -1, None
    row.analysed_seq = seq
    row.analysed_at = timezone.now()
    row.complete = run.status != RunStatus.RUNNING
    row.started_at = run.allocation_start  # a run's time is its billed span (docs/ui.md)
    row.gpu_key = gpu_key_for(run.gpu_model)
    row.gpu_hours = analysis.billed_gpu_seconds / 3600
    row.cost_usd = Decimal(analysis.cost_cents) / 100
    row.waste_usd = Decimal(analysis.waste_cents) / 100
    row.recoverable_usd = Decimal(str(round(analysis.recoverable_usd, 2)))
    row.waste_share = analysis.waste_cents / analysis.cost_cents if analysis.cost_cents else 0.0
    row.mfu = analysis.mfu
    row.profile = to_jsonable(analysis.profile) if analysis.steps else None
    row.lost = lost_json(analysis)
    return serialized


def lost_json(analysis: Analysis) -> dict[str, Any]:
    """The attempt's lost work as RunAnalysis.lost stores it (waste/models.py)."""
    lost = analysis.lost
    return {
        "usd": lost.usd_cents / 100,
        "gpu_seconds": lost.gpu_seconds,
        "causes": {c.cause: {"usd": c.usd_cents / 100, "gpu_seconds": c.gpu_seconds} for c in lost.causes},
        # The restart's two sides: before this attempt's first step, after its last (a failure).
        "restart_sides": {
            side: {"usd": lost.restart_cents.get(side, 0) / 100, "gpu_seconds": lost.restart_gpu_seconds.get(side, 0.0)}
            for side in ("before", "after")
        },
    }

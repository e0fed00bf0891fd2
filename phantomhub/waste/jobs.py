"""A job's figures across its attempts, and the project's failure causes (docs/waste-model.md,
"Jobs: rework, restarts and checkpoints"). Reads only: stored analyses (``RunAnalysis``: cost,
GPU-hours and the small ``lost`` column), the attempts' runs and ranks, and their checkpoint and
restore phase events. What the portal serves is built from these two functions; every value is
plain JSON (str, int, float, bool, None, lists and dicts; times as ISO 8601 strings).

``job_figures(job) -> dict``::

    {
      "job": {"id", "key", "source", "project_id", "created_at"},
      "attempts": [  # in start order ((started_at, id)); at most ATTEMPTS_LISTED, see warnings
        {"run_id", "name", "attempt" (the launcher's count or None), "position" (1-based, by start),
         "status", "end_cause" ("" while running; "silent" for a crashed run with no cause),
         "end_detail", "started_at", "billed_start", "billed_end" (None: not analysed yet),
         "analysed" (bool), "gpu_count", "gpu_hours", "cost_usd",
         "lost": {"rework" | "restart" | "checkpoint": {"usd", "gpu_seconds"}},
         "lost_usd",
         "restart_sides": {"before" | "after": {"usd", "gpu_seconds"}},
         "restored_steps": [int, ...]  (the steps its restore phases loaded, in order),
         "rework_steps": {"from", "through", "count"} or None  (steps numbered at or below the
             highest step an earlier attempt reached; "from" is the restored step + 1 when a
             restore said so, else None, and "count" then None),
         "checkpoints": {"count", "blocking_s_total", "blocking_s_mean", "bytes_total",
                         "async_count", "interval_s" (median work seconds between saves, None)}},
        ...],
      "totals": {"attempts", "failures", "cost_usd", "gpu_hours", "wall_s",
                 "lost": {cause: {"usd", "gpu_seconds"}}, "lost_usd", "lost_share",
                 "checkpoints": {... as above, over every attempt}},
      "failure_rate": {"mtbf_s", "source" ("own" | "project" | None), "failures", "exposure",
                       "exposure_unit", "reason"},
      "advice": {"async": {...} | None, "interval": {... "curve": [{"interval_s",
                 "wall_per_work", "overhead_share"}, ...]} | None, "saving_usd_per_month",
                 "lost_usd_per_month", "cost_usd_per_month", "notes": [str, ...]},
      "inputs": {"checkpoint_s", "interval_s", "restart_s", "cost_usd_per_s", "saves_async",
                 "staged_s"},
      "warnings": [str, ...],
    }

``project_failure_causes(project_ids, since, until) -> list[dict]``: the ended attempts of jobs
in the projects that started in [since, until), by end cause (largest cost first)::

    [{"cause", "attempts", "failure" (bool: any cause but finished),
      "cost_usd"  (what the cause carried: the restart time on both sides of each failure and
                   the rework of the attempt after it; 0 for finished),
      "rework_usd", "restart_usd",
      "hosts": [{"host", "attempts"}, ...]  (the hosts its attempts' ranks ran on, most first),
      "details": [{"end_detail", "attempts"}, ...]}, ...]
"""

from __future__ import annotations

import itertools
import statistics
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from phantomhub.telemetry.bounds import ns_of
from phantomhub.telemetry.models import EndCause, EventKind, Job, Run, RunEvent, RunRank, RunStatus
from phantomhub.waste.core.checkpointing import SECONDS_PER_MONTH, checkpoint_advice, failure_rate
from phantomhub.waste.models import RunAnalysis

ATTEMPTS_LISTED = 1_000  # the attempt list is capped here (the totals cover every attempt)
CAUSES = ("rework", "restart", "checkpoint")
_NO_LOST = {"usd": 0.0, "gpu_seconds": 0.0}


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def end_cause_of(status: str, end_cause: str) -> str:
    """The attempt's end cause as pages show it: a crashed run with no cause reported is silent."""
    if end_cause:
        return end_cause
    return EndCause.SILENT.value if status == RunStatus.CRASHED else ""


def is_failure(status: str, end_cause: str) -> bool:
    """An attempt that ended other than finished (docs/waste-model.md, "Jobs": the failure rate)."""
    return status != RunStatus.RUNNING and end_cause_of(status, end_cause) != EndCause.FINISHED


def _attempt_rows(job_ids: Iterable[uuid.UUID] | None = None, runs: Any = None) -> list[dict[str, Any]]:
    qs = runs if runs is not None else Run.objects.filter(job_id__in=list(job_ids or []))
    return list(
        qs.order_by("job_id", "started_at", "id").values(
            "id",
            "job_id",
            "name",
            "attempt",
            "status",
            "end_cause",
            "end_detail",
            "started_at",
            "allocation_start",
            "finished_at",
            "last_seen_at",
            "gpu_count",
            "gpu_model",
            "project_id",
        )
    )


def _analyses(run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    rows = RunAnalysis.objects.filter(run_id__in=run_ids, analysed_at__isnull=False).values(
        "run_id", "cost_usd", "gpu_hours", "lost", "gpu_key"
    )
    return {r["run_id"]: dict(r) for r in rows}


def checkpoint_phases(run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, list[dict[str, Any]]]]:
    """Each attempt's checkpoint and restore phases, from one rank (its lowest reporting them:
    every rank of a synchronous save reports the same save), in time order."""
    rows = (
        RunEvent.objects.filter(run_id__in=run_ids, kind=EventKind.PHASE, name__in=("checkpoint", "restore"))
        .order_by("run_id", "rank", "t_start_ns")
        .values("run_id", "rank", "name", "t_start_ns", "dur_ns", "data")
    )
    out: dict[uuid.UUID, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"checkpoint": [], "restore": []})
    first_rank: dict[tuple[uuid.UUID, str], int] = {}
    for r in rows:
        key = (r["run_id"], r["name"])
        if first_rank.setdefault(key, r["rank"]) != r["rank"] or r["t_start_ns"] is None or r["dur_ns"] is None:
            continue
        out[r["run_id"]][r["name"]].append(dict(r))
    return out


def _checkpoints(saves: list[dict[str, Any]]) -> dict[str, Any]:
    """Count, blocking seconds, bytes and asynchronous saves; the interval is the median work time
    between one save's end and the next save's start (of one attempt's saves)."""
    blocking = [s["dur_ns"] / 1e9 for s in saves]
    gaps = _save_gaps(saves)
    return {
        "count": len(saves),
        "blocking_s_total": sum(blocking),
        "blocking_s_mean": sum(blocking) / len(blocking) if blocking else None,
        "bytes_total": sum(int((s["data"] or {}).get("bytes") or 0) for s in saves),
        "async_count": sum(1 for s in saves if (s["data"] or {}).get("async") is True),
        "interval_s": statistics.median(gaps) if gaps else None,
    }


def _lost_of(analysis: dict[str, Any] | None) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    lost = (analysis or {}).get("lost") or {}
    causes = lost.get("causes") or {}
    sides = lost.get("restart_sides") or {}
    return (
        {
            c: {"usd": float(causes.get(c, _NO_LOST)["usd"]), "gpu_seconds": float(causes.get(c, _NO_LOST)["gpu_seconds"])}
            for c in CAUSES
        },
        {
            s: {"usd": float(sides.get(s, _NO_LOST)["usd"]), "gpu_seconds": float(sides.get(s, _NO_LOST)["gpu_seconds"])}
            for s in ("before", "after")
        },
    )


def _billed_starts(rows: list[dict[str, Any]]) -> list[datetime]:
    """Each attempt's billed start: ``max(allocation_start, min(earlier attempts' latest end,
    started_at))`` (waste/services.py ``billed_from_ns``, the same clamp as the analysis)."""
    out = []
    latest_end: datetime | None = None
    for r in rows:
        start = r["allocation_start"]
        if latest_end is not None:
            start = max(start, min(latest_end, r["started_at"]))
        out.append(start)
        end = r["finished_at"] or r["last_seen_at"]
        latest_end = end if latest_end is None else max(latest_end, end)
    return out


def job_figures(job: Job) -> dict[str, Any]:
    """Everything a job's page shows (the module doc gives the shape)."""
    rows = _attempt_rows(runs=Run.objects.filter(job=job))
    ids = [r["id"] for r in rows]
    analyses = _analyses(ids)
    phases = checkpoint_phases(ids)
    billed_from = _billed_starts(rows)
    warnings: list[str] = []
    attempts: list[dict[str, Any]] = []
    all_saves: list[dict[str, Any]] = []
    totals_lost = {c: {"usd": 0.0, "gpu_seconds": 0.0} for c in CAUSES}
    cost = gpu_hours = wall_s = restart_wall_s = 0.0
    failures = 0
    reached: int | None = None  # the highest step any earlier attempt reached
    last_steps = _last_steps(ids)
    for i, (r, start) in enumerate(zip(rows, billed_from, strict=True)):
        a = analyses.get(r["id"])
        lost, sides = _lost_of(a)
        saves = phases[r["id"]]["checkpoint"] if r["id"] in phases else []
        restores = phases[r["id"]]["restore"] if r["id"] in phases else []
        all_saves.extend(saves)
        restored = [int((p["data"] or {})["step"]) for p in restores if (p["data"] or {}).get("step") is not None]
        for step in restored:
            if reached is None or step > reached:
                warnings.append(
                    f"attempt {i + 1} ({r['name'] or r['id']}) restored step {step}, which no earlier attempt reached "
                    f"(the highest was {reached}): its checkpoint came from elsewhere, or an attempt is missing"
                )
        rework = None
        if i > 0 and reached is not None:
            first = restored[0] + 1 if restored else None
            rework = {
                "from": first,
                "through": reached,
                "count": max(reached - first + 1, 0) if first is not None else None,
            }
        hours = float(a["gpu_hours"]) if a else 0.0
        span_s = hours * 3600 / r["gpu_count"] if r["gpu_count"] else 0.0
        end = None if a is None else datetime.fromtimestamp((ns_of(start) / 1e9) + span_s, tz=start.tzinfo)
        failed = is_failure(r["status"], r["end_cause"])
        failures += failed
        cost += float(a["cost_usd"]) if a else 0.0
        gpu_hours += hours
        wall_s += span_s
        restart_wall_s += (sides["before"]["gpu_seconds"] + sides["after"]["gpu_seconds"]) / max(r["gpu_count"], 1)
        for c in CAUSES:
            totals_lost[c]["usd"] += lost[c]["usd"]
            totals_lost[c]["gpu_seconds"] += lost[c]["gpu_seconds"]
        if len(attempts) < ATTEMPTS_LISTED:
            attempts.append(
                {
                    "run_id": str(r["id"]),
                    "name": r["name"],
                    "attempt": r["attempt"],
                    "position": i + 1,
                    "status": r["status"],
                    "end_cause": end_cause_of(r["status"], r["end_cause"]),
                    "end_detail": r["end_detail"],
                    "started_at": _iso(r["started_at"]),
                    "billed_start": _iso(start),
                    "billed_end": _iso(end),
                    "analysed": a is not None,
                    "gpu_count": r["gpu_count"],
                    "gpu_hours": hours,
                    "cost_usd": float(a["cost_usd"]) if a else 0.0,
                    "lost": lost,
                    "lost_usd": round(sum(v["usd"] for v in lost.values()), 2),
                    "restart_sides": sides,
                    "restored_steps": restored,
                    "rework_steps": rework,
                    "checkpoints": _checkpoints(saves),
                }
            )
        top = last_steps.get(r["id"])
        if top is not None:
            reached = top if reached is None else max(reached, top)
    if len(rows) > ATTEMPTS_LISTED:
        warnings.append(
            f"{len(rows):,} attempts: the list shows the first {ATTEMPTS_LISTED:,}; the totals, the failure rate and the "
            "advice cover them all"
        )
    numbered = [r["attempt"] for r in rows if r["attempt"] is not None]
    if any(b < a for a, b in itertools.pairwise(numbered)) or len(set(numbered)) < len(numbered):
        warnings.append(
            "the launcher's attempt numbers are out of order (or repeated) against the start times: attempts are "
            "ordered by when they started"
        )
    unanalysed = sum(1 for r in rows if r["id"] not in analyses)
    if unanalysed:
        warnings.append(f"{unanalysed} attempt(s) not analysed yet: their cost and lost work count as $0 for now")

    lost_usd = round(sum(v["usd"] for v in totals_lost.values()), 2)
    ckpt = _checkpoints(all_saves)
    # The interval: the median over attempts' gaps (a gap never spans two attempts).
    gaps = [g for r in rows for g in _save_gaps(phases[r["id"]]["checkpoint"] if r["id"] in phases else [])]
    ckpt["interval_s"] = statistics.median(gaps) if gaps else None
    sync = [s["dur_ns"] / 1e9 for s in all_saves if (s["data"] or {}).get("async") is not True]
    staged = [s["dur_ns"] / 1e9 for s in all_saves if (s["data"] or {}).get("async") is True]
    saves_async = bool(all_saves) and not sync
    checkpoint_s = (sum(sync) / len(sync)) if sync else (sum(staged) / len(staged) if staged else None)
    gpu_count = max((r["gpu_count"] for r in rows), default=1) or 1
    rate = failure_rate(own_failures=failures, own_wall_s=wall_s, **_project_failures(job, rows, analyses), gpu_count=gpu_count)
    restart_s = restart_wall_s / failures if failures else 0.0
    cost_per_s = cost / wall_s if wall_s > 0 else 0.0
    lost_per_month = lost_usd / wall_s * SECONDS_PER_MONTH if wall_s > 0 else 0.0
    advice = checkpoint_advice(
        checkpoint_s=checkpoint_s,
        interval_s=ckpt["interval_s"],
        restart_s=restart_s,
        rate=rate,
        cost_usd_per_s=cost_per_s,
        lost_usd_per_month=lost_per_month,
        saves_async=saves_async,
        staged_s=(sum(staged) / len(staged)) if staged and sync else None,
    )
    return {
        "job": {
            "id": str(job.pk),
            "key": job.key,
            "source": job.source,
            "project_id": job.project_id,
            "created_at": _iso(job.created_at),
        },
        "attempts": attempts,
        "totals": {
            "attempts": len(rows),
            "failures": failures,
            "cost_usd": round(cost, 2),
            "gpu_hours": gpu_hours,
            "wall_s": wall_s,
            "lost": totals_lost,
            "lost_usd": lost_usd,
            "lost_share": lost_usd / cost if cost else 0.0,
            "checkpoints": ckpt,
        },
        "failure_rate": rate.to_json(),
        "advice": advice.to_json(),
        "inputs": {
            "checkpoint_s": checkpoint_s,
            "interval_s": ckpt["interval_s"],
            "restart_s": restart_s,
            "cost_usd_per_s": cost_per_s,
            "saves_async": saves_async,
            "staged_s": (sum(staged) / len(staged)) if staged else None,
        },
        "warnings": warnings,
    }


def _save_gaps(saves: list[dict[str, Any]]) -> list[float]:
    gaps = [(b["t_start_ns"] - (a["t_start_ns"] + a["dur_ns"])) / 1e9 for a, b in itertools.pairwise(saves)]
    return [g for g in gaps if g > 0]


def _last_steps(run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    """The highest step each attempt's ranks reached (RunRank.last_step)."""
    out: dict[uuid.UUID, int] = {}
    for run_id, step in RunRank.objects.filter(run_id__in=run_ids, last_step__isnull=False).values_list("run_id", "last_step"):
        if step is not None:
            out[run_id] = max(out.get(run_id, step), step)
    return out


def _project_failures(job: Job, rows: list[dict[str, Any]], analyses: dict[uuid.UUID, dict[str, Any]]) -> dict[str, Any]:
    """The fallback evidence: failures and GPU-hours of the project's other jobs' ended attempts on
    the job's GPU model (its analyses' gpu_key)."""
    keys = {a["gpu_key"] for a in analyses.values() if a["gpu_key"]}
    if not keys:
        return {"project_failures": 0, "project_gpu_hours": 0.0}
    others = (
        RunAnalysis.objects.filter(project_id=job.project_id, gpu_key__in=keys, run__job__isnull=False)
        .exclude(run__job=job)
        .exclude(run__status=RunStatus.RUNNING)
        .values_list("run__status", "run__end_cause", "gpu_hours")
    )
    failures, hours = 0, 0.0
    for status, cause, gh in others:
        failures += is_failure(status, cause)
        hours += float(gh)
    return {"project_failures": failures, "project_gpu_hours": hours}


def project_failure_causes(project_ids: Iterable[int], since: datetime, until: datetime) -> list[dict[str, Any]]:
    """The ended attempts of the projects' jobs that started in [since, until), by end cause,
    with the cost each cause carried (the module doc gives the shape): a failed attempt's own
    restart after its last step, and the next attempt's restart before its first step and rework."""
    window = Run.objects.filter(
        project_id__in=list(project_ids), job__isnull=False, started_at__gte=since, started_at__lt=until
    ).exclude(status=RunStatus.RUNNING)
    failed = _attempt_rows(runs=window)
    if not failed:
        return []
    # Every attempt of those jobs, to find each one's next attempt.
    every = _attempt_rows(job_ids={r["job_id"] for r in failed})
    next_of: dict[uuid.UUID, uuid.UUID] = {}
    for a, b in itertools.pairwise(every):
        if a["job_id"] == b["job_id"]:
            next_of[a["id"]] = b["id"]
    wanted = [r["id"] for r in failed] + [next_of[r["id"]] for r in failed if r["id"] in next_of]
    analyses = _analyses(wanted)
    hosts: dict[uuid.UUID, set[str]] = defaultdict(set)
    ranks = RunRank.objects.filter(run_id__in=[r["id"] for r in failed]).exclude(host="")
    for run_id, host in ranks.values_list("run_id", "host"):
        hosts[run_id].add(host)
    groups: dict[str, dict[str, Any]] = {}
    for r in failed:
        cause = end_cause_of(r["status"], r["end_cause"]) or EndCause.EXCEPTION.value
        g = groups.setdefault(
            cause,
            {
                "cause": cause,
                "attempts": 0,
                "failure": cause != EndCause.FINISHED,
                "rework_usd": 0.0,
                "restart_usd": 0.0,
                "hosts": defaultdict(int),
                "details": defaultdict(int),
            },
        )
        g["attempts"] += 1
        for host in hosts.get(r["id"], ()):
            g["hosts"][host] += 1
        if r["end_detail"]:
            g["details"][r["end_detail"]] += 1
        if not g["failure"]:
            continue
        _, own_sides = _lost_of(analyses.get(r["id"]))
        g["restart_usd"] += own_sides["after"]["usd"]
        nxt = next_of.get(r["id"])
        if nxt is not None:
            lost, sides = _lost_of(analyses.get(nxt))
            g["restart_usd"] += sides["before"]["usd"]
            g["rework_usd"] += lost["rework"]["usd"]
    out = []
    for g in groups.values():
        out.append(
            {
                "cause": g["cause"],
                "attempts": g["attempts"],
                "failure": g["failure"],
                "cost_usd": round(g["rework_usd"] + g["restart_usd"], 2),
                "rework_usd": round(g["rework_usd"], 2),
                "restart_usd": round(g["restart_usd"], 2),
                "hosts": [{"host": h, "attempts": n} for h, n in sorted(g["hosts"].items(), key=lambda kv: (-kv[1], kv[0]))],
                "details": [
                    {"end_detail": d, "attempts": n} for d, n in sorted(g["details"].items(), key=lambda kv: (-kv[1], kv[0]))
                ],
            }
        )
    return sorted(out, key=lambda g: (-g["cost_usd"], -g["attempts"], g["cause"]))


__all__ = ["ATTEMPTS_LISTED", "end_cause_of", "is_failure", "job_figures", "project_failure_causes"]

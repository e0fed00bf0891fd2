"""The jobs API (docs/portal-api.md, "Jobs"): a job's page, the jobs list, a project's failure
causes. The figures are waste's (waste/jobs.py); this module decides who sees them and shapes
them for the page: a job is seen by whoever sees its project's runs, and so are its figures.

The list's cost and lost dollars are sums of the attempts' RunDay rows, the rows leaderboards and
finance sum, so a job's "lost to failures" adds up with theirs.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Max, Min, Sum
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError, invalid, query_int
from phantomhub.periods import month_period
from phantomhub.telemetry.models import Job, Run, RunStatus
from phantomhub.waste.jobs import CAUSES, checkpoint_phases, is_failure, job_figures, project_failure_causes
from phantomhub.waste.models import RunDay

JOB_SORTS = {"lost": "-lost", "cost": "-cost", "recent": "-last_started_at"}


def _money(value: Decimal | float | None) -> float:
    return round(float(value or 0), 2)


def _job_visible(principal: Any, job_id: uuid.UUID) -> Job:
    visible = Job.objects.select_related("project", "project__team").filter(project__in=projects_visible(principal))
    job = visible.filter(pk=job_id).first()
    if job is None:
        raise ApiError("not_found", "job not found", status_code=404)
    return job


def jobs_list(*, principal: Any, project: str, team: str, sort: str, limit: int, offset: int) -> dict[str, Any]:
    """The visible jobs with their attempts, failures, cost and lost dollars (RunDay sums)."""
    jobs = Job.objects.filter(project__in=projects_visible(principal))
    if project:
        jobs = jobs.filter(project__slug=project)
    if team:
        jobs = jobs.filter(project__team__slug=team)
    rows = list(
        jobs.annotate(
            n_attempts=Count("attempts", distinct=True),
            first_started_at=Min("attempts__started_at"),
            last_started_at=Max("attempts__started_at"),
        ).values(
            "id", "key", "source", "project__slug", "project__team__slug", "n_attempts", "first_started_at", "last_started_at"
        )
    )
    ids = [r["id"] for r in rows]
    money = {
        r["run__job"]: r
        for r in RunDay.objects.filter(run__job__in=ids).values("run__job").annotate(cost=Sum("cost_usd"), lost=Sum("lost_usd"))
    }
    attempts = Run.objects.filter(job__in=ids).order_by("job_id", "started_at", "id").values_list("job_id", "status", "end_cause")
    failures: dict[uuid.UUID, int] = {}
    latest: dict[uuid.UUID, str] = {}
    for job_id, status, cause in attempts:
        failures[job_id] = failures.get(job_id, 0) + is_failure(status, cause)
        latest[job_id] = status
    out = [
        {
            "id": str(r["id"]),
            "key": r["key"],
            "source": r["source"],
            "project": r["project__slug"],
            "team": r["project__team__slug"],
            "attempts": r["n_attempts"],
            "failures": failures.get(r["id"], 0),
            "cost_usd": _money(money.get(r["id"], {}).get("cost")),
            "lost_usd": _money(money.get(r["id"], {}).get("lost")),
            "started_at": r["first_started_at"].isoformat() if r["first_started_at"] else None,
            "last_started_at": r["last_started_at"].isoformat() if r["last_started_at"] else None,
            "status": latest.get(r["id"], ""),
        }
        for r in rows
    ]
    key = JOB_SORTS[sort].lstrip("-")
    field = {"lost": "lost_usd", "cost": "cost_usd", "last_started_at": "last_started_at"}[key]
    out.sort(key=lambda j: (j[field] is not None, j[field] or 0, j["key"]), reverse=True)
    return {"count": len(out), "results": out[offset : offset + limit]}


def _moment(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def _segments(attempt: dict[str, Any], phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The attempt's billed span as the timeline draws it: the whole span as work, then what was
    lost on top, in billed order. Checkpoints and restores are where their phases were; restart
    time is at the span's ends and rework after the start-up, each as long as the analysis counted
    it (wall seconds: GPU-seconds over the attempt's GPUs), so the shaded lengths are the priced
    seconds."""
    if attempt["billed_end"] is None:
        return []
    start = datetime.fromisoformat(attempt["billed_start"])
    end = datetime.fromisoformat(attempt["billed_end"])
    gpus = max(attempt["gpu_count"], 1)
    out = [{"kind": "work", "start": start.isoformat(), "end": end.isoformat()}]
    before = timedelta(seconds=attempt["restart_sides"]["before"]["gpu_seconds"] / gpus)
    after = timedelta(seconds=attempt["restart_sides"]["after"]["gpu_seconds"] / gpus)
    restores = [p for p in phases if p["name"] == "restore"]
    loading = timedelta(seconds=sum(p["dur_ns"] for p in restores) / 1e9)
    if before:
        out.append({"kind": "restart", "start": start.isoformat(), "end": min(start + before, end).isoformat()})
    rework = timedelta(seconds=attempt["lost"]["rework"]["gpu_seconds"] / gpus)
    if rework:
        first = min(start + before + loading, end)
        out.append({"kind": "rework", "start": first.isoformat(), "end": min(first + rework, end).isoformat()})
    for p in phases:
        if p["dur_ns"]:
            out.append({"kind": "checkpoint", "start": _moment(p["t_start_ns"]), "end": _moment(p["t_start_ns"] + p["dur_ns"])})
    if after:
        out.append({"kind": "restart", "start": max(end - after, start).isoformat(), "end": end.isoformat()})
    return out


def _lost(lost: dict[str, dict[str, float]], field: str) -> dict[str, float]:
    values = {c: round(lost[c][field], 2 if field == "usd" else 6) for c in CAUSES}
    return {**values, "total": round(sum(lost[c][field] for c in CAUSES), 2 if field == "usd" else 6)}


def job_page(*, principal: Any, job_id: uuid.UUID) -> dict[str, Any]:
    job = _job_visible(principal, job_id)
    figures = job_figures(job)
    listed = figures["attempts"]
    run_ids = [a["run_id"] for a in listed]
    # The saves and restores waste counted (one rank's per attempt), in time order, for the timeline.
    phases = {
        str(run_id): sorted(kinds["checkpoint"] + kinds["restore"], key=lambda p: p["t_start_ns"])
        for run_id, kinds in checkpoint_phases([uuid.UUID(r) for r in run_ids]).items()
    }
    totals = figures["totals"]
    rate = figures["failure_rate"]
    attempts = [
        {
            "run_id": a["run_id"],
            "name": a["name"],
            "index": a["position"],
            "attempt": a["attempt"],
            "status": a["status"],
            "end_cause": a["end_cause"],
            "end_detail": a["end_detail"],
            "started_at": a["started_at"],
            "billed_from": a["billed_start"],
            "ended_at": a["billed_end"] if a["status"] != RunStatus.RUNNING else None,
            "cost_usd": a["cost_usd"],
            "lost_usd": _lost(a["lost"], "usd"),
            "restored_step": a["restored_steps"][-1] if a["restored_steps"] else None,
            "rework_steps": (None if a["rework_steps"] is None else [a["rework_steps"]["from"], a["rework_steps"]["through"]]),
            "checkpoints": {
                "count": a["checkpoints"]["count"],
                "blocking_s": a["checkpoints"]["blocking_s_total"],
                "bytes": a["checkpoints"]["bytes_total"],
                "async": a["checkpoints"]["async_count"],
            },
            "segments": _segments(a, phases.get(a["run_id"], [])),
        }
        for a in listed
    ]
    return {
        "id": str(job.pk),
        "key": job.key,
        "source": job.source,
        "project": job.project.slug,
        "team": job.project.team.slug,
        "attempts_total": totals["attempts"],
        "attempts_shown": len(attempts),
        "cost_usd": totals["cost_usd"],
        "lost_usd": _lost(totals["lost"], "usd"),
        "lost_gpu_hours": {k: round(v / 3600, 9) for k, v in _lost(totals["lost"], "gpu_seconds").items()},
        "attempts": attempts,
        "failure_rate": _failure_rate(rate, totals),
        "advice": _advice(figures),
        "warnings": figures["warnings"],
    }


def _failure_rate(rate: dict[str, Any], totals: dict[str, Any]) -> dict[str, Any]:
    mtbf = rate.get("mtbf_s")
    source = rate.get("source")
    return {
        "failures": totals["failures"],
        "wall_hours": totals["wall_s"] / 3600,
        "mtbf_hours": None if mtbf is None else mtbf / 3600,
        "source": {"own": "job", "project": "project"}.get(source or ""),
        "evidence": rate.get("reason", ""),
    }


def _advice(figures: dict[str, Any]) -> dict[str, Any] | None:
    advice = figures["advice"]
    interval, saving_async = advice.get("interval"), advice.get("async")
    if interval is None and saving_async is None:
        return None
    kind = "both" if interval and saving_async else ("interval" if interval else "async")
    inputs = figures["inputs"]
    rate = figures["failure_rate"]
    # The curve in dollars a month: the share of the job's wall time that makes no new progress
    # (1 − 1/W) of its cost for a month of training.
    per_month = advice["cost_usd_per_month"]
    curve = [[p["interval_s"], round(p["overhead_share"] * per_month, 2)] for p in (interval or {}).get("curve", [])]
    words = []
    if saving_async:
        words.append(
            f"Save checkpoints asynchronously: saves block {saving_async['blocking_share']:.0%} of the job's time, "
            f"about ${saving_async['saving_usd_per_month']:,.2f} a month of training."
        )
    if interval:
        words.append(
            f"Checkpoint every {_duration(interval['optimum_s'])} of work instead of every "
            f"{_duration(interval['interval_s'])} (Young/Daly: {_duration(interval['young_daly_s'])}): "
            f"about ${interval['saving_usd_per_month']:,.2f} a month of training less checkpointing, rework and restarts."
        )
    return {
        "kind": kind,
        "text": " ".join([*words, *(advice.get("notes") or [])]),
        "checkpoint_cost_s": inputs["checkpoint_s"],
        "restart_cost_s": inputs["restart_s"],
        "mtbf_s": rate.get("mtbf_s"),
        "current_interval_s": inputs["interval_s"],
        "recommended_interval_s": interval["optimum_s"] if interval else None,
        "young_daly_s": interval["young_daly_s"] if interval else None,
        "saving_usd_per_month": advice.get("saving_usd_per_month"),
        "async_saving_usd_per_month": saving_async["saving_usd_per_month"] if saving_async else None,
        "curve": curve,
    }


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"


def failures_page(*, project_id: int, month: str) -> dict[str, Any]:
    period = month_period(month)
    since = datetime(period.start.year, period.start.month, period.start.day, tzinfo=UTC)
    until = datetime(period.end.year, period.end.month, period.end.day, tzinfo=UTC) + timedelta(days=1)
    rows = []
    for group in project_failure_causes([project_id], since, until):
        hosts = group.get("hosts") or [{"host": "", "attempts": group["attempts"]}]
        details = group.get("details") or []
        rows.append(
            {
                "end_cause": group["cause"],
                "end_detail": ", ".join(d["end_detail"] for d in details[:3]),
                "host": ", ".join(h["host"] for h in hosts[:3]),
                "attempts": group["attempts"],
                "rework_usd": group["rework_usd"],
                "restart_usd": group["restart_usd"],
                "lost_usd": group["cost_usd"],
            }
        )
    return {"month": period.label, "rows": rows}


JOB_LIST_PARAMS = [
    OpenApiParameter("project", str, description="project slug"),
    OpenApiParameter("team", str, description="team slug"),
    OpenApiParameter("sort", str, description="lost (default: lost dollars, largest first), cost or recent"),
    OpenApiParameter("limit", int, description="jobs per page, 1 to 200 (default 50)"),
    OpenApiParameter("offset", int, description="jobs to skip (default 0)"),
]


class JobListApi(APIView):
    @extend_schema(
        parameters=JOB_LIST_PARAMS,
        responses=OpenApiTypes.OBJECT,
        summary="Jobs, by lost dollars",
        operation_id="portal_jobs_list",
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        sort = params.get("sort", "lost")
        if sort not in JOB_SORTS:
            raise invalid("sort", f"one of {', '.join(JOB_SORTS)}")
        return Response(
            jobs_list(
                principal=request.user,
                project=params.get("project", "").strip(),
                team=params.get("team", "").strip(),
                sort=sort,
                limit=query_int(params, "limit", 50, 1, 200),
                offset=query_int(params, "offset", 0, 0, 10**9),
            )
        )


class JobPageApi(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT, summary="Everything a job's page shows: attempts, lost work, advice")
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        return Response(job_page(principal=request.user, job_id=job_id))


class ProjectFailuresApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("month", str, description="YYYY-MM (default: this month)")],
        responses=OpenApiTypes.OBJECT,
        summary="A project's ended attempts by end cause, with what each cause cost",
    )
    def get(self, request: Request, slug: str) -> Response:
        project = projects_visible(request.user).filter(slug=slug).first()
        if project is None:
            raise ApiError("not_found", "project not found", status_code=404)
        month = request.query_params.get("month") or datetime.now(tz=UTC).strftime("%Y-%m")
        return Response(failures_page(project_id=project.pk, month=month))


def run_job_link(run: Run) -> dict[str, Any] | None:
    """The run page's line "attempt N of M of job K"."""
    if run.job_id is None:
        return None
    attempts = list(Run.objects.filter(job_id=run.job_id).order_by("started_at", "id").values_list("id", flat=True))
    job = Job.objects.only("key").get(pk=run.job_id)
    return {"id": str(run.job_id), "key": job.key, "index": attempts.index(run.pk) + 1, "attempts_total": len(attempts)}

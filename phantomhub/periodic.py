"""The periodic jobs, listed once (docs/architecture.md, "Periodic jobs").

Each job is a Celery task named here, run every ``interval`` seconds, where ``interval`` names a
setting. Two runners are built from ``JOBS`` and nothing else:

- with a broker, Celery beat: settings.CELERY_BEAT_SCHEDULE is ``beat_schedule(settings)``;
- without one (the embedded default, ``make run``), the sweeper: a daemon thread in one web worker
  (deploy/gunicorn.py calls ``sweeper_start``) that calls each task in-process when it is due.

A ``quick`` job is one whose every pass is cheap when there is nothing to do (the analysis sweep,
the fleet's node-days, the alert rules): the embedded sweeper runs it every ``EMBEDDED_PASS_S``
seconds, so on a small install an analysis, a node-day or an alert lands within seconds of the
data, as a Celery worker's on-commit task would. The others run at their setting's interval in
both modes.

This module imports no app: the sweeper finds each task by its name, as beat does, so the bottom
layer may hold it (alerts/liveness.py reads its cadence).
"""

from __future__ import annotations

import fcntl
import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

EMBEDDED_PASS_S = 5.0


@dataclass(frozen=True)
class Job:
    name: str  # the beat schedule's key
    task: str  # the Celery task's name: "<module>.<function>"
    interval: str  # the setting holding its interval in seconds
    quick: bool = False  # the embedded sweeper runs it every pass
    what: str = ""


JOBS: tuple[Job, ...] = (
    Job("sweep", "phantomhub.waste.tasks.sweep", "SWEEP_INTERVAL_S", quick=True,
        what="crashed runs, dirty runs' analyses, pending rollups"),
    Job("fleet-derive", "phantomhub.fleet.tasks.fleet_derive", "FLEET_DERIVE_INTERVAL_S", quick=True,
        what="node-days marked by node telemetry"),
    Job("alerts-evaluate", "phantomhub.alerts.tasks.evaluate", "ALERT_INTERVAL_S", quick=True,
        what="alert rules over the analyses just stored, and due deliveries"),
    Job("reports-send", "phantomhub.reports.tasks.reports_send", "REPORTS_INTERVAL_S", quick=True,
        what="scheduled reports past their due time (one indexed read when none is), and due retries"),
    Job("storage-maintain", "phantomhub.telemetry.tasks.storage_maintain", "STORAGE_INTERVAL_S",
        what="partitions ahead, finished runs archived, expired raw rows retired"),
    Job("fleet-purge", "phantomhub.fleet.tasks.fleet_purge", "FLEET_PURGE_INTERVAL_S",
        what="raw GPU samples older than PHANTOMHUB_FLEET_RAW_DAYS"),
    Job("audit-purge", "phantomhub.audit.tasks.audit_purge", "AUDIT_PURGE_INTERVAL_S",
        what="audit log entries older than PHANTOMHUB_AUDIT_RETENTION_DAYS"),
)  # fmt: skip


def _value(values: Any, name: str) -> float:
    return float(values[name] if isinstance(values, Mapping) else getattr(values, name))


def beat_schedule(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Celery beat's schedule: every job at its setting's interval (``values``: the settings
    module's globals while it is being read)."""
    return {job.name: {"task": job.task, "schedule": _value(values, job.interval)} for job in JOBS}


def every_s(job_name: str, settings: Any) -> float:
    """How often ``job_name`` runs in this process's mode (settings: django.conf.settings)."""
    job = next(job for job in JOBS if job.name == job_name)
    if settings.CELERY_TASK_ALWAYS_EAGER and job.quick:
        return EMBEDDED_PASS_S
    return _value(settings, job.interval)


def _task(job: Job) -> Callable[[], Any]:
    module, _, name = job.task.rpartition(".")
    task: Callable[[], Any] = getattr(importlib.import_module(module), name)
    return task


def _summary(result: Any) -> bool:
    """Whether a job's result says it did something worth a log line."""
    if isinstance(result, Mapping):
        return any(isinstance(v, int | float) and v for v in result.values())
    return bool(result)


class Sweeper:
    """The embedded default's runner: ``run_due`` calls every job that is due, each in its own try
    (one that fails is logged and retried on the next pass; the others still run)."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.next_at = {job.name: 0.0 for job in JOBS}  # monotonic; 0: due at the first pass

    def run_due(self, now: float | None = None) -> tuple[list[str], list[str]]:
        """One pass: returns (the jobs that ran, those that failed)."""
        from django.db import close_old_connections

        now = time.monotonic() if now is None else now
        ran: list[str] = []
        failed: list[str] = []
        for job in JOBS:
            if now < self.next_at[job.name]:
                continue
            self.next_at[job.name] = now + every_s(job.name, self.settings)
            ran.append(job.name)
            try:
                close_old_connections()
                result = _task(job)()
                if _summary(result):
                    log.info("%s: %s", job.name, result)
            except Exception:
                failed.append(job.name)
                log.exception("periodic job %s failed; the others ran, it is retried next pass", job.name)
            finally:
                close_old_connections()
        return ran, failed


def _loop() -> None:
    from django.conf import settings

    lock_path = settings.VAR_DIR / "sweeper.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks until this process is the sweeper
        log.info("embedded sweeper: %s", ", ".join(f"{job.name} every {every_s(job.name, settings):g} s" for job in JOBS))
        sweeper = Sweeper(settings)
        while True:
            sweeper.run_due()
            time.sleep(EMBEDDED_PASS_S)


def sweeper_start() -> None:
    """Start the embedded sweeper in this process when there is no broker (else beat runs the
    jobs). A file lock under var/ makes exactly one gunicorn worker sweep; the others' threads wait
    for the lock, so if that worker dies another takes over."""
    from django.conf import settings

    if not settings.CELERY_TASK_ALWAYS_EAGER:
        return
    threading.Thread(target=_loop, name="phantomhub-sweeper", daemon=True).start()

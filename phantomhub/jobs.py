"""Background jobs started from a request: a Celery task where a broker runs, a thread here without one.

A job is a row that records its own status and progress (fleet attribution jobs, large invoice
imports); the request that made it answers at once. With a broker the job's task goes to a worker.
Without one (the embedded default, where tasks run eagerly, i.e. inside the request), a daemon
thread of this process runs it and closes its database connection when done, so no connection is
left idle behind it. A process that dies mid-job leaves the row "running": each job's owner says
how such a job is taken over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from celery import current_app
from django.conf import settings
from django.db import connections

log = logging.getLogger(__name__)


def job_start(*, job_id: int, run: Callable[[int], object], task: str, what: str) -> None:
    """Start job ``job_id`` now (call it once the job's row is committed): the Celery task named
    ``task`` runs it on a worker (sent by name: a tasks module imports its services, never the
    reverse); without a broker ``run(job_id)`` runs on a thread of this process."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        threading.Thread(target=_in_thread, args=(run, job_id, what), name=f"{what}-{job_id}", daemon=True).start()
        return
    current_app.send_task(task, args=(job_id,))


def _in_thread(run: Callable[[int], object], job_id: int, what: str) -> None:
    try:
        run(job_id)
    except Exception:
        log.exception("%s %s failed", what, job_id)
    finally:
        connections.close_all()  # this thread's connections end with it

"""The Celery app. Broker: Redis (PHANTOMHUB_REDIS_URL); without it tasks run in-process.

Database connections in a worker live as they do in a web process. Celery's Django fixup would
close every connection before and after each task (unless CELERY_DB_REUSE_MAX is set), so each
analysis paid for a new PostgreSQL connection: a backend started and its catalog caches filled
again (docs/performance.md, "Worker connections"). settings.CELERY_DB_REUSE_MAX turns that off,
and around each task the worker does what Django does around each request: close_old_connections,
which drops a connection older than CONN_MAX_AGE or broken by an error, and keeps the rest.
"""

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")

app = Celery("phantomhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def connections_as_a_request_leaves_them(task: Any = None, **kwargs: Any) -> None:
    # An eager task runs inside its caller (a request, a test's transaction): not ours to close.
    if task is None or getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@worker_process_init.connect
def boot_objects_frozen(**kwargs: Any) -> None:
    # A pool process, once it has imported the tasks and what they run: boot's objects leave the
    # collector's reach (phantomhub/runtime.py), so a full collection walks only later ones.
    import phantomhub.waste.services  # noqa: F401
    from phantomhub.runtime import boot_objects_freeze

    boot_objects_freeze()

"""The embedded default's stand-in for Celery beat: a daemon thread in the web process.

Without a broker (no PHANTOMHUB_REDIS_URL), `make run` starts gunicorn with
deploy/gunicorn_embedded.py, whose post_worker_init hook calls `sweeper_start()`. A file lock
under var/ makes exactly one of the gunicorn workers sweep; the others' threads wait for the lock,
so if that worker dies another takes over.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)
INTERVAL_S = 5.0


def _step(name: str, call: Callable[[], object]) -> bool:
    """One periodic step in its own try: a step that fails is logged, and the others still run."""
    try:
        close_old_connections()
        call()
    except Exception:
        log.exception("sweeper step %s failed; the others ran, it is retried next pass", name)
        return False
    finally:
        close_old_connections()
    return True


def sweep_once() -> list[str]:
    """One pass of every periodic step, each in its own try (one that fails never skips alert
    pruning or storage maintenance); returns the names of the steps that failed."""
    from phantomhub.alerts.services import alerts_evaluate
    from phantomhub.fleet.derive import fleet_derive_pending
    from phantomhub.telemetry.retention import storage_maintain_due
    from phantomhub.waste.sweeps import analysis_sweep

    def analyse() -> None:
        result = analysis_sweep(inline=True)
        if result.analysed or result.crashed:
            log.info("swept: %s", result)

    steps: list[tuple[str, Callable[[], object]]] = [
        ("analysis", analyse),
        ("fleet", fleet_derive_pending),  # node-days marked by node telemetry (phantomhub/fleet)
        ("alerts", alerts_evaluate),  # alert rules read the analyses just stored (phantomhub/alerts)
        ("storage", storage_maintain_due),  # archive + raw retention, every PHANTOMHUB_STORAGE_INTERVAL_S
    ]
    return [name for name, call in steps if not _step(name, call)]


def _loop() -> None:
    lock_path = settings.VAR_DIR / "sweeper.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks until this process is the sweeper
        log.info("embedded sweeper running every %.0f s", INTERVAL_S)
        while True:
            sweep_once()
            time.sleep(INTERVAL_S)


def sweeper_start() -> None:
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        return  # a broker is configured: celery beat does this
    threading.Thread(target=_loop, name="phantomhub-sweeper", daemon=True).start()

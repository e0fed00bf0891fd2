"""A web worker's first ingest batch does not import Celery's producer side: gunicorn's
post_worker_init (deploy/gunicorn.py) builds it at boot. Each case is a fresh interpreter, as a
gunicorn worker is, against the real Redis; the first analysis request is the real one."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

_SCRIPT = r"""
import json, runpy, sys, time, uuid

import django

django.setup()
conf = runpy.run_path("deploy/gunicorn.py")
if sys.argv[1] == "warm":
    conf["post_worker_init"](None)
else:  # what post_worker_init did before the producer was warmed too
    from django.urls import get_resolver

    get_resolver().url_patterns
from phantomhub.waste import scheduling

scheduling._debounce_cache[:] = [float("inf"), 3600.0]  # the organization's interval, without a database
before = set(sys.modules)
run_id = uuid.uuid4()
t0 = time.process_time()
scheduling.analysis_request(run_id)
cpu_ms = (time.process_time() - t0) * 1000
from phantomhub.waste.scheduling import redis_client

r = redis_client()
queued = [m for m in r.lrange("phantomhub", 0, -1) if str(run_id).encode() in m]
for message in queued:  # a worker of another test must not get it
    r.lrem("phantomhub", 0, message)
r.delete(f"phantomhub:analyze:{run_id}")
import gc

print(json.dumps({"imported": sorted(set(sys.modules) - before), "queued": len(queued), "cpu_ms": cpu_ms,
                  "frozen": gc.get_freeze_count()}))
"""


def _first_request(mode: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
        "PHANTOMHUB_DEBUG": "1",
        "PHANTOMHUB_REDIS_URL": REDIS_URL,
    }
    env.pop("PHANTOMHUB_DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.celery
def test_first_analysis_request_imports_nothing_after_post_worker_init() -> None:
    warm = _first_request("warm")
    assert warm["queued"] == 1  # the request went through Redis and Celery for real
    assert warm["imported"] == [], warm["imported"]
    # And boot's objects were left out of the garbage collector's walks (phantomhub/runtime.py).
    assert warm["frozen"] > 50_000, warm["frozen"]


@pytest.mark.celery
def test_without_the_warm_up_the_first_request_imports_the_producer() -> None:
    """The oracle's other side: the same first request in a worker that only loaded the URLconf
    imports Celery's and the broker's modules (what the warm-up moves to boot)."""
    cold = _first_request("cold")
    assert cold["queued"] == 1
    imported = set(cold["imported"])
    assert "phantomhub.waste.tasks" in imported or "kombu.transport.redis" in imported, sorted(imported)
    assert cold["frozen"] == 0


def test_a_producer_that_cannot_be_built_at_boot_does_not_stop_the_worker(
    settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Ingest must start without the broker's side: analysis_request reports what fails later."""
    import runpy

    from phantomhub.waste import tasks

    def broken() -> None:
        raise RuntimeError("no such transport")

    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr(tasks, "producer_warm", broken)
    conf = runpy.run_path(str(ROOT / "deploy" / "gunicorn.py"))
    try:
        with caplog.at_level("WARNING", logger="gunicorn.error"):
            conf["post_worker_init"](None)
    finally:
        gc.unfreeze()  # post_worker_init froze this test process's objects
    assert "could not be built at boot" in caplog.text and "no such transport" in caplog.text

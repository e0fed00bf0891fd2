"""Shared by the storage tests: a finished run with steps (some null columns) and samples, sent
through the API, and a pass of storage maintenance far enough in the future to retire it."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from phantomhub.telemetry.models import Run, RunStatus
from tests.conftest import Tenant, steps_body

RANKS = 3
STEPS = 120
# The steps' clock: a minute before "finished 2 days ago", so a run finished then is billed from
# its allocation a second before its first step to its end (about a minute of 3 GPUs).
T0_NS = int(time.time() - 2 * 86_400 - 60) * 10**9


def sent_steps(rank: int) -> dict[str, Any]:
    """What the agent sends for one rank: 100 ms steps, some columns null in places."""
    body = steps_body(STEPS, rank=rank)["steps"]
    body["t_start_ns"] = [T0_NS + i * 100_000_000 for i in range(STEPS)]
    body["dur_ns"] = [100_000_000 + 1_000 * ((i * 7 + rank) % 13) for i in range(STEPS)]
    body["comm_ns"] = [None if i % 10 == 3 else 4_000_000 + i for i in range(STEPS)]
    body["flops"] = [None if i % 25 == 0 else 1.5e15 + i for i in range(STEPS)]
    body["alloc_retries"] = [None] * STEPS
    return body


def sent_samples(rank: int) -> dict[str, Any]:
    n = 12
    return {
        "t_ns": [T0_NS + i * 10**9 for i in range(n)] * 2,
        "device": [rank] * n + [-1] * n,
        "gpu_util_pct": [80.0 + i for i in range(n)] + [None] * n,
        "cpu_other_pct": [None] * n + [float(i % 5) for i in range(n)],
        "rss_bytes": [None] * n + [2**30 + i for i in range(n)],
    }


def run_with_telemetry(tenant: Tenant, *, finished_days_ago: float | None = 2.0, **fields: Any) -> Run:
    allocated = datetime.fromtimestamp(T0_NS / 1e9 - 1, tz=UTC).isoformat()
    run_id = tenant.create_run(
        gpu_model="H100-SXM", gpu_count=RANKS, world_size=RANKS, allocation_start=allocated, started_at=allocated, **fields
    )
    for rank in range(RANKS):
        response = tenant.post_steps(run_id, {"rank": rank, "host": f"node-{rank}", "steps": sent_steps(rank)})
        assert response.status_code == 200, response.content
        response = tenant.client.post(
            f"/api/v1/runs/{run_id}/samples", {"rank": rank, "host": f"node-{rank}", "samples": sent_samples(rank)}, format="json"
        )
        assert response.status_code == 200, response.content
    run = Run.objects.get(pk=uuid.UUID(run_id))
    if finished_days_ago is not None:
        run_finish(run, days_ago=finished_days_ago)
    return run


def run_finish(run: Run, *, days_ago: float) -> None:
    ended = timezone.now() - timedelta(days=days_ago)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.FINISHED, finished_at=ended, last_seen_at=ended)
    run.refresh_from_db()


def later(days: float) -> datetime:
    return timezone.now() + timedelta(days=days)

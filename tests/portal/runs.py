"""Runs the portal tests make through the real ingest API: one rank, one-second steps with a share
in the data loader, finished; and a client signed in as a person (or anonymous)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.conftest import Tenant

S = 10**9


def finished_run(tenant: Tenant, name: str, start: datetime, seconds: int, data_s: float, **fields: Any) -> str:
    """A finished H100 run of `seconds` one-second steps, `data_s` of each in the data loader;
    `fields` go to its registration (tags, launched_by, ...)."""
    run_id = tenant.create_run(
        name=name, gpu_model="H100-SXM", gpu_count=1, dtype="bf16",
        allocation_start=start.isoformat(), started_at=start.isoformat(), **fields,
    )  # fmt: skip
    t0 = int(start.timestamp()) * S
    steps = {
        "step": list(range(seconds)),
        "t_start_ns": [t0 + i * S for i in range(seconds)],
        "dur_ns": [S] * seconds,
        "data_ns": [int(data_s * S)] * seconds,
        "forward_ns": [int((1 - data_s) * S / 3)] * seconds,
        "backward_ns": [int((1 - data_s) * S * 2 / 3)] * seconds,
        "flops": [0.15 * 989.4e12] * seconds,  # the same step in every run: they are peers
    }
    assert tenant.post_steps(run_id, {"rank": 0, "steps": steps}).status_code == 200
    event = {"id": "end", "kind": "finish", "t_ns": t0 + seconds * S, "status": "finished"}
    tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")
    return run_id


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client

"""Suite-wide fixtures: an owner / outsider pair of projects with tokens, and API clients."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from phantomhub.accounts.models import Project
from phantomhub.accounts.services import project_token_for_slugs

T0_NS = 1_790_000_000 * 10**9  # 2026-09-21, a plausible epoch-ns timestamp


@dataclass
class Tenant:
    project: Project
    token: str
    client: APIClient

    def create_run(self, **fields: Any) -> str:
        run_id = str(fields.pop("id", uuid.uuid4()))
        response = self.client.post("/api/v1/runs", {"id": run_id, "name": "r", **fields}, format="json")
        assert response.status_code in (200, 201), response.content
        return run_id

    def post_steps(self, run_id: str, body: Any, **extra: Any) -> Any:
        return self.client.post(f"/api/v1/runs/{run_id}/steps", body, format="json", **extra)


def _tenant(team: str, project: str) -> Tenant:
    issued = project_token_for_slugs(team_slug=team, project_slug=project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    assert issued.token.project is not None
    return Tenant(project=issued.token.project, token=issued.raw, client=client)


@pytest.fixture
def owner(db: None) -> Tenant:
    return _tenant("nlp", "llm-pretrain")


@pytest.fixture
def outsider(db: None) -> Tenant:
    return _tenant("vision", "detector")


def steps_body(n: int = 10, *, rank: int = 0, first: int = 0, **columns: Any) -> dict[str, Any]:
    """A valid columnar batch of n steps of 100 ms each, overridable column by column."""
    steps: dict[str, Any] = {
        "step": list(range(first, first + n)),
        "t_start_ns": [T0_NS + (first + i) * 100_000_000 for i in range(n)],
        "dur_ns": [100_000_000] * n,
        "data_ns": [10_000_000] * n,
        "forward_ns": [30_000_000] * n,
        "backward_ns": [45_000_000] * n,
        "optimizer_ns": [5_000_000] * n,
        "comm_ns": [4_000_000] * n,
        "flops": [1.5e15] * n,
        "tokens": [4096] * n,
        "samples": [8] * n,
        "mem_allocated": [30 * 2**30] * n,
        "mem_reserved": [36 * 2**30] * n,
        "mem_peak": [34 * 2**30] * n,
        "alloc_retries": [0] * n,
    }
    steps.update(columns)
    return {"rank": rank, "steps": steps}

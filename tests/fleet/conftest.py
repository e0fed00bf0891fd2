"""A simulated node: collector requests built from a known timeline of what each GPU does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from phantomhub.accounts.models import Project, Team
from phantomhub.fleet.services import node_token_create
from phantomhub.pricing.models import PriceEntry

NS = 10**9
HOUR_START = datetime(2026, 9, 21, 10, 0, tzinfo=UTC)
T0 = int(HOUR_START.timestamp()) * NS
GIB = 2**30

# What one GPU does in an interval: (util_pct, mem_used_bytes, [(pid, mem_bytes, owner index)])
Activity = tuple[float, int, list[tuple[int, int, int | None]]]


def node_meta(hostname: str = "gpu-a-17", gpu_count: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "hostname": hostname, "provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge",
        "resource_id": f"i-{hostname}", "gpu_model": "H100-SXM", "gpu_count": gpu_count,
        "labels": {"k8s.node": hostname}, "collector_version": "0.1", "source": "nvml", **extra,
    }  # fmt: skip


def node_body(
    *,
    t_ns: list[int],
    activity: Callable[[int, int], Activity],
    owners: list[dict[str, Any]],
    node: dict[str, Any],
    interval_s: int = 15,
) -> dict[str, Any]:
    gpus: dict[str, list[Any]] = {
        k: []
        for k in ("t_ns", "gpu_index", "gpu_uuid", "util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "sm_clock_mhz")
    }
    procs: dict[str, list[Any]] = {k: [] for k in ("t_ns", "gpu_index", "pid", "mem_used_bytes", "owner")}
    for t in t_ns:
        for g in range(node["gpu_count"]):
            util, mem, held = activity(g, t)
            for key, value in zip(gpus, (t, g, f"GPU-{g:04d}", util, mem, 80 * GIB, 300.0, 1980.0), strict=True):
                gpus[key].append(value)
            for pid, pmem, owner in held:
                for key, value in zip(procs, (t, g, pid, pmem, owner), strict=True):
                    procs[key].append(value)
    return {"node": node, "interval_s": interval_s, "gpus": gpus, "processes": procs, "owners": owners}


@pytest.fixture
def node_client(db: None) -> APIClient:
    return node_client_make()


def node_client_make() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {node_token_create(name='test', hostnames=['*']).raw}")
    return client


@pytest.fixture
def h100_price(db: None) -> PriceEntry:
    return h100_price_make()


def h100_price_make() -> PriceEntry:
    """A price the test controls: $3.60 per GPU-hour (one cent per 10 GPU-seconds)."""
    return PriceEntry.objects.create(
        gpu="H100-SXM", provider="aws", region="us-east-1", usd_per_gpu_hour=Decimal("3.6000"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip


@pytest.fixture
def teams(db: None) -> dict[str, Team]:
    return teams_make()


def teams_make() -> dict[str, Team]:
    nlp = Team.objects.create(slug="nlp", name="nlp")
    vision = Team.objects.create(slug="vision", name="vision")
    Project.objects.create(slug="llm-pretrain", name="llm", team=nlp)
    return {"nlp": nlp, "vision": vision}


RAW_DAYS_FOR_FIXED_DATES = 3650


@pytest.fixture(autouse=True)
def raw_days_for_fixed_dates(settings: Any) -> None:
    """The tests' samples carry fixed dates in 2026; keep raw samples long enough to accept them."""
    settings.FLEET_RAW_DAYS = RAW_DAYS_FOR_FIXED_DATES


@pytest.fixture
def server_threads_close_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections opened by an in-process server's threads end with their request, so none is
    left open on the test database when it is dropped."""
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)

"""One GPU, one owner, however it is read: a GPU a registered run holds is instrumented on a
dcgm-exporter node (no pids, so no run registry) as on an NVML node, and priced once.

The node's requests are built by the collector's own code from the recorded dcgm-exporter page
(tests/agent/data/dcgm-exporter-h100x4.prom: GPU 0 trains in pod ml-team/train-llm-0, 1 is a
notebook holding memory, 2 is unused, 3 serves inference); the run registers through the API with
the host and GPUs its agent reports (`environment.gpus`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from phantomhub.accounts.models import Project
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import FleetDay, GpuClass, GpuSample, Owner
from phantomhub.fleet.selectors import fleet_by_project, fleet_summary
from phantomhub.fleet.services import RuleInput, rules_replace
from phantomhub.periods import range_period
from phantomhub.telemetry.models import RunGpu
from phantomhub_agent.node._collector import payload_build
from phantomhub_agent.node._sources import Holder, readings_from_dcgm
from tests.conftest import Tenant
from tests.fleet.conftest import HOUR_START, NS, T0

pytestmark = pytest.mark.django_db
PAGE = (Path(__file__).parents[1] / "agent" / "data" / "dcgm-exporter-h100x4.prom").read_text()
UUID0 = "GPU-5f2c1a7e-93b4-4d0e-8c61-2e7a9b3f0c11"  # GPU 0 of the page
TIMES = [T0 + (i + 1) * 15 * NS for i in range(40)]  # ten minutes of 15 s samples
DAY = "2026-09-21..2026-09-21"


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def register(tenant: Tenant, *, gpus: list[dict[str, Any]], host: str = "gpu-a-17", rank: int = 0, **fields: Any) -> str:
    body = {
        "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "world_size": 1,
        "allocation_start": _iso(HOUR_START - timedelta(seconds=10)), "started_at": _iso(HOUR_START),
        "environment": {"host": host, "rank": rank, "gpus": gpus}, **fields,
    }  # fmt: skip
    return tenant.create_run(**body)


def post_dcgm(client: APIClient, page: str = PAGE, times: list[int] = TIMES) -> None:
    readings, hostname = readings_from_dcgm(page)
    for t in times:
        body = payload_build(
            node={"hostname": hostname, "source": "dcgm"}, interval_s=15, t_ns=t, readings=readings, owner_of=lambda pid: None
        )
        response = client.post("/api/v1/nodes/samples", body, format="json")
        assert response.status_code == 200, response.content


def classes() -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for index, cls in GpuSample.objects.values_list("gpu_index", "cls"):
        out.setdefault(index, set()).add(cls)
    return out


@pytest.fixture
def ml_team_rule(owner: Tenant) -> None:
    """The training pod's namespace maps to the run's own project: before, its GPU's time showed
    there as "uninstrumented" beside the run's own cost."""
    rules_replace(rules=[RuleInput("k8s_namespace", "", "ml-team", None, owner.project)])


def test_a_dcgm_gpu_held_by_a_registered_run_is_instrumented_and_counted_once(
    node_client: APIClient, h100_price: Any, owner: Tenant, ml_team_rule: None
) -> None:
    run_id = register(owner, gpus=[{"index": 0, "uuid": UUID0}])
    assert list(RunGpu.objects.values_list("rank", "host", "gpu_index", "gpu_uuid")) == [(0, "gpu-a-17", 0, UUID0)]
    post_dcgm(node_client)
    assert classes() == {
        0: {GpuClass.INSTRUMENTED},
        1: {GpuClass.IDLE_HELD},
        2: {GpuClass.EMPTY},
        3: {GpuClass.BUSY_UNINSTRUMENTED},
    }
    holder = Owner.objects.get(pk=GpuSample.objects.filter(gpu_index=0).values_list("holder_id", flat=True).first())
    assert holder.data == {"kind": "run", "project": "llm-pretrain", "run_id": run_id, "server_run_id": run_id}
    assert holder.project == owner.project
    fleet_derive_pending()
    summary = fleet_summary(period=range_period(DAY))
    assert summary["coverage"] == 0.25  # was 0.0: the run's GPU read as busy, uninstrumented
    assert summary["classes"]["instrumented"]["gpu_hours"] == 0.167  # 40 samples of 15 s
    # The run's project carries no fleet dollars for its own GPU: its cost is the run's alone.
    assert fleet_by_project(range_period(DAY)).get(owner.project.pk, {}).get("uninstrumented_usd", 0.0) == 0.0


def test_without_the_runs_gpus_the_same_page_counts_its_gpu_twice(
    node_client: APIClient, h100_price: Any, owner: Tenant, ml_team_rule: None
) -> None:
    """The case the matching fixes, kept as the reference: a run that reported no GPU."""
    register(owner, gpus=[])
    post_dcgm(node_client)
    fleet_derive_pending()
    assert fleet_summary(period=range_period(DAY))["coverage"] == 0.0
    # Ten minutes of the run's H100, "uninstrumented" in the run's own project beside its own cost.
    pod = FleetDay.objects.get(cls=GpuClass.BUSY_UNINSTRUMENTED, project=owner.project)
    assert pod.gpu_ns == 600 * NS and pod.cost_cents > 0
    assert fleet_by_project(range_period(DAY))[owner.project.pk]["uninstrumented_usd"] == pod.cost_cents / 100


def test_dcgm_and_nvml_nodes_agree_on_the_owner(node_client: APIClient, h100_price: Any, owner: Tenant) -> None:
    """The same run seen on a dcgm node (matched by UUID) and on an NVML node (its pid found in
    the run registry, the owner the collector sends): one owner, instrumented on both."""
    run_id = register(owner, gpus=[{"index": 0, "uuid": UUID0}])
    post_dcgm(node_client, times=TIMES[:1])
    readings, _ = readings_from_dcgm(PAGE.replace('Hostname="gpu-a-17"', 'Hostname="gpu-b-01"'))
    for reading in readings:
        reading.holders = []
    readings[0].uuid = "GPU-other-node-0"
    registry_owner = {"kind": "run", "project": "llm-pretrain", "run_id": run_id, "server_run_id": run_id}
    readings[0].holders = [Holder(pid=4242, mem_used_bytes=70 * 2**30)]
    body = payload_build(
        node={"hostname": "gpu-b-01", "source": "nvml"}, interval_s=15, t_ns=TIMES[0], readings=readings,
        owner_of=lambda pid: registry_owner if pid == 4242 else None,
    )  # fmt: skip
    assert node_client.post("/api/v1/nodes/samples", body, format="json").status_code == 200
    held = GpuSample.objects.filter(gpu_index=0).values_list("node__hostname", "cls", "holder_id")
    assert {(h, c) for h, c, _ in held} == {("gpu-a-17", GpuClass.INSTRUMENTED), ("gpu-b-01", GpuClass.INSTRUMENTED)}
    assert len({owner_id for _, _, owner_id in held}) == 1


def test_a_rank_without_uuid_matches_by_host_and_index_and_only_while_it_runs(
    node_client: APIClient, h100_price: Any, owner: Tenant
) -> None:
    run_id = register(owner, gpus=[{"index": 0, "uuid": None}], host="GPU-A-17.cluster.example")
    finish_at = TIMES[19]
    event = {"id": "finish", "kind": "finish", "t_ns": finish_at, "status": "finished"}
    assert owner.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json").status_code == 200
    post_dcgm(node_client)
    by_time = dict(GpuSample.objects.filter(gpu_index=0).values_list("t_ns", "cls"))
    assert {by_time[t] for t in TIMES[:20]} == {GpuClass.INSTRUMENTED}  # up to its finish
    assert {by_time[t] for t in TIMES[20:]} == {GpuClass.BUSY_UNINSTRUMENTED}  # the pod computes on


def test_another_hosts_index_or_another_uuid_is_not_the_runs(node_client: APIClient, h100_price: Any, owner: Tenant) -> None:
    register(owner, gpus=[{"index": 0, "uuid": None}], host="gpu-z-99")  # same index, another host
    register(owner, gpus=[{"index": 0, "uuid": "GPU-not-this-one"}])  # same host and index, another GPU
    post_dcgm(node_client, times=TIMES[:2])
    assert classes()[0] == {GpuClass.BUSY_UNINSTRUMENTED}


@pytest.mark.parametrize(
    ("gpus", "field"),
    [
        ([{"index": -1, "uuid": None}], "environment.gpus[0].index"),
        ([{"index": 0, "uuid": "x" * 97}], "environment.gpus[0].uuid"),
        ([{"index": None, "uuid": None}], "environment.gpus[0]"),
        ([{"index": 0, "bus": 1}], "environment.gpus[0]"),
        ("GPU-0", "environment.gpus"),
    ],
)
def test_a_malformed_gpu_list_is_a_400_naming_it_and_stores_no_run(owner: Tenant, gpus: Any, field: str) -> None:
    body = {"id": "9b1c0e0e-2f77-4d39-8d43-0d1e4f6f2a10", "environment": {"host": "h", "rank": 0, "gpus": gpus}}
    response = owner.client.post("/api/v1/runs", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert not Project.objects.get(pk=owner.project.pk).runs.exists()


def test_a_restarted_rank_replaces_its_gpus(owner: Tenant) -> None:
    run_id = register(owner, gpus=[{"index": 0, "uuid": UUID0}], rank=1)
    register(owner, gpus=[{"index": 3, "uuid": "GPU-7a61e0b9-2f4d-4c83-b5e7-0d9c3a18f6e4"}], rank=1, id=run_id)
    register(owner, gpus=[{"index": 1, "uuid": None}], rank=0, id=run_id)
    assert sorted(RunGpu.objects.values_list("rank", "gpu_index")) == [(0, 1), (1, 3)]

"""DCGM's SM activity decides busy when the collector sends it: a request built by the collector's
own code from the recorded dcgm-exporter page, with the page's values edited to known states."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from phantomhub.fleet.classify import BUSY_UNINSTRUMENTED, EMPTY, IDLE_HELD, gpu_classify
from phantomhub.fleet.models import GpuSample, GpuState
from phantomhub_agent.node._collector import payload_build
from phantomhub_agent.node._sources import readings_from_dcgm
from tests.fleet.conftest import T0

pytestmark = pytest.mark.django_db
PAGE = (Path(__file__).parents[1] / "agent" / "data" / "dcgm-exporter-h100x4.prom").read_text()
GIB = 2**30


def edit(page: str, metric: str, gpu: int, value: str) -> str:
    edited, n = re.subn(rf'^({metric}\{{gpu="{gpu}",.*\}}) \S+$', rf"\g<1> {value}", page, flags=re.M)
    assert n == 1
    return edited


def post_page(client: APIClient, page: str) -> dict[int, int]:
    readings, hostname = readings_from_dcgm(page)
    body = payload_build(
        node={"hostname": hostname, "source": "dcgm"}, interval_s=15, t_ns=T0, readings=readings, owner_of=lambda pid: None
    )
    response = client.post("/api/v1/nodes/samples", body, format="json")
    assert response.status_code == 200, response.content
    return dict(GpuSample.objects.filter(t_ns=T0).values_list("gpu_index", "cls"))


def test_the_recorded_page_is_classified_with_its_sm_activity(node_client: APIClient) -> None:
    # The page: GPU 0 trains (util 97, SM active 0.91), 1 is a notebook holding 37 GiB (0, 0.0),
    # 2 is unused (0, 0.0, no pod), 3 serves inference (util 43, SM active 0.38).
    assert post_page(node_client, PAGE) == {0: BUSY_UNINSTRUMENTED, 1: IDLE_HELD, 2: EMPTY, 3: BUSY_UNINSTRUMENTED}
    assert dict(GpuSample.objects.values_list("gpu_index", "sm_active")) == {0: 0.912034, 1: 0.0, 2: 0.0, 3: 0.382511}


def test_sm_activity_overrides_utilization_in_both_directions(node_client: APIClient) -> None:
    page = edit(PAGE, "DCGM_FI_DEV_GPU_UTIL", 1, "100")  # the notebook spins one tiny kernel:
    page = edit(page, "DCGM_FI_PROF_SM_ACTIVE", 1, "0.012")  # "100% utilized", 1.2% of SM cycles
    page = edit(page, "DCGM_FI_DEV_GPU_UTIL", 3, "3")  # the inference server's sampled utilization
    page = edit(page, "DCGM_FI_PROF_SM_ACTIVE", 3, "0.05")  # misses its kernels; SM activity at 5% does not
    assert post_page(node_client, page) == {0: BUSY_UNINSTRUMENTED, 1: IDLE_HELD, 2: EMPTY, 3: BUSY_UNINSTRUMENTED}
    state = dict(GpuState.objects.values_list("gpu_index", "cls"))
    assert state[1] == IDLE_HELD and state[3] == BUSY_UNINSTRUMENTED


def test_without_sm_activity_the_utilization_rule_applies(node_client: APIClient) -> None:
    page = "\n".join(line for line in PAGE.splitlines() if not line.startswith("DCGM_FI_PROF_SM_ACTIVE"))
    page = edit(page, "DCGM_FI_DEV_GPU_UTIL", 1, "100")
    readings, _ = readings_from_dcgm(page)
    assert all(r.sm_active is None for r in readings)
    assert post_page(node_client, page) == {0: BUSY_UNINSTRUMENTED, 1: BUSY_UNINSTRUMENTED, 2: EMPTY, 3: BUSY_UNINSTRUMENTED}


@pytest.mark.parametrize(
    ("util_pct", "sm_active", "expected"),
    [
        (100.0, 0.0499, IDLE_HELD),
        (0.0, 0.05, BUSY_UNINSTRUMENTED),
        (4.9, None, IDLE_HELD),
        (5.0, None, BUSY_UNINSTRUMENTED),
        (None, 0.0, IDLE_HELD),  # SM activity is evidence enough without utilization
        (None, None, BUSY_UNINSTRUMENTED),  # no evidence: never called idle
    ],
)
def test_the_rule_at_its_threshold(util_pct: float | None, sm_active: float | None, expected: int) -> None:
    cls, _ = gpu_classify(util_pct=util_pct, mem_used_bytes=8 * GIB, processes=[(7, "k8s", 8 * GIB)], sm_active=sm_active)
    assert cls == expected

"""Browser tests of the Fleet page and the attribution-rule preview, against a real server whose
node telemetry came in through the node API (tests/e2e/seed.py: seed_fleet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Api, Server
from tests.e2e.seed import Client, seed_fleet

pytestmark = [pytest.mark.e2e, pytest.mark.live_server, pytest.mark.slow]

DERIVE = "from phantomhub.fleet.derive import fleet_derive_pending; fleet_derive_pending()"
LATEST = (
    "from phantomhub.fleet.models import GpuState; "
    "print(GpuState.objects.get(node__hostname='e2e-gpu-node', gpu_index=3).last_t_ns)"
)
COUNTERS = {"sent_batches": 239, "spooled_batches": 4, "replayed_batches": 4, "dropped_samples": 2, "spool_dropped_batches": 1}


def report_counters(server: Server, token: str) -> None:
    """The node's latest sample again (a duplicate: nothing stored) carrying its collector's counters."""
    t_ns = int(server.manage("shell", "-c", LATEST).strip().splitlines()[-1])
    node = {"hostname": "e2e-gpu-node", "provider": "aws", "region": "us-east-1", "resource_id": "i-0e2e",
            "gpu_model": "H100-SXM", "gpu_count": 4, "source": "nvml"}  # fmt: skip
    gpus = {"t_ns": [t_ns], "gpu_index": [3], "util_pct": [0.0], "mem_used_bytes": [0]}
    Client(server.url, token).post("/api/v1/nodes/samples", {"node": node, "interval_s": 15, "gpus": gpus, "counters": COUNTERS})


@pytest.fixture(scope="module")
def fleet(server: Server) -> Server:
    token = server.manage("createnodetoken", "--hostname", "e2e-*", "--name", "e2e").strip()
    seed_fleet(server.url, token)
    report_counters(server, token)
    server.manage("shell", "-c", DERIVE)
    return server


def test_the_fleet_page_shows_what_the_server_computed(fleet: Server, api: Api, signed_in: Any) -> None:
    summary = api.get_json("/api/v1/fleet/summary?period=7d")
    page = signed_in
    page.get_by_role("link", name="Fleet").click()
    page.get_by_role("heading", name="Fleet").wait_for()
    page.goto("/fleet?period=7d")
    coverage = page.get_by_test_id("fleet-coverage")
    coverage.wait_for()
    assert f"{summary['coverage'] * 100:.1f}%" in coverage.inner_text()
    for cls in ("instrumented", "busy_uninstrumented", "idle_held", "empty"):
        usd = summary["classes"][cls]["usd"]
        assert usd > 0
        assert f"${usd:,.2f}" in page.get_by_test_id(f"fleet-class-{cls}").inner_text()
    idle = page.get_by_test_id("fleet-idle-now")
    assert "e2e-gpu-node · GPU 2" in idle.inner_text()
    assert "slurm job 4711 (erin, speech)" in idle.inner_text()
    assert "e2e-gpu-node" in page.get_by_test_id("fleet-nodes").inner_text()
    node = next(n for n in summary["nodes"] if n["node"] == "e2e-gpu-node")
    assert node["collector_dropped"] == 2 + 1 and node["collector_spooled"] == 4
    collector = page.get_by_test_id("collector-e2e-gpu-node")
    badge = collector.locator(".badge-bad")
    assert badge.inner_text() == "dropped 3" and "spooled 4" in collector.inner_text()
    with page.expect_download() as download:
        page.get_by_test_id("fleet-nodes-csv").click()
    text = Path(download.value.path()).read_text()
    assert text.splitlines()[0].startswith("node,gpu_model,gpu_count")
    assert "e2e-gpu-node" in text
    assert "collector_dropped" in text.splitlines()[0]


def test_an_admin_previews_a_rule_on_the_last_day_then_saves_it(fleet: Server, api: Api, signed_in: Any) -> None:
    page = signed_in
    page.goto("/settings?tab=attribution")
    page.get_by_role("button", name="Add rule").click()
    page.get_by_label("Rule 1 matches").select_option("slurm_account")
    page.get_by_label("Rule 1 pattern").fill("spee*")
    page.get_by_label("Rule 1 project").fill("asr")
    page.get_by_test_id("rules-preview").click()
    result = page.get_by_test_id("rules-preview-result")
    result.wait_for()
    row = result.locator("tr", has_text="slurm job 4711")
    assert "speech / asr" in row.inner_text() and "rule 1" in row.inner_text() and "now unattributed" in row.inner_text()
    assert api.get_json("/api/v1/fleet/rules")["rules"] == []  # a preview saves nothing
    page.get_by_test_id("rules-save").click()
    page.get_by_role("status").filter(has_text="Saved").wait_for()
    page.get_by_test_id("attribution-job").filter(has_text="Re-attributed").wait_for()  # the job, off the request path
    assert api.get_json("/api/v1/fleet/rules")["rules"][0]["project"] == "asr"
    holders = api.get_json("/api/v1/fleet/summary?period=7d")["holders"]
    assert next(h for h in holders if h["kind"] == "slurm")["project"] == "asr"
    page.goto("/fleet?period=7d")
    assert "speech / asr" in page.get_by_test_id("fleet-holders").inner_text()

"""One GPU, one owner, on a dcgm-exporter node: the real collector (`phantomhub-agent node --source
dcgm`) scrapes a page in dcgm-exporter's format served from 127.0.0.1 (the recorded page of four
H100s, tests/agent/data/dcgm-exporter-h100x4.prom: metric names, HELP/TYPE lines, the gpu, UUID,
device, modelName, Hostname and Kubernetes labels) and reports to the real server, while a
training process running the real agent holds GPU 0 (the stand-in NVML names it: the GPU is the
only fake). The page has no pids, so the run registry cannot name the run; its registration does
(host and GPU UUID), and the GPU is the run's: coverage 25 %, and the run's project is not
charged a second time for its GPU-time as "uninstrumented"."""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import PYTHON, REPO, LiveServer
from .test_node_collector import node_cmd, node_env, wait_for
from .test_node_nvml import gpu

pytestmark = pytest.mark.live_server
PAGE = (Path(__file__).parent / "data" / "dcgm-exporter-h100x4.prom").read_text()
UUIDS = [
    "GPU-5f2c1a7e-93b4-4d0e-8c61-2e7a9b3f0c11",
    "GPU-0b8e44d2-1c7f-4a55-9e03-7d61c2a8e4f2",
    "GPU-c3d19f60-5e2a-4b7c-a1f8-94e0d6b27a35",
    "GPU-7a61e0b9-2f4d-4c83-b5e7-0d9c3a18f6e4",
]

TRAINER = """
import sys, phantomhub_agent as pa
run = pa.init(name="dcgm-held", project="agent", debug=True, spool_dir=sys.argv[1], flush_interval_s=0.2, gpu_devices=[0])
print(run.id, flush=True)
sys.stdin.readline()
run.finish()
"""

QUERY = """
import json
from datetime import UTC, datetime
from phantomhub.accounts.models import Project
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import FleetDay, GpuClass, GpuSample
from phantomhub.fleet.selectors import fleet_nodes
from phantomhub.periods import range_period
from phantomhub.telemetry.models import RunGpu
fleet_derive_pending()
day = datetime.now(UTC).date().isoformat()
period = range_period(f"{{day}}..{{day}}")
samples = GpuSample.objects.filter(node__hostname={hostname!r}).select_related("holder")
project = Project.objects.get(slug="agent")
print(json.dumps({{
    "classes": sorted({{(s.gpu_index, s.cls, s.holder.kind if s.holder else None) for s in samples}}),
    "holders": sorted({{json.dumps(s.holder.data, sort_keys=True) for s in samples if s.gpu_index == 0}}),
    "coverage": [n["coverage"] for n in fleet_nodes(period) if n["node"] == {hostname!r}],
    # This node's part of the project's fleet dollars: the live server is shared with the other
    # node tests, whose pods the rule below may map to the same project.
    "project_fleet": {{
        name: sum(FleetDay.objects.filter(node__hostname={hostname!r}, project=project, cls=cls, day=day)
                  .values_list("cost_cents", flat=True)) / 100
        for name, cls in (("uninstrumented_usd", GpuClass.BUSY_UNINSTRUMENTED), ("idle_held_usd", GpuClass.IDLE_HELD))
    }},
    "run_gpus": list(RunGpu.objects.filter(run__name="dcgm-held").values_list("rank", "gpu_index", "gpu_uuid")),
}}))
"""


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[str]:
    """dcgm-exporter's /metrics on 127.0.0.1, as a node of this test's own name."""
    hostname = f"dcgm-{uuid.uuid4().hex[:8]}"
    page = PAGE.replace('Hostname="gpu-a-17"', f'Hostname="{hostname}"').encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"{hostname} http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_a_dcgm_node_counts_a_registered_runs_gpu_once(live: LiveServer, exporter: str, tmp_path: Path) -> None:
    hostname, url = exporter.split()
    node_token = live.manage("createnodetoken", "--hostname", "*", "--name", f"dcgm-{uuid.uuid4().hex[:6]}").strip()
    # The training pod's namespace maps to the run's own project, as a site's rules would: a GPU
    # read as the pod's ("busy, uninstrumented") would be charged to the project beside the run.
    live.manage(
        "shell", "-c",
        "from phantomhub.accounts.models import Project; from phantomhub.fleet.services import RuleInput, rules_replace; "
        "rules_replace(rules=[RuleInput('k8s_namespace', '', 'ml-team', None, Project.objects.get(slug='agent'))])",
    )  # fmt: skip
    nvml_state = tmp_path / "nvml-state.json"  # what the trainer's NVML sees: the page's GPUs
    nvml_state.write_text(json.dumps({"gpus": [gpu(i, uuid=u) for i, u in enumerate(UUIDS)]}))
    env = {**node_env(tmp_path, nvml_state), "PHANTOMHUB_SERVER": live.url, "PHANTOMHUB_TOKEN": live.token}
    trainer = subprocess.Popen(
        [PYTHON, "-c", TRAINER, str(tmp_path / "agent-spool")], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert trainer.stdout is not None
        trainer.stdout.readline()
        registry = tmp_path / "runs" / f"{trainer.pid}.json"
        wait_for(lambda: registry.exists() and json.loads(registry.read_text())["server_run_id"] is not None)
        run = json.loads(registry.read_text())
        collector = subprocess.Popen(
            node_cmd("--server", live.url, "--token", node_token, "--source", "dcgm", "--dcgm-url", url,
                     "--interval", "1", "--spool", str(tmp_path / "node-spool")),
            env={**node_env(tmp_path, None)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        query = QUERY.format(hostname=hostname)
        wait_for(lambda: len(json.loads(live.manage("shell", "-c", query).splitlines()[-1])["classes"]) >= 4, timeout_s=60)
        time.sleep(3)  # a few more samples
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=20)
        assert collector.returncode == 0, err
    finally:
        if trainer.stdin is not None:
            trainer.stdin.write("\n")
            trainer.stdin.flush()
        trainer.wait(timeout=30)

    got = json.loads(live.manage("shell", "-c", QUERY.format(hostname=hostname)).splitlines()[-1])
    assert got["run_gpus"] == [[0, 0, UUIDS[0]]]  # what the trainer's rank registered
    # GPU 0: the run's (instrumented); 1: the notebook's pod, idle-held; 2: empty; 3: inference, busy.
    assert got["classes"] == [[0, 1, "run"], [1, 3, "k8s"], [2, 4, None], [3, 2, "k8s"]]
    assert [json.loads(h) for h in got["holders"]] == [
        {"kind": "run", "project": "agent", "run_id": run["run_id"], "server_run_id": run["server_run_id"]}
    ]  # the very owner an NVML node names from the run registry
    assert got["coverage"] == [0.25]  # the node's: one of four GPUs; 0.0 when the page's pod held it
    assert got["project_fleet"].get("uninstrumented_usd", 0.0) == 0.0  # the run's GPU-time is the run's, once

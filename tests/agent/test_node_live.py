"""The node collector against the real PhantomHub server (gunicorn on a temporary database, the
repo's live-server fixture): a collector run's samples land in the server, classified as the
GPUs' known states say, with the GPU a real training run holds counted as that run's."""

from __future__ import annotations

import gzip
import http.server
import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import PYTHON, REPO, LiveServer
from .test_node_collector import node_cmd, node_env, printed, wait_for

pytestmark = pytest.mark.live_server
GIB = 1024**3

AGENT_SCRIPT = """
import sys, phantomhub_agent as pa
run = pa.init(name="held-gpu", debug=True, spool_dir=sys.argv[1], flush_interval_s=0.2)
print(run.id, flush=True)
sys.stdin.readline()
run.finish()
"""

QUERY = """
import json
from phantomhub.fleet.models import GpuSample, ProcessSample
node = {hostname!r}
gpus = [[s.gpu_index, s.t_ns, s.cls] for s in GpuSample.objects.filter(node__hostname=node).order_by("t_ns", "gpu_index")]
procs = [[p.gpu_index, p.t_ns, p.pid, p.owner.kind if p.owner else None, p.owner.data if p.owner else None]
         for p in ProcessSample.objects.filter(node__hostname=node).select_related("owner").order_by("t_ns", "gpu_index")]
print(json.dumps({{"gpus": gpus, "processes": procs}}))
"""


def stored(live: LiveServer, hostname: str) -> dict[str, Any]:
    """What the server stored for a node, read from its database with its own models."""
    out = live.manage("shell", "-c", QUERY.format(hostname=hostname))
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.fixture
def node_token(live: LiveServer) -> str:
    return live.manage("createnodetoken", "--hostname", "*", "--name", f"collector-{uuid.uuid4().hex[:6]}").strip()


def test_a_collector_runs_samples_land_in_the_server_classified_with_the_run_counted_once(
    live: LiveServer, node_token: str, tmp_path: Path
) -> None:
    env = {**node_env(tmp_path, None), "PHANTOMHUB_SERVER": live.url, "PHANTOMHUB_TOKEN": live.token}
    env.pop("PYTHONPATH")  # the training process needs no NVML
    agent = subprocess.Popen(
        [PYTHON, "-c", AGENT_SCRIPT, str(tmp_path / "agent-spool")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    plain = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
    try:
        assert agent.stdout is not None
        run_id = agent.stdout.readline().strip()
        registry = tmp_path / "runs" / f"{agent.pid}.json"
        # The run's registration is answered: its project (named by its token) is in the registry.
        wait_for(lambda: registry.exists() and json.loads(registry.read_text())["project"] == "agent")
        state = {
            "gpus": [
                {"uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "util": 97, "mem_used": 71 * GIB, "mem_total": 80 * GIB,
                 "power_mw": 612_000, "sm_clock": 1980, "compute": [[agent.pid, 70 * GIB]]},
                {"uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3", "util": 99, "mem_used": 40 * GIB, "mem_total": 80 * GIB,
                 "power_mw": 655_000, "sm_clock": 1980, "compute": [[plain[0].pid, 39 * GIB]]},
                {"uuid": "GPU-2", "name": "NVIDIA H100 80GB HBM3", "util": 0, "mem_used": 38 * GIB, "mem_total": 80 * GIB,
                 "power_mw": 71_000, "sm_clock": 345, "compute": [[plain[1].pid, 37 * GIB]]},
                {"uuid": "GPU-3", "name": "NVIDIA H100 80GB HBM3", "util": 0, "mem_used": 0, "mem_total": 80 * GIB,
                 "power_mw": 69_000, "sm_clock": 345, "compute": []},
            ]
        }  # fmt: skip
        state_path = tmp_path / "nvml-state.json"
        state_path.write_text(json.dumps(state))
        hostname = f"collector-live-{uuid.uuid4().hex[:8]}"
        collector = subprocess.Popen(
            node_cmd("--server", live.url, "--token", node_token, "--interval", "1", "--hostname", hostname,
                     "--spool", str(tmp_path / "node-spool"), "--print", "--provider", "aws", "--region", "us-east-1"),
            env={**node_env(tmp_path, state_path)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_for(lambda: len(stored(live, hostname)["gpus"]) >= 12, timeout_s=60)
        collector.send_signal(signal.SIGTERM)
        out, err = collector.communicate(timeout=20)
        assert collector.returncode == 0, err
    finally:
        if agent.stdin is not None:
            agent.stdin.write("\n")
            agent.stdin.flush()
        for proc in (agent, *plain):
            if proc is not agent:
                proc.kill()
            proc.wait(timeout=30)

    taken = printed(out)
    data = stored(live, hostname)
    assert sorted({t for _, t, _ in data["gpus"]}) == sorted(p["gpus"]["t_ns"][0] for p in taken)
    by_gpu: dict[int, set[int]] = {}
    for index, _, cls in data["gpus"]:
        by_gpu.setdefault(index, set()).add(cls)
    assert by_gpu == {0: {1}, 1: {2}, 2: {3}, 3: {4}}  # instrumented, busy uninstrumented, idle-held, empty
    run_rows = [p for p in data["processes"] if p[0] == 0]
    assert run_rows and all(p[2] == agent.pid and p[3] == "run" and p[4]["run_id"] == run_id for p in run_rows)
    assert all(p[4]["project"] == "agent" and p[4]["server_run_id"] for p in run_rows)
    assert {p[3] for p in data["processes"] if p[0] in (1, 2)} <= {"user", "k8s", "slurm"}
    assert not list((tmp_path / "node-spool").rglob("*.phk"))

    # A request replayed (an answer lost on the way) changes nothing.
    status, answer = live.request("POST", "/api/v1/nodes/samples", taken[0], token=node_token)
    assert status == 200, answer
    assert answer["stored"] == {"gpu": 0, "processes": 0} and answer["duplicates"] == 4 + 3
    assert len(stored(live, hostname)["gpus"]) == len(data["gpus"])


COUNTERS_QUERY = """
import json
from phantomhub.fleet.models import Node
node = Node.objects.get(hostname={hostname!r})
print(json.dumps({{"counters": node.counters, "t_ns": node.counters_t_ns, "at": str(node.counters_at)}}))
"""


class OutageProxy:
    """Forwards the collector's requests to the live server, or answers 503 while ``down``."""

    def __init__(self, upstream: str) -> None:
        proxy = self
        self.down = True
        self.forwarded: list[tuple[int, bytes, dict[str, str]]] = []  # (status, body, headers) in order

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if proxy.down:
                    status, answer = 503, b'{"error": {"code": "unavailable", "message": "outage", "fields": {}}}'
                else:
                    keep = ("Authorization", "Content-Type", "Content-Encoding")
                    headers = {k: v for k in keep if (v := self.headers.get(k)) is not None}
                    request = urllib.request.Request(upstream + self.path, data=body, headers=headers, method="POST")
                    try:
                        with urllib.request.urlopen(request, timeout=30) as response:
                            status, answer = response.status, response.read()
                    except urllib.error.HTTPError as exc:
                        status, answer = exc.code, exc.read()
                    proxy.forwarded.append((status, body, dict(self.headers)))
                self.send_response(status)
                if status == 503:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_after_an_outage_the_server_keeps_the_collectors_latest_counters_with_the_spooling_in_them(
    live: LiveServer, node_token: str, tmp_path: Path
) -> None:
    gpu = {"uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "util": 0, "mem_used": 0, "mem_total": 80 * GIB,
           "power_mw": 69_000, "sm_clock": 345, "compute": []}  # fmt: skip
    state_path = tmp_path / "nvml-state.json"
    state_path.write_text(json.dumps({"gpus": [gpu]}))
    spool = tmp_path / "node-spool"
    hostname = f"collector-outage-{uuid.uuid4().hex[:8]}"
    proxy = OutageProxy(live.url)
    try:
        collector = subprocess.Popen(
            node_cmd("--server", proxy.url, "--token", node_token, "--interval", "1", "--hostname", hostname,
                     "--spool", str(spool), "--print"),
            env=node_env(tmp_path, state_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_for(lambda: len(list(spool.rglob("*.phk"))) >= 1, timeout_s=60)  # retries spent: spooled
        proxy.down = False  # the server is back: the backlog is replayed, new requests tell of it

        def counters() -> dict[str, Any]:
            out = live.manage("shell", "-c", COUNTERS_QUERY.format(hostname=hostname))
            return dict(json.loads(out.strip().splitlines()[-1]))

        wait_for(lambda: bool(proxy.forwarded) and counters()["counters"].get("spooled_batches", 0) > 0, timeout_s=60)
        wait_for(lambda: not list(spool.rglob("*.phk")), timeout_s=60)
        collector.send_signal(signal.SIGTERM)
        out, err = collector.communicate(timeout=20)
        assert collector.returncode == 0, err
    finally:
        proxy.close()

    kept = counters()
    assert kept["counters"]["spooled_batches"] > 0 and kept["counters"]["send_failures"] > 0
    assert kept["counters"]["dropped_samples"] == 0 and kept["counters"]["spool_dropped_batches"] == 0
    # What the server kept is the counters of the delivered request with the latest sample.
    delivered = [json.loads(gzip.decompress(b) if h.get("Content-Encoding") == "gzip" else b) for s, b, h in proxy.forwarded
                 if s == 200]  # fmt: skip
    latest = max(delivered, key=lambda body: body["gpus"]["t_ns"][0])
    assert kept["t_ns"] == latest["gpus"]["t_ns"][0] and kept["counters"] == latest["counters"]
    # Nothing lost to the outage: every sample taken is stored, once.
    taken = sorted(p["gpus"]["t_ns"][0] for p in printed(out))
    assert sorted(t for _, t, _ in stored(live, hostname)["gpus"]) == taken


def test_a_project_token_cannot_send_node_telemetry_and_the_collector_keeps_it(live: LiveServer, tmp_path: Path) -> None:
    state_path = tmp_path / "nvml-state.json"
    gpu = {
        "uuid": "GPU-0",
        "name": "NVIDIA H100 80GB HBM3",
        "util": 0,
        "mem_used": 0,
        "mem_total": 80 * GIB,
        "power_mw": 1,
        "sm_clock": 1,
    }
    state_path.write_text(json.dumps({"gpus": [gpu]}))
    spool = tmp_path / "node-spool"
    done = subprocess.run(
        node_cmd("--server", live.url, "--token", live.token, "--once", "--spool", str(spool), "--hostname", "wrong-token"),
        env=node_env(tmp_path, state_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "refused /api/v1/nodes/samples with 403" in done.stderr and "phantomhub-agent sync" in done.stderr
    assert len(list(spool.rglob("*.phk"))) == 1  # kept for `phantomhub-agent sync` with the right token


def test_every_owner_kind_the_collector_names_is_taken_by_the_server(live: LiveServer, node_token: str, tmp_path: Path) -> None:
    """Owners from a proc root shaped like a Kubernetes and Slurm host's (pods file, kubepods and
    slurm cgroups, a run registry entry, a plain user), through the server's strict validation."""
    from .test_node_owners import BTIME, CONTAINER_ID, POD_UID, PODLIST, proc_tree, registry_file

    proc = tmp_path / "proc"
    proc_tree(proc, 4242, cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n")
    proc_tree(
        proc,
        5001,
        uid=0,
        cgroup="4:memory:/slurm/uid_0/job_12345/step_0/task_0\n",
        environ={"SLURM_JOB_ID": "12345", "SLURM_JOB_ACCOUNT": "nlp"},
    )
    proc_tree(proc, 6001, uid=0)
    proc_tree(proc, 7001, started_s=100.0)
    registry_file(tmp_path / "runs", 7001, BTIME + 100.5)  # project "llm-pretrain": not on this server
    record = json.loads((tmp_path / "runs" / "7001.json").read_text())
    (tmp_path / "runs" / "7001.json").write_text(json.dumps({**record, "project": "agent"}))
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps(PODLIST))
    gpus = [
        {"uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3", "util": 50, "mem_used": 10 * GIB, "mem_total": 80 * GIB,
         "power_mw": 300_000, "sm_clock": 1980, "compute": [[pid, 9 * GIB]]}
        for i, pid in enumerate([4242, 5001, 6001, 7001])
    ]  # fmt: skip
    state_path = tmp_path / "nvml-state.json"
    state_path.write_text(json.dumps({"gpus": gpus}))
    hostname = f"collector-owners-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        node_cmd("--server", live.url, "--token", node_token, "--once", "--hostname", hostname, "--spool", str(tmp_path / "sp"),
                 "--proc-root", str(proc), "--run-dir", str(tmp_path / "runs"), "--pods-file", str(pods)),
        env=node_env(tmp_path, state_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = stored(live, hostname)
    owners = {p[0]: (p[3], p[4]) for p in data["processes"]}
    assert owners[0] == (
        "k8s",
        {"kind": "k8s", "namespace": "ml-team", "pod": "train-abc", "labels": PODLIST["items"][0]["metadata"]["labels"]},
    )
    assert owners[1] == ("slurm", {"kind": "slurm", "job_id": "12345", "account": "nlp", "user": "root"})
    assert owners[2] == ("user", {"kind": "user", "user": "root"})
    assert owners[3][0] == "run" and owners[3][1]["project"] == "agent"
    assert [cls for index, _, cls in sorted(data["gpus"])] == [2, 2, 2, 1]  # the run's GPU is instrumented

"""A GPU that a run of the real training agent holds is counted once: the run's analysis prices it,
and the node collector's view of the same GPU (its process named by the run registry the agent
writes) is instrumented time, never priced again in the fleet's waste or leaderboard figures."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phantomhub.accounts.services import project_token_for_slugs
from phantomhub.demo.post import Poster, local_server
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import FleetDay, GpuClass
from phantomhub.fleet.selectors import fleet_by_team, fleet_holders
from phantomhub.fleet.services import node_token_create
from phantomhub.periods import range_period
from phantomhub.telemetry.models import Run
from phantomhub.waste.models import RunDay
from phantomhub.waste.sweeps import analysis_sweep

torch = pytest.importorskip("torch")
pa = pytest.importorskip("phantomhub_agent")
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
NS = 10**9


def registry_entry(directory: Path, deadline_s: float = 20) -> dict[str, Any]:
    """This process's run registry file, once the registration's answer filled in the server's id."""
    path = directory / f"{os.getpid()}.json"
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("server_run_id"):
                return dict(data)
        time.sleep(0.05)
    raise AssertionError(f"no registered run in {path}")


def node_request(entry: dict[str, Any], times_ns: list[int]) -> dict[str, Any]:
    """What the collector sends for a node whose GPU 0 this process holds and GPU 1 a pod holds idle."""
    gpus: dict[str, list[Any]] = {"t_ns": [], "gpu_index": [], "util_pct": [], "mem_used_bytes": []}
    procs: dict[str, list[Any]] = {"t_ns": [], "gpu_index": [], "pid": [], "mem_used_bytes": [], "owner": []}
    for t in times_ns:
        for index, (util, pid, owner) in enumerate([(95.0, entry["pid"], 0), (0.0, 777, 1)]):
            for key, value in zip(gpus, (t, index, util, 8 * 2**30), strict=True):
                gpus[key].append(value)
            for key, value in zip(procs, (t, index, pid, 8 * 2**30, owner), strict=True):
                procs[key].append(value)
    run_owner = {"kind": "run", **{k: entry[k] for k in ("project", "run_id", "server_run_id")}}
    pod = {"kind": "k8s", "namespace": "notebooks", "pod": "jupyter-x", "labels": {}}
    node = {"hostname": "live-node", "provider": "aws", "region": "us-east-1", "gpu_model": "H100-SXM", "gpu_count": 2}
    return {"node": node, "interval_s": 1, "gpus": gpus, "processes": procs, "owners": [run_owner, pod]}


def test_a_live_runs_gpu_is_counted_once(
    h100_price: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_threads_close_connections: None
) -> None:
    monkeypatch.setenv("PHANTOMHUB_RUN_DIR", str(tmp_path / "runs"))
    token = project_token_for_slugs(team_slug="nlp", project_slug="llm-pretrain").raw
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with local_server() as address:
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        run = pa.init(
            project="llm-pretrain", team="nlp", name="held-by-a-run", gpu_model="H100-SXM", gpu_count=1, provider="aws",
            region="us-east-1", allocation_start=start, server=f"http://{address}", token=token, debug=True,
            spool_dir=tmp_path / "spool", flush_interval_s=0.2, finish_timeout_s=10.0,
        )  # fmt: skip
        entry = registry_entry(tmp_path / "runs")
        for _ in range(40):
            with run.step(samples=8):
                loss = model(torch.randn(8, 16)).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                time.sleep(0.02)
        end = datetime.now(UTC)
        run.finish()
        assert not (tmp_path / "runs" / f"{os.getpid()}.json").exists()  # the registry entry left with the run
        times = list(range(int(start.timestamp()) * NS + NS, int(end.timestamp()) * NS + NS, NS))
        token = node_token_create(name="live", hostnames=["live-node"]).raw
        Poster(address, token).post("/api/v1/nodes/samples", node_request(entry, times))
    while analysis_sweep(inline=True).analysed:
        pass
    fleet_derive_pending()

    stored = Run.objects.get(pk=entry["server_run_id"])
    assert str(stored.client_id or stored.pk) == entry["run_id"]
    billed_s = sum(d.gpu_seconds for d in RunDay.objects.filter(run=stored))
    assert billed_s > 1  # the run's own analysis bills (and prices) its GPU time
    instrumented = FleetDay.objects.get(cls=GpuClass.INSTRUMENTED)
    assert instrumented.holder.data["server_run_id"] == entry["server_run_id"]
    assert instrumented.project.slug == "llm-pretrain" and instrumented.gpu_ns == len(times) * NS
    day = range_period(f"{start.date()}..{end.date()}")
    nlp = stored.project.team_id
    assert fleet_by_team(day).get(nlp, {"uninstrumented_usd": 0.0, "idle_held_usd": 0.0}) == {
        "uninstrumented_usd": 0.0, "idle_held_usd": 0.0,
    }  # fmt: skip
    assert [h["holder"] for h in fleet_holders(day)] == ["pod notebooks/jupyter-x"]  # the run is no holder of waste
    idle = FleetDay.objects.get(cls=GpuClass.IDLE_HELD)
    assert idle.team is None and idle.gpu_ns == len(times) * NS

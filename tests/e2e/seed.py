"""A small organization for the browser tests, posted through the real HTTP ingest API.

Deterministic: four teams, five projects, twelve runs with distinct waste patterns (a data-starved
run, a 4-rank DDP run with a slow rank, long idle start-ups, a failed run, runs in the previous
period), so leaderboards, breakdowns and finance totals all come out of the waste model rather than
from numbers written here.
"""

from __future__ import annotations

import json
import random
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

MS = 1_000_000
SEED_NAMESPACE = uuid.UUID("7b0d7a62-58f5-4c39-9f3e-1c3f0a5e2b11")

# team, project
PROJECTS = [
    ("nlp", "llm-pretrain"),
    ("nlp", "llm-finetune"),
    ("vision", "detector"),
    ("speech", "asr"),
    ("recsys", "ranker"),
]


@dataclass(frozen=True)
class RunSpec:
    name: str
    project: str
    gpu_model: str
    ranks: int
    gpus_per_rank: int
    steps: int
    compute_ms: float  # forward + backward + optimizer per step
    data_ms: float
    comm_ms: float
    host_ms: float
    startup_s: float  # allocation before the first step (idle)
    days_ago: float
    slow_rank: int | None = None  # this rank computes 35% slower; the others wait in comm
    mfu: float = 0.4  # MFU implied by the reported FLOPs over compute time
    status: str = "finished"
    phases: tuple[tuple[str, int, float], ...] = ()  # name, after step, seconds
    tags: tuple[str, ...] = ()
    gpu_util_pct: float | None = 95.0
    extra: dict[str, Any] = field(default_factory=dict)


PEAK_BF16 = {"H100-SXM": 989.4e12, "A100-80GB": 312e12, "L4": 121e12}

# Positional: name, project, GPU, ranks, GPUs per rank, steps per rank, compute / data / comm / host ms
# per step, start-up seconds (idle before the first step), days ago.
RUNS = [
    RunSpec(
        "pretrain-ddp-straggler",
        "llm-pretrain",
        "H100-SXM",
        4,
        2,
        400,
        180,
        4,
        12,
        6,
        240,
        1.2,
        slow_rank=3,
        phases=(("checkpoint", 200, 45.0),),
        tags=("ddp", "baseline"),
    ),
    RunSpec("pretrain-ddp-tuned", "llm-pretrain", "H100-SXM", 4, 2, 400, 170, 3, 8, 5, 60, 2.0, mfu=0.45, tags=("ddp",)),
    RunSpec("finetune-healthy", "llm-finetune", "H100-SXM", 1, 8, 500, 150, 2, 0, 4, 30, 0.8, mfu=0.48),
    RunSpec("finetune-sweep-3", "llm-finetune", "A100-80GB", 1, 4, 300, 220, 20, 0, 15, 600, 3.5, mfu=0.3, tags=("sweep",)),
    RunSpec("detector-starved", "detector", "A100-80GB", 2, 4, 500, 160, 140, 10, 8, 120, 1.5, mfu=0.35, tags=("baseline",)),
    RunSpec("detector-failed", "detector", "A100-80GB", 1, 8, 120, 160, 90, 0, 10, 300, 0.5, status="failed"),
    RunSpec("asr-idle-start", "asr", "L4", 1, 4, 300, 90, 10, 0, 20, 1800, 2.5, mfu=0.25, gpu_util_pct=88.0),
    RunSpec("asr-eval-heavy", "asr", "L4", 1, 4, 300, 95, 8, 0, 12, 90, 4.0, mfu=0.3, phases=(("eval", 150, 300.0),)),
    RunSpec("ranker-small", "ranker", "L4", 1, 1, 300, 40, 25, 0, 30, 60, 1.0, mfu=0.15, gpu_util_pct=70.0),
    # Costly but efficient (at target MFU, no stalls): ranks high by spend, low by recoverable spend.
    RunSpec("ranker-large-efficient", "ranker", "H100-SXM", 1, 8, 1500, 200, 1, 0, 2, 20, 1.8, mfu=0.5),
    # Previous period (30-60 days ago): the leaderboards' change column compares against these.
    RunSpec("pretrain-ddp-old", "llm-pretrain", "H100-SXM", 4, 2, 300, 190, 6, 20, 8, 300, 40.0, slow_rank=1),
    RunSpec("detector-old", "detector", "A100-80GB", 1, 8, 300, 160, 60, 0, 8, 200, 38.0, mfu=0.35),
]


def run_id(spec: RunSpec) -> str:
    return str(uuid.uuid5(SEED_NAMESPACE, spec.name))


class Client:
    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return dict(json.loads(response.read() or b"{}"))


def _ns(dt: datetime) -> int:
    return int(dt.timestamp()) * 1_000_000_000


def _rank_steps(spec: RunSpec, rank: int, start_ns: int, rng: random.Random) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {k: [] for k in (
        "step", "t_start_ns", "dur_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns",
        "flops", "tokens", "samples", "mem_allocated", "mem_reserved", "mem_peak", "alloc_retries")}  # fmt: skip
    peak = PEAK_BF16[spec.gpu_model]
    flops_per_step = spec.mfu * peak * spec.gpus_per_rank * spec.compute_ms / 1000
    t = start_ns
    for step in range(spec.steps):
        jitter = 1 + rng.uniform(-0.03, 0.03)
        slow = spec.slow_rank is not None and rank == spec.slow_rank
        compute = spec.compute_ms * jitter * (1.35 if slow else 1.0)
        # In a synchronous step every rank waits for the slowest: the fast ones wait in comm.
        comm = spec.comm_ms + (0 if slow or spec.slow_rank is None else spec.compute_ms * 0.35)
        data = spec.data_ms * (1 + rng.uniform(-0.1, 0.1))
        host = spec.host_ms
        dur = data + compute + comm + host
        phase_gap = sum(s for name, after, s in spec.phases if after == step)
        cols["step"].append(step)
        cols["t_start_ns"].append(t)
        cols["dur_ns"].append(int(dur * MS))
        cols["data_ns"].append(int(data * MS))
        cols["forward_ns"].append(int(compute * 0.33 * MS))
        cols["backward_ns"].append(int(compute * 0.6 * MS))
        cols["optimizer_ns"].append(int(compute * 0.07 * MS))
        cols["comm_ns"].append(int(comm * MS))
        cols["flops"].append(flops_per_step)
        cols["tokens"].append(8192)
        cols["samples"].append(8)
        base_mem = 30 * 2**30 + step % 50 * 2**24
        cols["mem_allocated"].append(base_mem)
        cols["mem_reserved"].append(int(base_mem * 1.25))
        cols["mem_peak"].append(int(base_mem * 1.4))
        cols["alloc_retries"].append(1 if step % 97 == 0 else 0)
        t += int(dur * MS) + int(phase_gap * 1e9)
    return cols


def seed(base_url: str, tokens: dict[str, str], *, now: datetime | None = None) -> list[str]:
    """Posts every run; `tokens` maps project slug → its project token. Returns the run ids."""
    now = now or datetime.now(UTC)
    ids = []
    for index, spec in enumerate(RUNS):
        rng = random.Random(index)
        client = Client(base_url, tokens[spec.project])
        team = next(t for t, p in PROJECTS if p == spec.project)
        allocation = (now - timedelta(days=spec.days_ago)).replace(microsecond=0)
        started = allocation + timedelta(seconds=spec.startup_s)
        rid = run_id(spec)
        ids.append(rid)
        client.post("/api/v1/runs", {
            "id": rid, "name": spec.name, "team": team, "project": spec.project, "tags": list(spec.tags),
            "gpu_model": spec.gpu_model, "gpu_count": spec.ranks * spec.gpus_per_rank, "world_size": spec.ranks,
            "nodes": max(1, spec.ranks // 2), "pricing_tier": "on_demand", "dtype": "bf16",
            "allocation_start": allocation.isoformat(), "started_at": started.isoformat(),
        })  # fmt: skip
        end_ns = 0
        rank0: dict[str, list[Any]] = {}
        for rank in range(spec.ranks):
            host = f"{spec.name}-node-{rank // 2}"
            cols = _rank_steps(spec, rank, _ns(started), rng)
            rank0 = rank0 or cols
            client.post(f"/api/v1/runs/{rid}/steps", {"rank": rank, "host": host, "steps": cols})
            last = cols["t_start_ns"][-1] + cols["dur_ns"][-1]
            end_ns = max(end_ns, last)
            if spec.gpu_util_pct is not None:
                t_ns = list(range(_ns(started), last, 5_000_000_000))
                client.post(f"/api/v1/runs/{rid}/samples", {"rank": rank, "host": host, "samples": {
                    "t_ns": t_ns, "device": [rank] * len(t_ns),
                    "gpu_util_pct": [min(100.0, spec.gpu_util_pct + rng.uniform(-3, 3)) for _ in t_ns],
                    "cpu_process_pct": [120.0] * len(t_ns), "cpu_other_pct": [15.0] * len(t_ns),
                    "cpu_steal_pct": [0.5] * len(t_ns),
                }})  # fmt: skip
        events: list[dict[str, Any]] = []
        for name, after, seconds in spec.phases:
            t_phase = rank0["t_start_ns"][after] + rank0["dur_ns"][after]
            events.append({"id": f"{rid}-{name}", "kind": "phase", "rank": 0, "t_ns": t_phase, "name": name,
                           "t_start_ns": t_phase, "dur_ns": int(seconds * 1e9)})  # fmt: skip
        events.append({"id": f"{rid}-finish", "kind": "finish", "rank": 0, "t_ns": end_ns, "status": spec.status})
        client.post(f"/api/v1/runs/{rid}/events", {"events": events})
    return ids


# One node of four GPUs reporting every 15 s for the last hour, one GPU per class (docs/fleet.md):
# a run of llm-pretrain (instrumented), a pod computing without the agent, a Slurm job holding
# memory without computing (idle-held), and an empty GPU.
FLEET_OWNERS = [
    {"kind": "run", "project": "llm-pretrain", "run_id": "e2e-node-run", "server_run_id": None},
    {"kind": "k8s", "namespace": "vision-batch", "pod": "augment-7", "labels": {"team": "vision"}},
    {"kind": "slurm", "job_id": "4711", "account": "speech", "partition": "gpu", "user": "erin"},
]
FLEET_GPUS = [(90.0, 60 * 2**30, 0), (70.0, 40 * 2**30, 1), (0.0, 20 * 2**30, 2), (0.0, 0, None)]


def seed_fleet(base_url: str, node_token: str, *, now: datetime | None = None) -> None:
    """Posts the node's last hour through POST /api/v1/nodes/samples with a node token."""
    now = now or datetime.now(UTC)
    end = _ns(now) - _ns(now) % (15 * 10**9)
    times = [end - i * 15 * 10**9 for i in range(240)][::-1]
    node = {"hostname": "e2e-gpu-node", "provider": "aws", "region": "us-east-1", "resource_id": "i-0e2e",
            "gpu_model": "H100-SXM", "gpu_count": 4, "source": "nvml"}  # fmt: skip
    client = Client(base_url, node_token)
    for start in range(0, len(times), 60):
        chunk = times[start : start + 60]
        gpus: dict[str, list[Any]] = {"t_ns": [], "gpu_index": [], "util_pct": [], "mem_used_bytes": []}
        procs: dict[str, list[Any]] = {"t_ns": [], "gpu_index": [], "pid": [], "mem_used_bytes": [], "owner": []}
        for t in chunk:
            for index, (util, mem, owner) in enumerate(FLEET_GPUS):
                for key, value in zip(gpus, (t, index, util, mem), strict=True):
                    gpus[key].append(value)
                if owner is not None:
                    for key, value in zip(procs, (t, index, 1000 + index, mem, owner), strict=True):
                        procs[key].append(value)
        body = {"node": node, "interval_s": 15, "gpus": gpus, "processes": procs, "owners": FLEET_OWNERS}
        client.post("/api/v1/nodes/samples", body)

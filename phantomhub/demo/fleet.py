"""A generated fleet for the demo organization: a few hundred runs over 90 days across teams,
projects, GPU models, providers and waste patterns.

Pure generation (numpy, no Django): `fleet_runs()` yields run bodies and their columnar step,
sample and event batches exactly as the agent would post them; the seeding command posts them
through the real ingest API over HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

NS = 10**9
DENSE_BF16 = {"H100-SXM": 989.4e12, "H200": 989.4e12, "A100-80GB": 312e12, "L40S": 362.05e12, "A10G": 70e12,
              "L4": 121e12, "MI300X": 1307.4e12, "B200": 2250e12}  # fmt: skip
# (team, [(project, pattern, gpu, provider, region, tier)])
ORG: list[tuple[str, list[tuple[str, str, str, str, str, str]]]] = [
    ("nlp", [("llm-pretrain", "comm", "H100-SXM", "aws", "us-east-1", "on_demand"),
             ("llm-finetune", "data", "A100-80GB", "gcp", "us-central1", "on_demand"),
             ("tokenizer-lab", "healthy", "L4", "gcp", "us-central1", "on_demand")]),
    ("vision", [("detector", "data", "A100-80GB", "aws", "us-east-1", "on_demand"),
                ("segmentation", "memory", "L40S", "coreweave", "us-east", "on_demand"),
                ("video-gen", "low_mfu", "H200", "coreweave", "us-east", "on_demand")]),
    ("speech", [("asr", "host", "A10G", "aws", "us-east-1", "spot"),
                ("tts", "idle", "L40S", "aws", "us-east-1", "on_demand"),
                ("diarization", "healthy", "A10G", "aws", "us-east-1", "on_demand")]),
    ("recsys", [("ranking", "data", "A100-80GB", "lambda", "us", "on_demand"),
                ("retrieval", "low_mfu", "H100-SXM", "gcp", "us-central1", "spot"),
                ("ads-ctr", "host", "L4", "aws", "us-east-1", "on_demand")]),
    ("research", [("moe-scaling", "comm", "H100-SXM", "azure", "eastus", "on_demand"),
                  ("rl-agents", "idle", "MI300X", "azure", "eastus", "on_demand"),
                  ("diffusion", "memory", "B200", "lambda", "us", "on_demand")]),
    ("platform", [("eval-harness", "idle", "A10G", "aws", "us-east-1", "on_demand"),
                  ("distill", "healthy", "H200", "aws", "us-east-1", "on_demand"),
                  ("benchmarks", "comm", "H100-SXM", "coreweave", "us-east", "on_demand")]),
]  # fmt: skip


@dataclass
class DemoRun:
    team: str
    project: str
    body: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)  # {"rank", "host", "steps": {...}}
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(b["steps"]["step"]) for b in self.steps)


@dataclass
class Attempt:
    """What makes a run an attempt of a job (docs/api.md, "Jobs and attempts")."""

    job: dict[str, Any]  # the registration's "job"
    first_step: int  # the step after the one it restored
    steps: int  # steps it does before it ends
    save_every: int  # steps between checkpoints
    save_s: float  # how long a save blocks
    restore_s: float  # how long its restore took (0: the first attempt, nothing to restore)
    status: str | None  # how it ends: "finished", "failed" or "crashed" (None: silent, a SIGKILL)
    cause: str | None


def _run(rng: np.random.Generator, team: str, project: str, pattern: str, gpu: str, provider: str, region: str,
         tier: str, index: int, start: datetime, now: datetime, attempt: Attempt | None = None) -> DemoRun:  # fmt: skip
    # A project trains one recipe (its world size, step, batch: runs of it are peers of each
    # other); each run does it more or less well, so the project's better runs are evidence.
    recipe = np.random.default_rng(hash_text(f"{team}/{project}"))
    world = int(recipe.choice([1, 2, 4, 8], p=[0.2, 0.2, 0.25, 0.35]))
    step_s = float(recipe.uniform(4, 40))  # coarse steps keep the demo quick to post
    batch_size = int(recipe.choice([8, 16, 32, 64]))
    n = int(rng.integers(150, 400)) if attempt is None else attempt.steps
    base_mfu = {"low_mfu": 0.12, "healthy": 0.42}.get(pattern, 0.33)
    peak = DENSE_BF16[gpu]
    flops_per_step = base_mfu * peak * step_s * 0.7
    mfu_target = min(base_mfu * float(rng.uniform(0.75, 1.3)), 0.5)
    compute_s = flops_per_step / (peak * mfu_target)
    intensity = float(rng.uniform(0.35, 1.3))
    data_share = {"data": 0.35}.get(pattern, 0.03) * intensity
    comm_share = {"comm": 0.22}.get(pattern, 0.04 if world > 1 else 0.0) * intensity
    host_share = {"host": 0.2}.get(pattern, 0.04) * intensity
    alloc = start - timedelta(seconds=float(rng.uniform(60, 900 if pattern == "idle" else 240)))
    t0 = int(start.timestamp()) * NS
    name = f"{project}-{start:%m%d}-{index:02d}"
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"phantomhub-demo-fleet/{team}/{project}/{index}"))
    if attempt is not None:
        name = f"{attempt.job['key'].rsplit('/', 1)[-1]}-attempt-{attempt.job['attempt']}"
        run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"phantomhub-demo-job/{team}/{project}/{name}"))
        alloc = start - timedelta(seconds=float(rng.uniform(60, 150)) + attempt.restore_s)
    body: dict[str, Any] = {"id": run_id, "name": name, "tags": [pattern, "fleet"], "gpu_model": gpu, "gpu_count": world,
            "world_size": world, "nodes": max(1, world // 8), "provider": provider, "region": region,
            "pricing_tier": tier, "dtype": "bf16", "allocation_start": alloc.isoformat(), "started_at": start.isoformat(),
            "config": {"batch_size": batch_size, "lr": float(rng.choice([1e-4, 3e-4]))},
            "environment": {"torch": "2.13.0", "generator": "phantomhub demo fleet"}}  # fmt: skip
    # Who launched it (docs/agent.md, "Who launched it"): a few people per team, picked without
    # drawing from `rng`, so the rest of the demo stays what it was.
    body["launched_by"] = DEMO_LAUNCHERS[(hash_text(team) + index) % len(DEMO_LAUNCHERS)]
    if attempt is not None:
        body["job"] = attempt.job
        body["tags"] = [pattern, "fleet", "job"]
    run = DemoRun(team, project, body)
    slow_rank = int(rng.integers(0, world)) if pattern == "comm" and world > 1 else -1
    eval_every = 100 if pattern == "idle" else 0
    if eval_every:
        n = max(n, eval_every + 1)
    jitter = rng.normal(1.0, 0.04, size=(world, n)).clip(0.8, 1.3)
    compute = compute_s * jitter
    if slow_rank >= 0:
        compute[slow_rank] *= 1.25
    arrive = compute.max(axis=0)  # every rank waits for the slowest before the all-reduce ends
    data = np.abs(rng.normal(step_s * data_share, step_s * data_share * 0.3, size=(world, n)))
    comm = arrive[None, :] - compute + step_s * comm_share
    host = np.full((world, n), step_s * host_share)
    dur = data + compute + comm + host
    dur_common = dur.max(axis=0)
    gaps = np.zeros(n)
    if eval_every:
        gaps[eval_every::eval_every] = step_s * 20
    first = attempt.first_step if attempt is not None else 0
    # Saves after every save_every-th step (counted on the job's step numbers): gaps the saves fill.
    saves = [k for k in range(1, n) if attempt is not None and (first + k) % attempt.save_every == 0]
    for k in saves:
        gaps[k] += attempt.save_s if attempt is not None else 0.0
    starts = (t0 + np.concatenate([[0.0], np.cumsum(dur_common + gaps)[:-1]]) * NS).astype(np.int64)
    # A run still going at `now` has posted only the steps that have ended: it is live.
    done = starts + (dur_common * NS).astype(np.int64) < int(now.timestamp()) * NS
    running = not bool(done.all())
    n = max(int(done.sum()), 1)
    starts, dur_common, dur, data, compute, comm, host = (
        starts[:n],
        dur_common[:n],
        dur[:, :n],
        data[:, :n],
        compute[:, :n],
        comm[:, :n],
        host[:, :n],
    )
    if attempt is not None:
        for k in saves:
            if k >= n:
                continue
            end_prev = int(starts[k - 1] + dur_common[k - 1] * NS)
            save_ns = int(attempt.save_s * NS)
            run.events.append({"id": f"checkpoint-{first + k - 1}", "kind": "phase", "name": "checkpoint",
                               "t_ns": end_prev + save_ns, "t_start_ns": end_prev, "dur_ns": save_ns,
                               "data": {"step": first + k - 1, "bytes": 96 * 2**30, "async": False}})  # fmt: skip
        if attempt.restore_s:
            restore_ns = int(attempt.restore_s * NS)
            run.events.append({"id": f"restore-{first - 1}", "kind": "phase", "name": "restore", "t_ns": t0,
                               "t_start_ns": t0 - restore_ns, "dur_ns": restore_ns,
                               "data": {"step": first - 1, "bytes": 96 * 2**30}})  # fmt: skip
    if eval_every:
        for k in range(eval_every, n, eval_every):
            end_prev = int(starts[k - 1] + dur_common[k - 1] * NS)
            run.events.append({"id": f"eval-{k}", "kind": "phase", "name": "eval", "t_ns": end_prev + int(gaps[k] * NS),
                               "t_start_ns": end_prev, "dur_ns": int(gaps[k] * NS)})  # fmt: skip
    mem_cap = {"L4": 24, "A10G": 24, "L40S": 48, "A100-80GB": 80, "H100-SXM": 80, "H200": 141, "MI300X": 192, "B200": 180}[gpu]
    for rank in range(world):
        d = (dur[rank] * NS).astype(np.int64)
        d = np.maximum(d, (dur_common * NS).astype(np.int64))  # step wall time is shared by all ranks
        stage = compute[rank] * NS
        reserved = mem_cap * 0.85 * 2**30
        allocated = reserved * (0.55 if pattern == "memory" else 0.85)
        steps = {
            "step": list(range(first, first + n)),
            "t_start_ns": starts.tolist(),
            "dur_ns": d.tolist(),
            "data_ns": (data[rank] * NS).astype(np.int64).tolist(),
            "forward_ns": (stage / 3).astype(np.int64).tolist(),
            "backward_ns": (stage * 0.6).astype(np.int64).tolist(),
            "optimizer_ns": (stage * (1 - 1 / 3 - 0.6)).astype(np.int64).tolist(),
            "comm_ns": (comm[rank] * NS).astype(np.int64).tolist() if world > 1 else [0] * n,
            "flops": (flops_per_step * rng.normal(1, 0.02, n)).tolist(),
            "tokens": [4096 * int(body["config"]["batch_size"])] * n,
            "samples": [int(body["config"]["batch_size"])] * n,
            "mem_allocated": (allocated * rng.uniform(0.97, 1.0, n)).astype(np.int64).tolist(),
            "mem_reserved": [int(reserved)] * n,
            "mem_peak": [int(min(reserved * 1.02, mem_cap * 2**30))] * n,
            "alloc_retries": (rng.poisson(0.3, n) if pattern == "memory" else np.zeros(n, dtype=int)).tolist(),
        }
        run.steps.append({"rank": rank, "host": f"{project}-node-{rank // 8}", "steps": steps})
    end_ns = int(starts[-1] + dur_common[-1] * NS)
    sample_t = np.arange(int(starts[0]), end_ns, 60 * NS, dtype=np.int64)  # a sample a minute keeps it small
    busy = 97.0 if pattern != "data" else 70.0
    for rank in range(world):
        run.samples.append({"rank": rank, "host": f"{project}-node-{rank // 8}", "samples": {
            "t_ns": sample_t.tolist(), "device": [rank % 8] * len(sample_t),
            "gpu_util_pct": rng.normal(busy, 2, len(sample_t)).clip(0, 100).round(1).tolist()}})  # fmt: skip
    other = 55.0 if pattern == "host" else 6.0
    run.samples.append({"rank": 0, "host": f"{project}-node-0", "samples": {
        "t_ns": sample_t.tolist(), "cpu_other_pct": rng.normal(other, 3, len(sample_t)).clip(0, 100).round(1).tolist(),
        "cpu_steal_pct": rng.normal(2 if pattern == "host" else 0.2, 0.2, len(sample_t)).clip(0, 100).round(2).tolist(),
    }})  # fmt: skip
    if attempt is not None:
        if attempt.status is not None:  # a silent attempt (SIGKILL) sends no finish: the next one's start ends it
            finish: dict[str, Any] = {"id": "finish", "kind": "finish", "t_ns": end_ns + int(rng.uniform(20, 90) * NS),
                                      "status": attempt.status}  # fmt: skip
            if attempt.cause:
                finish["data"] = {"cause": attempt.cause, "exception": _EXCEPTIONS.get(attempt.cause, "")}
            run.events.append(finish)
    elif not running:
        status = "crashed" if rng.random() < 0.04 else "finished"
        run.events.append({"id": "finish", "kind": "finish", "t_ns": end_ns + int(rng.uniform(20, 120) * NS), "status": status})
    return run


_EXCEPTIONS = {"oom": "torch.OutOfMemoryError", "collective_timeout": "torch.distributed.DistBackendError"}
# (team, project, job name, [(steps, how it ended, its cause)]): each attempt resumes from the
# last checkpoint the one before it saved.
JOBS: list[tuple[str, str, str, int, float, list[tuple[int, str | None, str | None]]]] = [
    ("nlp", "llm-pretrain", "pretrain-7b", 50, 90.0,
     [(180, "failed", "collective_timeout"), (140, None, None), (210, "failed", "oom"), (160, "finished", "finished")]),
    ("research", "moe-scaling", "moe-64e", 25, 240.0,
     [(90, "failed", "collective_timeout"), (120, "failed", "sigterm"), (150, "finished", "finished")]),
]  # fmt: skip


def job_runs(*, seed: int = 7, now: datetime | None = None, days_ago: float = 6.0) -> Iterator[DemoRun]:
    """The demo's jobs: attempts of a few long trainings that failed (a collective timeout, a
    silent SIGKILL, an OOM, a preemption) and resumed from their last checkpoint."""
    rng = np.random.default_rng(seed)
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    patterns = {p[0]: p for _, ps in ORG for p in ps}
    for i, (team, project, key, save_every, save_s, attempts) in enumerate(JOBS):
        _, pattern, gpu, provider, region, tier = patterns[project]
        start = now - timedelta(days=days_ago + 2 * i)
        first = 0
        for number, (steps, status, cause) in enumerate(attempts):
            spec = Attempt(job={"key": f"slurm/{key}", "attempt": number, "source": "slurm"}, first_step=first, steps=steps,
                           save_every=save_every, save_s=save_s, restore_s=0.0 if number == 0 else float(rng.uniform(40, 120)),
                           status=status, cause=cause)  # fmt: skip
            run = _run(rng, team, project, pattern, gpu, provider, region, tier, 0, start, now, attempt=spec)
            yield run
            last_step = run.steps[0]["steps"]["step"][-1]
            ends = [e["t_ns"] for e in run.events if e["kind"] == "finish"]
            end_ns = ends[0] if ends else max(b["steps"]["t_start_ns"][-1] + b["steps"]["dur_ns"][-1] for b in run.steps)
            first = (last_step // save_every) * save_every  # resumes after the last save before the failure
            start = datetime.fromtimestamp(end_ns / NS, tz=UTC) + timedelta(minutes=float(rng.uniform(4, 12)))


DEMO_LAUNCHERS = ("amara", "bo", "chen", "dana", "eli", "farah", "goran", "hiro")


def hash_text(text: str) -> int:
    """A stable integer from text (Python's hash() is salted per process)."""
    return int.from_bytes(uuid.uuid5(uuid.NAMESPACE_URL, text).bytes[:8], "big")


def fleet_runs(*, runs: int = 300, days: int = 90, seed: int = 42, now: datetime | None = None) -> Iterator[DemoRun]:
    """`runs` runs spread over the last `days` days, round-robin over the projects of ORG."""
    rng = np.random.default_rng(seed)
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    projects = [(team, *p) for team, ps in ORG for p in ps]
    for index in range(runs):
        team, project, pattern, gpu, provider, region, tier = projects[index % len(projects)]
        start = now - timedelta(hours=float(rng.uniform(1, days * 24)))
        if index >= runs - 3:  # a few runs are live right now
            start = now - timedelta(hours=float(rng.uniform(0.3, 1.5)))
        yield _run(rng, team, project, pattern, gpu, provider, region, tier, index // len(projects), start, now)

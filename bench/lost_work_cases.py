"""A job that fails, restarts from its last checkpoint and redoes work (issue 31): ground truth for
PhantomHub's lost-work dollars and for its checkpoint-interval advice.

Shared by bench/lost_work.py and tests/waste/test_lost_work_ground_truth.py. One *job* is real CPU
PyTorch training through the agent, STEPS steps of a small model, each attempt a process of its own
launched by this module as a launcher would:

- Every INTERVAL steps the attempt checkpoints asynchronously (``run.checkpoint(step,
  async_=True)``): the blocking part copies the model and optimizer state (and waits STAGE_S,
  standing for the device-to-host copy of a large model); a background thread writes the file and
  renames it into place, so a kill loses at most the save in flight.
- Failures come at fixed moments of the job's wall clock (``failure_times``: exponential gaps of
  mean MTBF_S, as the advice's model assumes, their quantiles taken from the golden-ratio sequence
  so that a run of them covers the distribution evenly: the expectation of random failures
  without the variance of a handful of draws). The same moments for every job. The attempt
  running at a failure dies of SIGKILL (after a flush: the test is of the accounting, not of
  delivery under SIGKILL, which tests/agent covers), except the failures numbered in SIGTERM_AT,
  which send SIGTERM (the agent finishes the run as failed, cause sigterm, and dies of the
  signal).
- The launcher holds the allocation between attempts: it waits RESTART_WAIT_S (a node replaced, a
  rescheduling) and starts the next attempt with the job's allocation start as its
  ``allocation_start`` (as a scheduler's allocation, e.g. Slurm's job start, would be): PhantomHub
  bills each attempt from the end of the one before (docs/waste-model.md, "Jobs"), so the restart
  is billed, as on a cluster that keeps the job's nodes. The next attempt restores the last
  checkpoint (``run.restored``) and goes on from the step after it.

Each attempt writes its own timestamps (wall clock, ns) to a log: every step's start and end, every
save's blocking span, the restore's span and step, the kill. ``truth`` computes from that log alone
what the job lost: rework (steps numbered at or below the furthest step an earlier attempt reached,
redone), restart (billed time before an attempt's first step but its restore, and after a failed
attempt's last step), checkpoint (saves' and restores' blocking time), in seconds; at PRICE a GPU
second is the same in dollars for both sides.

The module imports only the standard library at the top (a forked attempt imports torch and the
agent; the drivers import Django inside the functions that need it).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STEPS = 500
INTERVAL = 10  # steps between saves, the job's own setting (too often: the advice's case)
STEP_S = 0.020  # each step's "kernel time" (a wait in forward, as bench/savings_cases.py does)
STAGE_S = 0.25  # the blocking part of an asynchronous save
RESTART_WAIT_S = 0.5  # the launcher's wait before the next attempt
MTBF_S = 4.0
FAILURES = 24  # at most this many failures (the job may finish before the last ones)
SIGTERM_AT = (2,)  # which failures (0-based) are a SIGTERM instead of a SIGKILL
GPU_MODEL = "L4"  # as bench/savings_cases.py: the tests share its $10-a-second L4 price
ATTEMPT_TIMEOUT_S = 120
GOLDEN = (math.sqrt(5) - 1) / 2


def failure_times(n: int = FAILURES, mtbf_s: float = MTBF_S) -> list[float]:
    """Seconds of the job's wall clock (from its first allocation) at which something fails: the
    gaps are exponential with mean ``mtbf_s`` (failures as the advice's model assumes them, a
    Poisson process), each gap the quantile of the next point of the golden-ratio sequence, so any
    run of them covers the distribution evenly instead of by a handful of random draws."""
    out, t = [], 0.0
    for i in range(1, n + 1):
        t += -mtbf_s * math.log(1.0 - ((i * GOLDEN) % 1.0))
        out.append(round(t, 3))
    return out


def _log(path: str, **record: Any) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def attempt_main(spec: dict[str, Any]) -> None:
    """One attempt (a process of its own): restore, train, save every ``interval`` steps, die at
    ``die_at_ns`` (wall clock) if it has not finished by then."""
    import torch

    import phantomhub_agent as pa

    for var in ("PHANTOMHUB_SERVER", "PHANTOMHUB_TOKEN", "PHANTOMHUB_RUN_ID", "PHANTOMHUB_JOB", "PHANTOMHUB_ATTEMPT"):
        os.environ.pop(var, None)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    log = spec["log"]
    run = pa.init(project=spec["project"], team=spec["team"], name=spec["name"], gpu_model=GPU_MODEL, gpu_count=1,
                  dtype="fp32", server=spec["server"], token=spec["token"], debug=True, spool_dir=spec["spool"],
                  allocation_start=datetime.fromtimestamp(spec["allocation_ns"] / 1e9, tz=UTC),
                  job=spec["job"], attempt=spec["attempt"], flush_interval_s=1.0)  # fmt: skip
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = Path(spec["ckpt"])
    start = 0
    if ckpt.exists():
        t0, pc0 = time.time_ns(), time.perf_counter_ns()
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        run.restored(state["step"], bytes=ckpt.stat().st_size, started_pc=pc0)
        _log(log, ev="restore", step=state["step"], t0=t0, t1=time.time_ns())
        start = state["step"] + 1
    writer: threading.Thread | None = None
    x = torch.randn(32, 64)
    die_at, how = spec.get("die_at_ns"), spec.get("die_by", "SIGKILL")
    for step in range(start, spec["steps"]):
        if die_at is not None and how == "SIGTERM" and time.time_ns() >= die_at and step > start:
            _log(log, ev="kill", how=how, t=time.time_ns())
            os.kill(os.getpid(), signal.SIGTERM)  # the agent finishes the run (failed, sigterm), then dies of it
            time.sleep(60)
        with run.step(step=step, samples=32):
            now = time.time_ns()
            if die_at is not None and how == "SIGKILL" and now >= die_at and step > start:
                run.flush(timeout=10)  # what the server has is what it was sent (see the module doc)
                _log(log, ev="kill", how=how, t=time.time_ns())
                os.kill(os.getpid(), signal.SIGKILL)
            _log(log, ev="step", step=step, t0=now)
            with run.stage("forward"):
                loss = model(x).square().mean()
                time.sleep(STEP_S)
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        _log(log, ev="step_end", step=step, t1=time.time_ns())
        if (step + 1) % spec["interval"] == 0 and step + 1 < spec["steps"]:
            if writer is not None:
                writer.join()  # one save in flight at a time
            t0 = time.time_ns()
            with run.checkpoint(step, async_=True):
                state = {"step": step, "model": {k: v.clone() for k, v in model.state_dict().items()},
                         "opt": opt.state_dict()}  # fmt: skip
                time.sleep(STAGE_S)  # the device-to-host copy of a large model
            _log(log, ev="save", step=step, t0=t0, t1=time.time_ns())
            writer = threading.Thread(target=_write, args=(state, ckpt), daemon=True)
            writer.start()
    if writer is not None:
        writer.join()
    run.finish()
    _log(log, ev="finish", t=time.time_ns())


def _write(state: dict[str, Any], path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


@dataclass
class JobRun:
    """A job as the launcher ran it: its attempts' run ids and what each wrote to its log."""

    key: str
    interval: int
    run_ids: list[str]
    logs: list[list[dict[str, Any]]]
    allocations_ns: list[int]
    failures: list[float]
    wall_s: float


def run_job(*, key: str, interval: int, server: str, token: str, team: str, project: str, workdir: Path,
            failures: list[float] | None = None, steps: int = STEPS) -> JobRun:  # fmt: skip
    """Runs the job to its end: attempts one after the other, each killed at the next failure
    time, the launcher waiting RESTART_WAIT_S in between."""
    from bench.savings_cases import _forkserver_context

    workdir.mkdir(parents=True, exist_ok=True)
    failures = failure_times() if failures is None else failures
    ckpt = workdir / f"{key}.pt"
    ckpt.unlink(missing_ok=True)
    job_start = time.time_ns()
    allocation = job_start
    pending = list(failures)
    run_ids, logs, allocations = [], [], []
    for attempt in range(len(failures) + 1):
        log = workdir / f"{key}-{attempt}.log"
        log.unlink(missing_ok=True)
        # The next failure that falls after this attempt starts (one during the launcher's wait
        # hits nothing).
        die_at = None
        launched = time.time_ns()
        while pending and job_start + pending[0] * 1e9 <= launched:
            pending.pop(0)
        how = "SIGKILL"
        if pending:
            die_at = int(job_start + pending[0] * 1e9)
            how = "SIGTERM" if (len(failures) - len(pending)) in SIGTERM_AT else "SIGKILL"
            pending.pop(0)
        spec = {"project": project, "team": team, "name": f"{key}-attempt-{attempt}", "server": server, "token": token,
                "spool": str(workdir / f"spool-{key}-{attempt}"), "allocation_ns": allocation, "job": key,
                "attempt": attempt, "ckpt": str(ckpt), "log": str(log), "interval": interval, "steps": steps,
                "die_at_ns": die_at, "die_by": how}  # fmt: skip
        proc = _forkserver_context().Process(target=attempt_main, args=(spec,), name=spec["name"])
        proc.start()
        proc.join(ATTEMPT_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
            raise RuntimeError(f"{spec['name']} did not end within {ATTEMPT_TIMEOUT_S} s")
        died = time.time_ns()
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        run_ids.append(_run_id_of(spec))
        logs.append(records)
        allocations.append(allocation)
        if any(r["ev"] == "finish" for r in records):
            if proc.exitcode != 0:
                raise RuntimeError(f"{spec['name']} finished but exited with {proc.exitcode}")
            return JobRun(key, interval, run_ids, logs, allocations, failures, (died - job_start) / 1e9)
        expected = -signal.SIGKILL if how == "SIGKILL" else -signal.SIGTERM
        if proc.exitcode != expected or not any(r["ev"] == "kill" for r in records):
            raise RuntimeError(f"{spec['name']} ended with exit code {proc.exitcode} before its failure (log: {records[-3:]})")
        time.sleep(RESTART_WAIT_S)  # the launcher replaces the node; the job's GPUs stay allocated
    raise RuntimeError(f"job {key} did not finish within {len(failures) + 1} attempts")


def _run_id_of(spec: dict[str, Any]) -> str:
    """The run an attempt registered: the project's run with the attempt's name."""
    from phantomhub.telemetry.models import Run

    return str(Run.objects.get(project__slug=spec["project"], name=spec["name"]).pk)


@dataclass
class Truth:
    """What the job lost, in seconds of its one GPU, from the attempts' own timestamps."""

    rework_s: float = 0.0
    restart_s: float = 0.0
    checkpoint_s: float = 0.0
    work_s: float = 0.0  # steps done for the first time
    billed_s: float = 0.0  # the allocation the launcher held, from the job's start to its end
    per_attempt: list[dict[str, float]] = field(default_factory=list)

    @property
    def lost_s(self) -> float:
        return self.rework_s + self.restart_s + self.checkpoint_s


def truth(job: JobRun) -> Truth:
    out = Truth()
    furthest: int | None = None
    previous_end: int | None = None  # when the attempt before died (or finished)
    for i, records in enumerate(job.logs):
        steps = {r["step"]: r["t0"] for r in records if r["ev"] == "step"}
        ends = {r["step"]: r["t1"] for r in records if r["ev"] == "step_end"}
        saves = [(r["t0"], r["t1"]) for r in records if r["ev"] in ("save", "restore")]
        order = sorted(s for s in steps if s in ends)
        kill = next((r["t"] for r in records if r["ev"] == "kill"), None)
        finish = next((r["t"] for r in records if r["ev"] == "finish"), None)
        end = kill if kill is not None else finish
        assert end is not None, f"attempt {i} has neither a kill nor a finish"

        def saved_between(a: int, b: int, saves: list[tuple[int, int]] = saves) -> int:
            return sum(max(0, min(b, t1) - max(a, t0)) for t0, t1 in saves)

        rework = work = 0
        for j, s in enumerate(order):
            stop = steps[order[j + 1]] if j + 1 < len(order) else ends[s]
            span = stop - steps[s] - saved_between(steps[s], stop)
            if furthest is not None and s <= furthest:
                rework += span
            else:
                work += span
        restore = sum(r["t1"] - r["t0"] for r in records if r["ev"] == "restore")
        first = steps[order[0]] if order else end
        # The allocation is held from the previous attempt's death to this one's first step.
        before = first - previous_end - restore if previous_end is not None else 0
        last_end = ends[order[-1]] if order else first
        after = end - last_end - saved_between(last_end, end) if kill is not None else 0
        checkpoint = sum(t1 - t0 for t0, t1 in saves)
        out.rework_s += rework / 1e9
        out.restart_s += (before + after) / 1e9
        out.checkpoint_s += checkpoint / 1e9
        out.work_s += work / 1e9
        out.billed_s += (end - (job.allocations_ns[i] if previous_end is None else previous_end)) / 1e9
        previous_end = end
        out.per_attempt.append({"rework_s": rework / 1e9, "restart_s": (before + after) / 1e9, "checkpoint_s": checkpoint / 1e9,
                                "work_s": work / 1e9})  # fmt: skip
        if order:
            furthest = max(order) if furthest is None else max(furthest, max(order))
    return out


@dataclass
class Measured:
    """What PhantomHub says about the job (waste/jobs.py job_figures), in dollars."""

    job_id: str
    cost_usd: float
    lost_usd: dict[str, float]
    billed_s: float
    attempts: int
    failures: int
    advice: dict[str, Any]
    inputs: dict[str, Any]
    failure_rate: dict[str, Any]
    spans: list[tuple[str | None, str | None]]


def measured(job: JobRun) -> Measured:
    """Analyse every attempt (the last pass of each, as the service would after the job ended) and
    read the job's figures."""
    from phantomhub.telemetry.models import Job
    from phantomhub.waste.jobs import job_figures
    from phantomhub.waste.services import run_analyze

    for _ in range(2):  # an attempt's analysis depends on its neighbours': twice settles it
        for run_id in job.run_ids:
            run_analyze(run_id=uuid.UUID(run_id))
    record = Job.objects.get(key=job.key)
    figures = job_figures(record)
    totals = figures["totals"]
    return Measured(
        job_id=str(record.pk),
        cost_usd=totals["cost_usd"],
        lost_usd={c: totals["lost"][c]["usd"] for c in ("rework", "restart", "checkpoint")},
        billed_s=totals["gpu_hours"] * 3600,
        attempts=totals["attempts"],
        failures=totals["failures"],
        advice=figures["advice"],
        inputs=figures["inputs"],
        failure_rate=figures["failure_rate"],
        spans=[(a["billed_start"], a["billed_end"]) for a in figures["attempts"]],
    )


def usd_per_s() -> float:
    """The price in force for GPU_MODEL, per GPU-second."""
    from phantomhub.pricing.models import PriceEntry

    entry = PriceEntry.objects.filter(gpu=GPU_MODEL).order_by("-effective_from").first()
    assert entry is not None, f"no price for {GPU_MODEL}"
    return float(entry.usd_per_gpu_hour) / 3600


def steps_for(interval_s: float, job: JobRun) -> int:
    """The advice's interval (seconds of work) in steps of this job (its mean step time)."""
    t = truth(job)
    steps = sum(1 for records in job.logs for r in records if r["ev"] == "step_end")
    return max(1, round(interval_s / (t.work_s + t.rework_s) * steps))


def compare_table(rows: list[tuple[str, float, float]]) -> str:
    lines = [f"{'':<12}{'PhantomHub':>12}{'truth':>12}{'ratio':>8}"]
    for name, ours, theirs in rows:
        ratio = ours / theirs if theirs else float("nan")
        lines.append(f"{name:<12}{ours:>12.2f}{theirs:>12.2f}{ratio:>8.3f}")
    return "\n".join(lines)

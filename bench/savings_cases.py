"""Training cases for the savings proof (issue 8): predicted saving vs the saving a fix realizes.

Shared by bench/savings.py and tests/waste/test_savings_ground_truth.py. Each case is one fixable
waste of a known size in real CPU PyTorch training through the agent:

- ``data``: a starved input pipeline. Every sample goes through a slow transform (a sleep of
  LOAD_S_PER_SAMPLE standing for decode / storage latency) in the training process itself
  (DataLoader num_workers=0). The fix: DataLoader(num_workers=2, prefetch_factor=4,
  persistent_workers=True); the same slow transform then runs in two workers, ahead of compute,
  and two workers make a batch faster than a step computes one, so loading hides behind compute.
- ``sync``: a ``.item()``-style host sync every step, after the optimizer and outside every
  measured stage (loss logging). On a GPU, ``.item()`` blocks the host until every queued kernel
  has finished, so the next step's launches cannot run ahead. On the CPU eager kernels have
  already run when ``.item()`` returns and it costs nothing, so the device wait it would force is
  modelled as a blocking wait of SYNC_S after each ``.item()``. The fix: log every LOG_EVERY steps
  (the same wait, LOG_EVERY times less often).
- ``startup``: a slow start-up before the first step (a sleep of STAGE_S standing for staging the
  dataset and checkpoint from remote storage; both variants then really save and load a
  checkpoint). The fix: inputs already staged on local disk, no wait.
- ``straggler-2`` and ``straggler-4``: DistributedDataParallel over gloo with 2 and 4 ranks (one
  process each, one L4 each), rank SLOW_RANK spending SLOW_S more per step than the others outside
  every stage (per-rank logging or evaluation, a throttled GPU's host wait); every other rank waits
  for it in the gradient all-reduce. The fix: that rank does what the others do. The whole job's
  cost is compared, all ranks: the saving is the others' wait and the slow rank's own excess
  (docs/waste-model.md, section 5), within ±15%. The job is billed from when every rank is up (a
  barrier after the rendezvous), as the forkserver keeps torch's import out of the other cases.

Per case: ``Case.peers`` healthy runs (the fixed variant; PEERS, none for a straggler, whose
evidence is the other ranks), each analysed as it finishes; then run A (the waste), analysed
before run B exists; then run B (the fix). predicted = the matching
recommendation's ``saving_usd`` in A's analysis; realized = cost(A) - cost(B). Every run has
STEPS steps, the same model, FLOPs (the agent's FLOP counter), tokens and samples per step, and
reports one L4 per rank in fp32; the price is the one in force on the server.

Compute: each step really runs forward, backward and AdamW on a small token model (about 2 ms on
one CPU thread), then waits DEVICE_S inside the forward stage, standing for the GPU kernel time
the host would wait for. The wait keeps a step's compute steady on a shared CI runner (2 cores,
other processes): a realized saving is the difference of two runs' costs, and CPU-bound compute
that swings by half under contention would blur it. It also leaves the CPU free while a step
computes, as a GPU does, so DataLoader workers can run ahead.

Launch: every run is a job in a process of its own, and the agent bills it from that process's
start, as for a real job. By default the process is forked from a forkserver that has imported
torch and the agent once (PRELOAD): importing torch takes about 1.5 s of CPU, which other
processes on a 2-core runner stretch by up to a second, and that noise, equal in expectation for A
and B but not in any one pair, would land in cost(A) - cost(B) beside a waste of a few seconds.
``launch="exec"`` starts a fresh interpreter per job instead (``python -m bench.savings_cases
SPEC``), import time included; bench/savings.py --launch exec measures that way.

The module imports only the standard library at the top: a job imports torch and the agent, the
drivers (``job``, ``case_prove``) Django, each inside the functions that need them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

STEPS = 60
BATCH = 16
SEQ = 16
VOCAB = 512
WIDTH = 64
# The GPU's kernel time of a step, which the host waits for (see "Compute" in the module doc).
DEVICE_S = 0.040
# 64 ms a batch of 16: longer than a step (about 42 ms); half of it (two workers at once) is shorter.
LOAD_S_PER_SAMPLE = 0.004
SYNC_S = 0.060
LOG_EVERY = 30
STAGE_S = 8.0  # against a second of start-up noise on a busy machine: ~12% of it, inside the ±20% band
SLOW_S = 0.050  # the straggler's extra time per step
SLOW_RANK = 1
PEERS = 2
GPU_MODEL = "L4"
DTYPE = "fp32"
JOB_TIMEOUT_S = 120


@dataclass(frozen=True)
class Case:
    name: str
    code: str  # the recommendation that prices the waste
    category: str  # the waste category it falls in
    waste: str
    fix: str
    world: int = 1  # ranks (processes), one GPU each
    peers: int = PEERS
    band: float = 0.20  # predicted within this share of realized


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case(
            "data",
            "DATA_STALL",
            "data_stall",
            f"DataLoader(num_workers=0), a {LOAD_S_PER_SAMPLE * 1e3:g} ms transform per sample ({BATCH} a batch)",
            "DataLoader(num_workers=2, prefetch_factor=4, persistent_workers=True)",
        ),
        Case(
            "sync",
            "HOST_OVERHEAD",
            "host_overhead",
            f"loss.item() every step, each forcing a {SYNC_S * 1e3:g} ms device sync",
            f"loss.item() every {LOG_EVERY} steps",
        ),
        Case(
            "startup",
            "IDLE",
            "idle",
            f"{STAGE_S:g} s staging inputs from remote storage before the first step",
            "inputs staged on local disk",
        ),
        *(
            Case(
                f"straggler-{world}",
                "STRAGGLER",
                "comm_exposed",
                f"DDP (gloo) over {world} ranks, rank {SLOW_RANK} {SLOW_S * 1e3:g} ms slower per step outside every stage",
                f"rank {SLOW_RANK} as fast as the others",
                world=world,
                peers=0,
                band=0.15,
            )
            for world in (2, 4)
        ),
    )
}


# -- the job (runs in its own process) ---------------------------------------------------------------


def train(case: str, variant: str, *, project: str, team: str, name: str, server: str, token: str, run_id: str,
          spool_dir: str, scratch_dir: str, rank: int = 0, world: int = 1, port: int = 0) -> dict[str, Any]:  # fmt: skip
    """One training process (rank ``rank`` of ``world``); returns what it injected (GPU-seconds of
    the case's waste, over the whole job), for the record."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    import phantomhub_agent as pa

    waste = variant == "waste"
    torch.manual_seed(0)
    torch.set_num_threads(1)
    allocation_start = None
    if world > 1:
        import datetime as dt

        import torch.distributed as dist

        # Before the agent starts: it reads the rank and world size from the process group. The
        # job's GPUs are billed from when every rank is up (the barrier), not from each process's
        # start: on a busy 2-core machine the ranks' fork and rendezvous wait differs by seconds
        # between two runs, noise equal in expectation for A and B but not in any one pair.
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        dist.barrier()
        allocation_start = dt.datetime.now(dt.UTC)
    run = pa.init(project=project, team=team, name=name, gpu_model=GPU_MODEL, gpu_count=world, dtype=DTYPE, run_id=run_id,
                  server=server, token=token, debug=True, spool_dir=spool_dir, allocation_start=allocation_start,
                  tags=[f"case:{case}", f"variant:{variant}"])  # fmt: skip

    class Tokens(Dataset):  # type: ignore[type-arg]
        """Token sequences, each made by a transform that takes ``load_s`` (decode, I/O)."""

        def __init__(self, n: int, load_s: float) -> None:
            self.n, self.load_s = n, load_s

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            if self.load_s:
                time.sleep(self.load_s)
            seq = torch.randint(0, VOCAB, (SEQ + 1,), generator=torch.Generator().manual_seed(i))
            return seq[:-1], seq[1:]

    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, WIDTH),
        torch.nn.Linear(WIDTH, 4 * WIDTH),
        torch.nn.GELU(),
        torch.nn.Linear(4 * WIDTH, WIDTH),
        torch.nn.Linear(WIDTH, VOCAB),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_of(out: Any, y: Any) -> Any:
        return torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))

    injected_s = 0.0
    if case == "startup":
        t0 = time.perf_counter()
        if waste:
            time.sleep(STAGE_S)  # stands for staging the dataset and checkpoint from remote storage
        ckpt = Path(scratch_dir) / "init.pt"
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), ckpt)
        model.load_state_dict(torch.load(ckpt))
        injected_s = time.perf_counter() - t0 if waste else 0.0

    slow = case == "data"
    dataset = Tokens(STEPS * BATCH, LOAD_S_PER_SAMPLE if slow else 0.0)
    if slow and not waste:
        # fork explicitly: a spawned or forkserver worker would import torch again before its first batch.
        loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, prefetch_factor=4, persistent_workers=True,
                            multiprocessing_context="fork")  # fmt: skip
    else:
        loader = DataLoader(dataset, batch_size=BATCH, num_workers=0)
    if slow and waste:
        injected_s = STEPS * BATCH * LOAD_S_PER_SAMPLE
    x0, y0 = dataset[0]
    run.count_flops(model, x0.unsqueeze(0).repeat(BATCH, 1), loss_fn=lambda out: loss_of(out, y0.repeat(BATCH, 1)))
    if world > 1:
        model = run.watch(torch.nn.parallel.DistributedDataParallel(model))  # the exposed all-reduce wait
    slow_rank = case.startswith("straggler") and waste and rank == SLOW_RANK

    sync_every = 1 if (case == "sync" and waste) else LOG_EVERY
    losses, steps = [], 0
    for step, (x, y) in enumerate(run.data(loader)):
        with run.step(tokens=BATCH * SEQ, samples=BATCH):
            with run.stage("forward"):
                loss = loss_of(model(x), y)
                time.sleep(DEVICE_S)  # the GPU's kernel time (see "Compute" in the module doc)
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            if case == "sync" and step % sync_every == 0:
                losses.append(loss.item())
                time.sleep(SYNC_S)  # the device sync .item() forces on a GPU (see the module doc)
                injected_s += SYNC_S if waste else 0.0
            if slow_rank:
                time.sleep(SLOW_S)  # outside every stage; the others wait for it at the next all-reduce
                injected_s += SLOW_S * world  # every rank's GPU loses it
        steps += 1
    run.finish()
    if world > 1:
        torch.distributed.destroy_process_group()
    return {"steps": steps, "injected_s": injected_s}


# Variables of the driver's environment a job must not take its settings from.
_JOB_ENV_DROP = ("PHANTOMHUB_SERVER", "PHANTOMHUB_TOKEN", "PHANTOMHUB_RUN_ID", "PHANTOMHUB_MODE",
                 "PHANTOMHUB_ALLOCATION_START", "PHANTOMHUB_PROJECT", "PHANTOMHUB_TEAM", "PHANTOMHUB_RUN_NAME")  # fmt: skip


def _job_main(spec: dict[str, Any]) -> None:
    """A job's entry point: trains, then writes what it reported to ``spec["out"]``."""
    for var in _JOB_ENV_DROP:
        os.environ.pop(var, None)
    out = train(spec["case"], spec["variant"], project=spec["project"], team=spec["team"], name=spec["name"],
                server=spec["server"], token=spec["token"], run_id=spec["run_id"], spool_dir=spec["spool"],
                scratch_dir=spec["scratch"], rank=spec.get("rank", 0), world=spec.get("world", 1),
                port=spec.get("port", 0))  # fmt: skip
    Path(spec["out"]).write_text(json.dumps(out))


# Modules a forkserver imports once, so that a job's process starts with them loaded.
# torch._dynamo: the first optimizer a process builds imports it (0.8 s).
PRELOAD = ["torch", "torch._dynamo", "torch.optim", "torch.utils.data", "torch.utils.flop_counter", "phantomhub_agent",
           "phantomhub_agent._torch", "bench.savings_cases"]  # fmt: skip
_forkserver: Any = None


def _forkserver_context() -> Any:
    global _forkserver
    if _forkserver is None:
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _forkserver = ctx
    return _forkserver


# -- the drivers (run in a process with Django set up) ------------------------------------------------

LAUNCHES = ("forkserver", "exec")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def job(case: str, variant: str, *, server: str, token: str, team: str, project: str, name: str, workdir: Path,
        launch: str = "forkserver") -> tuple[uuid.UUID, dict[str, Any]]:  # fmt: skip
    """Runs one training job, a process of its own per rank; its run id and what the job reported
    (the ranks' injected waste added up).

    ``forkserver`` (the default): each process is forked from a server that has imported torch
    and the agent once (see "Launch" in the module doc). ``exec``: a fresh interpreter per rank,
    which imports torch itself (``python -m bench.savings_cases SPEC``).
    """
    run_id = uuid.uuid4()
    workdir.mkdir(parents=True, exist_ok=True)
    world = CASES[case].world
    port = _free_port() if world > 1 else 0
    specs = [
        {"case": case, "variant": variant, "project": project, "team": team, "name": name, "server": server,
         "token": token, "run_id": str(run_id), "spool": str(workdir / f"spool-{run_id}-{rank}"),
         "scratch": str(workdir / f"scratch-{run_id}-{rank}"), "out": str(workdir / f"job-{run_id}-{rank}.json"),
         "rank": rank, "world": world, "port": port}
        for rank in range(world)
    ]  # fmt: skip
    failures = []
    if launch == "forkserver":
        procs = [_forkserver_context().Process(target=_job_main, args=(spec,), name=f"{name}-{spec['rank']}") for spec in specs]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + JOB_TIMEOUT_S
        for proc in procs:
            proc.join(max(deadline - time.monotonic(), 0))
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
            if proc.exitcode != 0:
                failures.append(f"{proc.name}: exit code {proc.exitcode} (its traceback is on stderr)")
    elif launch == "exec":
        env = {k: v for k, v in os.environ.items() if k not in _JOB_ENV_DROP and k != "DJANGO_SETTINGS_MODULE"}
        env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        running = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.savings_cases", json.dumps(spec)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for spec in specs
        ]
        for rank, proc in enumerate(running):
            try:
                _, stderr = proc.communicate(timeout=JOB_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, stderr = proc.communicate()
            if proc.returncode != 0:
                failures.append(f"rank {rank}: exit code {proc.returncode}:\n{stderr[-4000:]}")
    else:
        raise ValueError(f"launch must be one of {LAUNCHES}, not {launch!r}")
    if failures:
        raise RuntimeError(f"job {name} ({case}/{variant}) failed: " + "; ".join(failures))
    reported: dict[str, Any] = {"steps": 0, "injected_s": 0.0}
    for spec in specs:
        spool = Path(spec["spool"])
        if spool.exists() and any(p.is_file() for p in spool.rglob("*")):
            raise RuntimeError(f"job {name} left telemetry in its spool {spool}: the server did not get all of it")
        out = json.loads(Path(spec["out"]).read_text())
        reported = {"steps": max(reported["steps"], out["steps"]), "injected_s": reported["injected_s"] + out["injected_s"]}
    return run_id, reported


@dataclass
class RunFigures:
    run_id: str
    name: str
    cost_usd: float
    billed_s: float
    steps: int
    injected_s: float
    categories: dict[str, dict[str, Any]]
    recommendation: dict[str, Any] | None  # the case's recommendation, if it fired
    recoverable_usd: float | None
    # Every recommendation's code, saving and claims, and the host's CPU figures: who took what.
    recommendations: list[dict[str, Any]] = field(default_factory=list)
    hosts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CaseResult:
    case: str
    code: str
    waste: str
    fix: str
    predicted_usd: float | None
    realized_usd: float
    a: RunFigures
    b: RunFigures
    peers: list[RunFigures] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        """predicted / realized."""
        if self.predicted_usd is None or not self.realized_usd:
            return None
        return self.predicted_usd / self.realized_usd

    def to_json(self) -> dict[str, Any]:
        out = {**asdict(self), "ratio": self.ratio}
        out["peers"] = [{k: p[k] for k in ("run_id", "name", "cost_usd", "billed_s", "steps")} for p in out["peers"]]
        return out


def _figures(run_id: uuid.UUID, reported: dict[str, Any], code: str) -> RunFigures:
    from phantomhub.telemetry.models import Run
    from phantomhub.waste.selectors import analysis_view
    from phantomhub.waste.services import run_analyze

    row = run_analyze(run_id=run_id)
    assert row is not None
    run = Run.objects.get(pk=run_id)
    view = analysis_view(run=run, explain=False, row=row)
    assert view is not None
    rec = next((r for r in view["recommendations"] if r["code"] == code), None)
    return RunFigures(
        run_id=str(run_id),
        name=run.name,
        cost_usd=view["cost_usd"],
        billed_s=view["gpu_seconds"],
        steps=row.result["steps"],
        injected_s=reported["injected_s"],
        categories=view["categories"],
        recommendation=rec,
        recoverable_usd=view.get("recoverable_usd"),
        recommendations=[{k: r.get(k) for k in ("code", "title", "saving_usd", "claims")} for r in view["recommendations"]],
        hosts=[
            {k: h.get(k) for k in ("host", "cpu_other_pct_mean", "cpu_other_pct_p95", "cpu_steal_pct_mean", "contended")}
            for h in (view.get("host") or {}).get("hosts", [])
        ],
    )


def case_prove(case: str, *, server: str, team: str, workdir: Path, project: str | None = None,
               launch: str = "forkserver") -> CaseResult:  # fmt: skip
    """Peers, then A (analysed while B does not exist), then B; predicted and realized savings.

    Needs Django set up, a price for GPU_MODEL in force, and a PhantomHub server at ``server``
    that writes to the same database.
    """
    from phantomhub.accounts.services import project_token_for_slugs

    c = CASES[case]
    project = project or f"savings-{case}"
    token = project_token_for_slugs(team_slug=team, project_slug=project).raw
    kw: dict[str, Any] = {
        "server": server,
        "token": token,
        "team": team,
        "project": project,
        "workdir": workdir,
        "launch": launch,
    }
    peers = []
    for i in range(c.peers):
        run_id, rep = job(case, "fixed", name=f"{case}-peer-{i + 1}", **kw)
        peers.append(_figures(run_id, rep, c.code))
    a_id, a_rep = job(case, "waste", name=f"{case}-A-waste", **kw)
    a = _figures(a_id, a_rep, c.code)
    b_id, b_rep = job(case, "fixed", name=f"{case}-B-fixed", **kw)
    b = _figures(b_id, b_rep, c.code)
    predicted = None if a.recommendation is None else a.recommendation.get("saving_usd")
    return CaseResult(case, c.code, c.waste, c.fix, predicted, a.cost_usd - b.cost_usd, a, b, peers)


def category_claims(r: CaseResult) -> tuple[float | None, dict[str, float]]:
    """Run A's recoverable dollars of the case's category, and which recommendations claimed them."""
    cat = CASES[r.case].category
    claimed = {x["code"]: x["claims"][cat] for x in r.a.recommendations if (x.get("claims") or {}).get(cat)}
    return r.a.categories[cat].get("recoverable_usd"), claimed


def table(results: list[CaseResult]) -> str:
    lines = [
        f"{'case':<8} {'recommendation':<14} {'predicted $':>11} {'realized $':>10} {'pred/real':>9}   "
        f"{'cost A $':>8} {'cost B $':>8} {'injected s':>10}   {'category recoverable $':>22}  claimed by",
    ]
    for r in results:
        pred = "—" if r.predicted_usd is None else f"{r.predicted_usd:,.2f}"
        ratio = "—" if r.ratio is None else f"{r.ratio:.3f}"
        rec, claimed = category_claims(r)
        by = ", ".join(f"{code} {usd:,.2f}" for code, usd in claimed.items()) or "—"
        lines.append(
            f"{r.case:<8} {r.code:<14} {pred:>11} {r.realized_usd:>10,.2f} {ratio:>9}   "
            f"{r.a.cost_usd:>8,.2f} {r.b.cost_usd:>8,.2f} {r.a.injected_s:>10.3f}   {rec if rec is not None else '—':>22}  {by}"
        )
    return "\n".join(lines)


def details(r: CaseResult) -> str:
    """A's and B's category figures and evidence: where a prediction and a realization differ."""
    out = [f"[{r.case}] {r.waste}  ->  fix: {r.fix}"]
    for label, f in (("A", r.a), ("B", r.b), *((f"peer{i + 1}", p) for i, p in enumerate(r.peers))):
        cats = "  ".join(f"{k}={v['gpu_seconds']:.3f}s" for k, v in f.categories.items())
        out.append(f"  {label:<6} billed {f.billed_s:.3f}s cost ${f.cost_usd:,.2f} steps {f.steps}: {cats}")
    for label, f in (("A", r.a), ("B", r.b)):
        cat = f.categories[CASES[r.case].category]
        out.append(f"  {label} {CASES[r.case].category}: {json.dumps(cat, default=str)}")
        claims = [f"{x['code']} ${x['saving_usd']} {json.dumps(x['claims'])}" for x in f.recommendations if x["saving_usd"]]
        out.append(f"  {label} savings claimed: {'; '.join(claims) or 'none'}")
        out.append(f"  {label} hosts: {json.dumps(f.hosts)}")
    return "\n".join(out)


if __name__ == "__main__":
    _job_main(json.loads(sys.argv[1]))

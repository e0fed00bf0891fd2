"""A fleet of ranks against the whole server: what it costs in server CPU per GPU per minute.

Simulated ranks (8 per run, spread over a few processes) each go through the real agent's
background sender (``phantomhub_agent._worker.Worker``: batching, gzip, retries, spool), fed by a
driver that records steps at 1-10 steps/s (a rate per rank, drawn once), with realistic stage
times, system samples (a host row and a GPU row a second, from a stand-in for NVML/psutil) and
the agent's counters. The server is gunicorn + one Celery worker (analysis) + PostgreSQL +
Redis, with the ingest rate limit off. After a warm-up, the CPU time of the gunicorn master and
workers and of the Celery worker and its children is read before and after a steady window:

- requests per GPU per minute (all ingest POSTs the senders made in the window);
- server CPU ms per GPU per minute, web and worker (analysis) separately and together, and beside
  them (not in the total) PostgreSQL's: all its processes on this machine (bench.common.postgres_cpu_s);
- rows sent vs stored (steps and samples, after every rank finished and flushed);
- p50 / p99 request latency as the senders saw it.

Profiles are agent settings and the server's analysis debounce: ``defaults`` (what the agent and
the server ship: 60 s flushes, checkpoints to disk every 10 s, a node's 8 local ranks in one
request sent by local rank 0, the ranks launched with LOCAL_RANK / LOCAL_WORLD_SIZE as torchrun
does; a run's ranks live in different processes here, so the hand-off crosses processes through
the shared spool as on a node), ``per_rank`` (the same, but each rank its own request: what the
agent sent before, and still sends without LOCAL_WORLD_SIZE), ``v1`` (what they shipped before
the combined batch: 2 s flushes, counters every 10 s, one request per kind, analysis at most every
5 s), ``flush10`` (the previous default: 10 s flushes, no checkpoints), ``flush30`` (30 s flushes,
to show the slope), ``flush60`` (60 s flushes and analysis at most once a minute) and ``flush120``
(120 s flushes, the next step of the lever: PHANTOMHUB_FLUSH_INTERVAL=120 in the agent).

    .venv/bin/python bench/fleet.py [--ranks 64 256] [--profiles v1 flush10 per_rank defaults flush30 flush60 flush120]
        [--window 120] [--warmup S] [--idle 120] [--profile DIR]

Writes bench/results/fleet.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent"))
from bench.common import free_port, manage, postgres_cpu_s, postgres_settings, server_setup, wait_healthy  # noqa: E402

RANKS_PER_RUN = 8
# Agent settings per profile; "defaults" is whatever the agent ships.
PROFILES: dict[str, dict[str, Any]] = {
    "defaults": {},
    # Each rank its own request, as the agent sent before one request per node (and still does
    # where the launcher gives no LOCAL_RANK / LOCAL_WORLD_SIZE).
    "per_rank": {"node_batches": False},
    "v1": {"flush_interval_s": 2.0, "system_interval_s": 1.0, "counters_interval_s": 10.0, "wire": "separate"},
    "flush10": {"flush_interval_s": 10.0, "checkpoint_interval_s": 0},
    "flush30": {"flush_interval_s": 30.0},
    "flush60": {"flush_interval_s": 60.0},
    "flush120": {"flush_interval_s": 120.0},
}
# The server's analysis debounce (OrgSettings.analysis_debounce_s) per profile; None: its default.
DEBOUNCE_S: dict[str, int | None] = {
    "defaults": None,
    "per_rank": None,
    "v1": 5,
    "flush10": None,
    "flush30": None,
    "flush60": 60,
    "flush120": None,
}


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# -- the simulated ranks (child processes) ---------------------------------------------------------


class FakeSampler:
    """The agent's SystemSampler rows (a host row and one GPU row), without NVML or /proc."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def sample(self, t_ns: int) -> list[list[Any]]:
        r = self.rng
        return [
            [t_ns, None, None, None, None, None, round(r.uniform(80, 100), 2), round(r.uniform(0, 5), 2), 0.0, 12 * 2**30],
            [t_ns, 0, float(r.randint(60, 100)), r.choice((1755, 1980)), 60 * 2**30, round(r.uniform(300, 700), 1),
             None, None, None, None],
        ]  # fmt: skip


class TimedTransport:
    """Wraps the sender's transport: every request's latency and when it ended."""

    def __init__(self, inner: Any, log: list[tuple[float, float, int]]) -> None:
        self.inner = inner
        self.log = log

    def request(self, method: str, path: str, body: bytes | None = None, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            response = self.inner.request(method, path, body, **kw)
        except Exception:
            self.log.append((time.time(), time.perf_counter() - t0, 0))
            raise
        self.log.append((time.time(), time.perf_counter() - t0, response.status))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SimRank:
    def __init__(self, worker: Any, rate: float, rng: random.Random) -> None:
        self.worker = worker
        self.period_ns = int(1e9 / rate)
        self.rng = rng
        self.step = 0
        self.next_pc = time.perf_counter_ns() + rng.randrange(self.period_ns)
        self.sent = 0

    def due(self, now_pc: int) -> None:
        """Records every step that has started by ``now_pc`` (the hot path's raw record)."""
        while self.next_pc <= now_pc:
            start, p = self.next_pc, self.period_ns
            r = self.rng.random()
            data, fwd, bwd, opt = int(p * (0.02 + 0.08 * r)), int(p * 0.3), int(p * 0.45), int(p * 0.05)
            comm = int(p * 0.05 * r)
            end = start + data + fwd + bwd + opt + comm
            self.worker.steps.append(
                (self.step, start, end, data, fwd, bwd, opt, comm, 4 * 10**14, 8192, 8, 30 * 2**30, 40 * 2**30,
                 35 * 2**30, 0, None)
            )  # fmt: skip
            self.step += 1
            self.sent += 1
            self.next_pc += p


def ranks_run(
    spec: dict[str, Any], *, name: str, ranks_per_host: int, rate: tuple[float, float], finish_timeout_s: float
) -> tuple[list[SimRank], list[tuple[float, float, int]], dict[str, int]]:
    """Run ``spec["ranks"]`` through the agent's real senders until ``spec["stop_at"]``, then finish
    every rank at once (as a job's ranks do): the ranks, each request's (end, latency, status),
    and the agents' summed counters. Shared by bench/fleet.py and bench/soak.py."""
    from phantomhub_agent._config import settings_from
    from phantomhub_agent._spool import token_fingerprint
    from phantomhub_agent._worker import MARK_END, Worker, WorkerContext

    # Hundreds of senders in one process: the agent's once-per-sender warnings would flood the output.
    logging.getLogger("phantomhub_agent").setLevel(logging.CRITICAL)
    rng = random.Random(spec["seed"])
    log: list[tuple[float, float, int]] = []
    sims: list[SimRank] = []
    for run_id, rank in spec["ranks"]:
        settings = settings_from(
            {"server": spec["server"], "token": spec["token"], "spool_dir": str(spec["spool"]), **spec["settings"]},
            environ={},
        )
        clock = time.time_ns() - time.perf_counter_ns()
        # As torchrun launches them: LOCAL_RANK and LOCAL_WORLD_SIZE known, so a node's local rank 0
        # sends the node's batches (the agent's default; the per_rank profile turns it off).
        ctx = WorkerContext(run_id=run_id, rank=rank, host=f"node-{rank // ranks_per_host}",
                            token_fp=token_fingerprint(spec["token"]), clock_offset_ns=clock, gpu_devices=[0],
                            local_rank=rank % ranks_per_host, local_world_size=ranks_per_host)  # fmt: skip
        worker = Worker(settings, ctx)
        worker.transport = TimedTransport(worker.transport, log)  # type: ignore[assignment]
        worker._sampler = FakeSampler(rng.randrange(2**31))
        metadata = {"id": run_id, "name": f"{name}-{run_id[:8]}", "gpu_model": "H100-SXM", "gpu_count": RANKS_PER_RUN,
                    "world_size": RANKS_PER_RUN, "dtype": "bf16", "pricing_tier": "on_demand"}  # fmt: skip
        worker.items.append(("request", worker.make_request("run", "/api/v1/runs", metadata)))
        worker.ensure_started()
        sims.append(SimRank(worker, rng.uniform(*rate), rng))
    while time.time() < spec["stop_at"]:
        now = time.perf_counter_ns()
        for sim in sims:
            sim.due(now)
        time.sleep(0.02)
    for sim in sims:
        sim.worker.steps.append((MARK_END, time.perf_counter_ns()))
        sim.worker.items.append(("event", {"id": uuid.uuid4().hex, "kind": "finish", "rank": sim.worker.ctx.rank,
                                           "t_ns": time.time_ns() // 1000 * 1000, "status": "finished"}))  # fmt: skip
    finishers = [threading.Thread(target=sim.worker.finish, args=(finish_timeout_s,)) for sim in sims]
    for thread in finishers:
        thread.start()
    for thread in finishers:
        thread.join()
    counters: dict[str, int] = {}
    for sim in sims:
        for key, value in sim.worker.counters_snapshot().items():
            counters[key] = counters.get(key, 0) + value
    return sims, log, counters


def child_main(spec: dict[str, Any], out: Any) -> None:
    sims, log, counters = ranks_run(spec, name="fleet", ranks_per_host=8, rate=(1.0, 10.0), finish_timeout_s=20.0)
    out.put({"steps_sent": sum(s.sent for s in sims), "requests": log, "counters": counters})


# -- the server ------------------------------------------------------------------------------------


def _cpu_s(procs: list[psutil.Process]) -> float:
    """CPU seconds of a process tree: the live processes' own, plus what each has reaped of its
    children (a gunicorn or Celery child that exits mid-window keeps counting, in its parent)."""
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


class Server:
    def __init__(
        self, env: dict[str, str], web_workers: int, log_dir: Path, concurrency: int = 1, beat: bool = False, nice: int = 0
    ) -> None:
        """``nice``: the processes' nice value (their CPU weight against others on this machine)."""
        self.env = env
        self.port = free_port()
        niced = {"preexec_fn": (lambda: os.nice(nice))} if nice else {}
        self.web = subprocess.Popen(
            # The production config (deploy/gunicorn.py: its access log, the workers' warm-up at
            # boot); the port, worker count and log level given here win over it.
            [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--config", "deploy/gunicorn.py", "--bind",
             f"127.0.0.1:{self.port}", "--workers", str(web_workers), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=(log_dir / "web.log").open("ab"), stderr=subprocess.STDOUT, **niced,
        )  # fmt: skip
        worker_log = log_dir / "worker.log"
        worker_log.write_bytes(b"")
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "phantomhub", "worker", "--concurrency", str(concurrency),
             "--loglevel", "INFO", "-Q", "phantomhub", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=worker_log.open("ab"), stderr=subprocess.STDOUT, **niced,
        )  # fmt: skip
        self.worker_log = worker_log
        self.beat = None
        if beat:  # the periodic sweep, as a deployment runs it (crashed runs, missed analyses)
            self.beat = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "phantomhub", "beat", "--loglevel", "WARNING",
                 "--schedule", str(log_dir / "beat-schedule")],
                cwd=ROOT, env=env, stdout=(log_dir / "beat.log").open("ab"), stderr=subprocess.STDOUT, **niced,
            )  # fmt: skip
        try:
            wait_healthy(self.port)
            deadline = time.monotonic() + 60
            while b"ready." not in worker_log.read_bytes():
                if self.worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("celery worker did not start: " + worker_log.read_text()[-2000:])
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def cpu(self) -> tuple[float, float]:
        return _cpu_s(_tree(self.web.pid)), _cpu_s(_tree(self.worker.pid))

    def alive(self) -> bool:
        return self.web.poll() is None and self.worker.poll() is None

    def analyses(self) -> int:
        return self.worker_log.read_text(errors="replace").count("succeeded in")

    def stop(self) -> None:
        procs = [p for p in (self.web, self.worker, self.beat) if p is not None]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def profilers_start(out_dir: str, server: Server, case: str, seconds: float) -> list[tuple[str, Path, Any]]:
    """py-spy on the web and the worker trees over the window (``--profile``): only the thread
    holding the GIL is sampled, which is where the Python CPU goes (PostgreSQL waits release it)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    started = []
    for name, pid in (("web", server.web.pid), ("worker", server.worker.pid)):
        path = Path(out_dir) / f"{case}-{name}.txt"
        cmd = ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--gil", "--nonblocking", "--rate", "250",
               "--format", "raw", "--duration", str(max(1, int(seconds))), "-o", str(path)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append((name, path, proc))
    return started


def profiles_report(started: list[tuple[str, Path, Any]], top: int = 40) -> None:
    """Each profile's functions by inclusive share of the samples (the raw file keeps every stack)."""
    for name, path, proc in started:
        proc.wait(60)
        if not path.exists():
            print(f"[profile] {name}: py-spy wrote nothing (is it installed, may it ptrace?)", flush=True)
            continue
        total, inclusive = 0, dict[str, int]()
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            total += int(n)
            seen = set()
            for frame in stack.split(";")[1:]:  # the first frame names the process
                fn, _, where = frame.partition(" (")
                key = f"{fn} ({where.split(':')[0].split('site-packages/')[-1].removeprefix(f'{ROOT}/')}"
                if key not in seen:
                    seen.add(key)
                    inclusive[key] = inclusive.get(key, 0) + int(n)
        print(f"[profile] {name}: {total} samples holding the GIL ({path})", flush=True)
        for key, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {100 * n / max(total, 1):5.1f}% {key}", flush=True)


def stored_rows(database_url: str, run_ids: list[str]) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        steps = conn.execute("SELECT sum(n) FROM telemetry_stepchunk WHERE run_id = ANY(%s::uuid[])", [run_ids]).fetchone()
        samples = conn.execute("SELECT sum(n) FROM telemetry_samplechunk WHERE run_id = ANY(%s::uuid[])", [run_ids]).fetchone()
    return int(steps[0] or 0) if steps else 0, int(samples[0] or 0) if samples else 0


def step_row_bytes(env: dict[str, str], database_url: str, run_ids: list[str], workdir: Path) -> dict[str, float | None]:
    """Bytes per stored step row: hot (every step chunk partition's table, TOAST and indexes, over
    the step rows packed in them) and archived (the Parquet files `exportsteps` writes for these runs, the
    archive's encoding, over their rows)."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) + pg_total_relation_size('telemetry_stepchunk'),"
            " (SELECT coalesce(sum(n), 0) FROM telemetry_stepchunk) FROM pg_inherits"
            " WHERE inhparent = 'telemetry_stepchunk'::regclass"
        ).fetchone()
        ours = conn.execute(
            "SELECT coalesce(sum(n), 0) FROM telemetry_stepchunk WHERE run_id = ANY(%s::uuid[])", [run_ids]
        ).fetchone()
    hot_bytes, hot_rows = (int(row[0]), int(row[1])) if row else (0, 0)
    archived = 0
    for run_id in run_ids:
        path = workdir / f"{run_id}.parquet"
        manage(env, "exportsteps", run_id, "-o", str(path))
        archived += path.stat().st_size
        path.unlink()
    rows = int(ours[0]) if ours else 0
    return {
        "hot": round(hot_bytes / hot_rows, 1) if hot_rows else None,
        "archived": round(archived / rows, 1) if rows else None,
    }


def spooled_step_rows(spool: Path) -> int:
    """Step rows still in the spool (not lost: the next agent or `phantomhub-agent sync` sends them)."""
    rows = 0
    for path in spool.rglob("*.phk*"):
        with path.open("rb") as fh:
            header = json.loads(fh.readline())
        if header.get("kind") in ("steps", "batch"):
            rows += int(header.get("rows", 0))
    return rows


def debounce_set(env: dict[str, str], seconds: int | None) -> int:
    """Sets the organization's analysis debounce (None: the model's default); returns it."""
    code = (
        "from phantomhub.waste.models import OrgSettings as O; o = O.get(); "
        f"o.analysis_debounce_s = {seconds!r} or O._meta.get_field('analysis_debounce_s').default; o.save(); "
        "print(o.analysis_debounce_s)"
    )
    return int(manage(env, "shell", "-c", code).splitlines()[-1])


def warmup_default(profile: str, debounce: int) -> float:
    from phantomhub_agent._config import Settings

    return float(PROFILES[profile].get("flush_interval_s", Settings.flush_interval_s)) + debounce + 15.0


def one_case(args: argparse.Namespace, server: Server, token: str, profile: str, ranks: int) -> dict[str, Any]:
    debounce = debounce_set(server.env, DEBOUNCE_S[profile])
    runs = [str(uuid.uuid4()) for _ in range(max(1, ranks // RANKS_PER_RUN))]
    all_ranks = [(runs[i // RANKS_PER_RUN], i % RANKS_PER_RUN) for i in range(ranks)]
    procs_n = min(args.procs, ranks)
    warmup = args.warmup if args.warmup is not None else warmup_default(profile, debounce)
    cpu_start, t_start = server.cpu(), time.time()
    stop_at = t_start + warmup + args.window
    spool = Path(args.spool) / f"{profile}-{ranks}-{int(t_start)}"
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()
    children = []
    for k in range(procs_n):
        spec = {"ranks": all_ranks[k::procs_n], "server": f"http://127.0.0.1:{server.port}", "token": token,
                "settings": PROFILES[profile], "seed": 1000 * k + ranks, "stop_at": stop_at, "spool": str(spool)}  # fmt: skip
        child = ctx.Process(target=child_main, args=(spec, queue), daemon=True)
        child.start()
        children.append(child)
    time.sleep(max(0.0, t_start + warmup - time.time()))
    cpu0, pg0, analyses0, w0 = server.cpu(), postgres_cpu_s(), server.analyses(), time.time()
    # What the runs' start cost (registration, each rank's first batch, each run's first, full
    # analysis, a web worker's first requests): once per run, so apart from the steady figure.
    start_ms_per_gpu = {
        "web": round((cpu0[0] - cpu_start[0]) * 1000 / ranks, 1),
        "worker": round((cpu0[1] - cpu_start[1]) * 1000 / ranks, 1),
        "over_s": round(w0 - t_start, 1),
    }
    profilers = profilers_start(args.profile, server, f"{profile}-{ranks}", stop_at - time.time()) if args.profile else []
    time.sleep(max(0.0, stop_at - time.time()))
    cpu1, pg1, analyses1, w1 = server.cpu(), postgres_cpu_s(), server.analyses(), time.time()
    profiles_report(profilers)
    if not server.alive():  # e.g. the broker restarted under the worker: no figure to keep
        raise RuntimeError(f"a server process died during the window; see {server.worker_log.parent}")
    results = [queue.get(timeout=300) for _ in children]
    for child in children:
        child.join(30)
    time.sleep(args.settle)
    minutes = (w1 - w0) / 60
    gpu_minutes = ranks * minutes
    requests = [r for res in results for r in res["requests"]]
    in_window = [r for r in requests if w0 <= r[0] <= w1]
    latencies_ms = [r[1] * 1000 for r in in_window]
    counters: dict[str, int] = {}
    for res in results:
        for key, value in res["counters"].items():
            counters[key] = counters.get(key, 0) + value
    steps_sent = sum(res["steps_sent"] for res in results)
    steps_stored, samples_stored = stored_rows(args.database_url, runs)
    web_ms = (cpu1[0] - cpu0[0]) * 1000 / gpu_minutes
    worker_ms = (cpu1[1] - cpu0[1]) * 1000 / gpu_minutes
    pg_ms = (pg1 - pg0) * 1000 / gpu_minutes
    case = {
        "profile": profile,
        "agent_settings": PROFILES[profile],
        "analysis_debounce_s": debounce,
        "ranks": ranks,
        "runs": len(runs),
        "warmup_s": round(warmup, 1),
        "window_s": round(w1 - w0, 1),
        "start_cpu_ms_per_gpu": start_ms_per_gpu,
        "requests_per_gpu_min": round(len(in_window) / gpu_minutes, 2),
        "cpu_ms_per_gpu_min": {"web": round(web_ms, 2), "worker": round(worker_ms, 2), "total": round(web_ms + worker_ms, 2),
                               # Not in the total (the issue's server CPU is PhantomHub's processes'); a floor.
                               "postgres": round(pg_ms, 2)},
        "analyses_in_window": analyses1 - analyses0,
        "latency_ms": {"p50": round(pct(latencies_ms, 50) or 0, 2), "p99": round(pct(latencies_ms, 99) or 0, 2)},
        "non_2xx_in_window": sum(1 for r in in_window if not 200 <= r[2] < 300),
        "steps": {"sent": steps_sent, "stored": steps_stored, "left_in_spool": spooled_step_rows(spool)},
        "bytes_per_step_row": step_row_bytes(server.env, args.database_url, runs, Path(args.spool)),
        "samples": {"stored": samples_stored, "dropped": counters.get("dropped_samples", 0)},
        "agent_counters": {k: counters.get(k, 0) for k in ("dropped_steps", "rejected_batches", "send_failures",
                                                            "spooled_batches", "replayed_batches", "sent_batches",
                                                            "handed_batches", "node_batches", "node_peer_batches")},
    }  # fmt: skip
    c = case
    print(
        f"{profile:>9} {ranks:>4} ranks (debounce {debounce} s): {c['requests_per_gpu_min']:6.2f} req/GPU/min, CPU ms/GPU/min "
        f"web {web_ms:6.2f} worker {worker_ms:6.2f} total {web_ms + worker_ms:6.2f} (PostgreSQL {pg_ms:6.2f}); latency p50 "
        f"{c['latency_ms']['p50']} ms p99 {c['latency_ms']['p99']} ms; steps sent {steps_sent} stored {steps_stored}; "
        f"analyses {c['analyses_in_window']}; the start (the first {start_ms_per_gpu['over_s']} s) CPU ms per GPU web "
        f"{start_ms_per_gpu['web']} worker {start_ms_per_gpu['worker']}; bytes per step row hot {c['bytes_per_step_row']['hot']} "
        f"archived {c['bytes_per_step_row']['archived']}",
        flush=True,
    )
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="*", default=[64, 256], help="fleet sizes; none with --idle: only that")
    parser.add_argument("--profiles", nargs="+", default=["defaults"], choices=sorted(PROFILES))
    parser.add_argument("--window", type=float, default=120.0, help="measured seconds (after the warm-up)")
    parser.add_argument(
        "--warmup", type=float, default=None,
        help="seconds before the window (default: the profile's flush interval + its analysis debounce + 15 s, "
        "so that every rank's first batch and every run's first analysis come before it)",
    )  # fmt: skip
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the ranks finish, before counting rows")
    parser.add_argument("--procs", type=int, default=4, help="processes the ranks are spread over")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_fleet")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5"))
    parser.add_argument("--spool", default="/tmp/ph-fleet-spool")
    parser.add_argument(
        "--idle", type=float, default=0.0,
        help="first measure the server's CPU with no ranks for this many seconds (its fixed cost, "
        "which a case's figure per GPU includes)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", metavar="DIR", help="record the web and worker processes with py-spy over each window "
        "(pip install py-spy) and print where their Python time goes; the raw stacks are kept in DIR",
    )  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fleet.json"))
    args = parser.parse_args()
    if args.profile and shutil.which("py-spy") is None:  # before the setup and warm-up, not after them
        parser.error("--profile needs py-spy on PATH (pip install py-spy)")

    env = server_setup(args.database_url, args.redis_url)
    token = manage(env, "createtoken", "--team", "bench", "--project", "fleet")
    log_dir = Path(args.spool)
    log_dir.mkdir(parents=True, exist_ok=True)
    server = Server(env, args.web_workers, log_dir)
    cases: list[dict[str, Any]] = []
    idle: dict[str, Any] | None = None
    try:
        if args.idle > 0:
            idle = idle_case(server, args.idle)
            write_result(args, cases, idle)
        # The profiles run one after the other for each fleet size, on the same server and
        # machine load; the file is written after every case.
        for ranks in args.ranks:
            for profile in args.profiles:
                cases.append(one_case(args, server, token, profile, ranks))
                write_result(args, cases, idle)
    finally:
        server.stop()
    print(f"wrote {args.out}")


def idle_case(server: Server, seconds: float) -> dict[str, Any]:
    """The server's CPU with nothing sent to it: gunicorn's and Celery's own timers and polling."""
    time.sleep(5)
    cpu0, pg0, t0 = server.cpu(), postgres_cpu_s(), time.time()
    time.sleep(seconds)
    cpu1, pg1, t1 = server.cpu(), postgres_cpu_s(), time.time()
    per_s = {"web": (cpu1[0] - cpu0[0]) / (t1 - t0) * 1000, "worker": (cpu1[1] - cpu0[1]) / (t1 - t0) * 1000,
             "postgres": (pg1 - pg0) / (t1 - t0) * 1000}  # fmt: skip
    print(
        f"idle ({t1 - t0:.0f} s, no ranks): CPU ms a second web {per_s['web']:.2f} worker {per_s['worker']:.2f} "
        f"(PostgreSQL {per_s['postgres']:.2f}); per GPU-minute that is 60 × these / the GPUs",
        flush=True,
    )
    return {"seconds": round(t1 - t0, 1), "cpu_ms_per_s": {k: round(v, 3) for k, v in per_s.items()}}


def write_result(args: argparse.Namespace, cases: list[dict[str, Any]], idle: dict[str, Any] | None = None) -> None:
    result = {
        "bench": "fleet",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "server": {"web_workers": args.web_workers, "celery_concurrency": 1, "ingest_rate": "off"},
        "window_s": args.window,
        "warmup_s": args.warmup if args.warmup is not None else "the profile's flush interval + debounce + 15 s",
        "ranks_per_run": RANKS_PER_RUN,
        "steps_per_s_per_rank": "uniform 1-10, drawn once per rank",
        "target_cpu_ms_per_gpu_min": 10,
        "postgres": postgres_settings(args.database_url),
        "idle": idle,
        "cases": cases,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

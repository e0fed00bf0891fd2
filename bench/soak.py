"""Soak with faults: the whole stack under load while its parts fail, and nothing lost or doubled.

64 simulated ranks (8 runs of 8) post steps, system samples and counters through the real agent's
background sender (``phantomhub_agent._worker.Worker``: batching, gzip, retries, spool), and 8
portal readers read the pages people open (overview, runs, leaderboards, a run page, its
analysis, finance), against gunicorn (deploy/gunicorn.py) + a Celery worker + Celery beat +
PostgreSQL + Redis, with the ingest rate limit off. During the load it

- restarts PostgreSQL once (``pg_ctlcluster <version> main restart``),
- stops Redis for 30 s (``redis-cli shutdown nosave``, then starts it as .ci/run does),
- SIGKILLs the Celery worker once (its whole process group) and starts a new one.

Then the ranks finish (the agent's final flush, whatever it could not send stays in its spool,
which ``phantomhub-agent sync`` uploads), and it waits for the analyses to catch up. It prints
and writes to bench/results/soak.json: rows sent and stored (steps: equal, no duplicates), the
5xx answers (none may fall outside the PostgreSQL restart window), p50/p99 latency of ingest and
portal requests, and the analysis lag at the end (the oldest unanalysed telemetry, at most 60 s).

Bounded: the load runs --duration seconds (default 240), every wait has a limit, and an alarm
ends the whole bench after --duration + 600 s. PostgreSQL and Redis are brought back, and every
process it started is stopped, whatever happens (try/finally, SIGTERM too). Only 127.0.0.1.
It disturbs anything else using this PostgreSQL or Redis while it runs.

    .venv/bin/python bench/soak.py [--duration 240] [--ranks 64] [--readers 8] [--no-faults]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing as mp
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent"))
from bench.common import database_recreate, free_port, manage, wait_healthy  # noqa: E402
from bench.fleet import pct, ranks_run  # noqa: E402

RANKS_PER_RUN = 8
HOST = "127.0.0.1"
REDIS_PORT = 6379
# How .ci/run starts Redis (no persistence): how it is started again after the outage.
REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", HOST, "--port", str(REDIS_PORT), "--save", "",
               "--appendonly", "no", "--dir", "/var/lib/redis", "--logfile", "/var/log/redis/ci.log"]  # fmt: skip
REDIS_OUTAGE_S = 30.0
FAULTS = ("postgres_restart", "redis_outage", "worker_kill")
GRACE_S = 2.0  # a request that ended this long after PostgreSQL answered again still counts in its window


class Interrupted(Exception):
    pass


def _interrupt(signum: int, frame: Any) -> None:
    # Once: a second SIGTERM (from `timeout`, say) must not cut short the clean-up the first began.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    raise Interrupted(f"signal {signum}")


def _child_signals() -> None:
    """Forked load generators die of SIGTERM as usual; the clean-up is the parent's."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


# -- the simulated ranks (child processes) ---------------------------------------------------------


def ranks_main(spec: dict[str, Any], out: Any) -> None:
    _child_signals()
    sims, log, counters = ranks_run(
        spec, name="soak", ranks_per_host=4, rate=tuple(spec["steps_per_s"]), finish_timeout_s=spec["finish_timeout_s"]
    )
    sent = [(sim.worker.ctx.run_id, sim.worker.ctx.rank, sim.sent) for sim in sims]
    out.put({"sent": sent, "requests": log, "counters": counters})


# -- the portal readers (a child process, one thread each) -----------------------------------------


def _reader(port: int, token: str, paths: list[str], stop_at: float, seed: int, log: list[tuple[float, float, int]]) -> None:
    rng = random.Random(seed)
    conn: http.client.HTTPConnection | None = None
    while time.time() < stop_at:
        path = rng.choice(paths)
        if "{run}" in path:
            path = path.replace("{run}", _runs_seen(port, token) or "00000000-0000-0000-0000-000000000000")
        t0 = time.perf_counter()
        status = 0
        try:
            if conn is None:
                conn = http.client.HTTPConnection(HOST, port, timeout=30)
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            status = response.status
            if response.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            if conn is not None:
                conn.close()
            conn = None
        log.append((time.time(), time.perf_counter() - t0, status))
        time.sleep(rng.uniform(0.1, 0.5))  # a person's pace, about
    if conn is not None:
        conn.close()


_RUN_IDS: list[str] = []


def _runs_seen(port: int, token: str) -> str | None:
    if not _RUN_IDS:
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=10)
            conn.request("GET", "/api/v1/portal/runs?page_size=20", headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            body = json.loads(response.read() or b"{}")
            conn.close()
            _RUN_IDS.extend(row["id"] for row in body.get("results", []))
        except (OSError, ValueError, http.client.HTTPException):
            return None
    return random.choice(_RUN_IDS) if _RUN_IDS else None


def readers_main(spec: dict[str, Any], out: Any) -> None:
    _child_signals()
    month = time.strftime("%Y-%m", time.gmtime())
    paths = [
        "/api/v1/portal/overview",
        "/api/v1/portal/runs",
        "/api/v1/portal/runs?sort=-cost_usd&page_size=20",
        "/api/v1/portal/leaderboards/teams",
        "/api/v1/portal/leaderboards/projects",
        "/api/v1/portal/leaderboards/runs",
        "/api/v1/portal/teams",
        f"/api/v1/portal/finance/{month}",
        "/api/v1/portal/runs/{run}",
        "/api/v1/runs/{run}/analysis",
    ]
    logs: list[list[tuple[float, float, int]]] = [[] for _ in range(spec["readers"])]
    threads = [
        threading.Thread(target=_reader, args=(spec["port"], spec["token"], paths, spec["stop_at"], 7 * i, logs[i]))
        for i in range(spec["readers"])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put({"requests": [r for log in logs for r in log]})


# -- the services ----------------------------------------------------------------------------------


def _run(cmd: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def pg_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[0]


def pg_ready() -> bool:
    return _run(["pg_isready", "-h", HOST, "-p", "5432", "-q"], 10).returncode == 0


def pg_ensure_up() -> None:
    if pg_ready():
        return
    _run(["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main", "start"], 120)
    wait_for(pg_ready, 60, "PostgreSQL to start")


def redis_up() -> bool:
    return _run(["redis-cli", "-h", HOST, "-p", str(REDIS_PORT), "ping"], 10).stdout.strip() == "PONG"


def redis_start() -> None:
    os.makedirs("/var/lib/redis", exist_ok=True)
    os.makedirs("/var/log/redis", exist_ok=True)
    _run(REDIS_START, 30)
    wait_for(redis_up, 30, "Redis to start")


def redis_ensure_up() -> None:
    if not redis_up():
        redis_start()


def wait_for(ready: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Stack:
    """gunicorn, a Celery worker and Celery beat, each in its own process group."""

    def __init__(self, env: dict[str, str], log_dir: Path, web_workers: int) -> None:
        self.env, self.log_dir = env, log_dir
        self.port = free_port()
        self.web = self._start(
            "web",
            [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--config", "deploy/gunicorn.py", "--bind",
             f"{HOST}:{self.port}", "--workers", str(web_workers), "--access-logfile", "/dev/null", "--log-level", "warning"],
        )  # fmt: skip
        self.worker = self.worker_start()
        self.beat = self._start(
            "beat",
            [sys.executable, "-m", "celery", "-A", "phantomhub", "beat", "--loglevel", "INFO", "-s",
             str(log_dir / "beat-schedule")],
        )  # fmt: skip
        wait_healthy(self.port)

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        return subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def worker_start(self) -> subprocess.Popen[bytes]:
        log_path = self.log_dir / "worker.log"
        start = log_path.stat().st_size if log_path.exists() else 0
        proc = self._start(
            "worker",
            [sys.executable, "-m", "celery", "-A", "phantomhub", "worker", "--concurrency", "1", "--loglevel", "INFO",
             "-Q", "phantomhub", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        )  # fmt: skip

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError("the Celery worker exited: " + log_path.read_text(errors="replace")[-2000:])
            with log_path.open("rb") as fh:
                fh.seek(start)
                return b"ready." in fh.read()

        wait_for(ready, 60, "the Celery worker")
        return proc

    def worker_kill(self) -> None:
        os.killpg(self.worker.pid, signal.SIGKILL)  # master and pool children at once, like an OOM kill of the container
        self.worker.wait(10)

    def analyses(self) -> int:
        return (self.log_dir / "worker.log").read_text(errors="replace").count("succeeded in")

    def stop(self) -> None:
        procs = [p for p in (getattr(self, "web", None), getattr(self, "worker", None), getattr(self, "beat", None)) if p]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def metrics(port: int, token: str) -> dict[str, float]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def stored(database_url: str, run_ids: list[str]) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        chunks = conn.execute(
            "SELECT run_id::text, rank, payload FROM telemetry_stepchunk WHERE run_id = ANY(%s::uuid[])", [run_ids]
        ).fetchall()
        # Each chunk's steps: the first of its 15 big-endian 8-byte fields a row (storage.STEPS).
        by_rank: dict[tuple[str, int], list[Any]] = {}
        for run_id, rank, payload in chunks:
            by_rank.setdefault((run_id, rank), []).append(np.frombuffer(payload, dtype=">i8").reshape(-1, 15)[:, 0])
        rows = []
        for (run_id, rank), parts in by_rank.items():
            steps = np.concatenate(parts)
            rows.append((run_id, rank, len(steps), len(np.unique(steps)), int(steps.max())))
        samples = conn.execute(
            "SELECT coalesce(sum(n), 0) FROM telemetry_samplechunk WHERE run_id = ANY(%s::uuid[])", [run_ids]
        ).fetchone()
        reused = conn.execute("SELECT coalesce(sum(reused_step_rows), 0) FROM telemetry_runrank WHERE run_id = ANY(%s::uuid[])",
                              [run_ids]).fetchone()  # fmt: skip
        statuses = conn.execute("SELECT status, count(*) FROM telemetry_run WHERE id = ANY(%s::uuid[]) GROUP BY status",
                                [run_ids]).fetchall()  # fmt: skip
    return {
        "per_rank": {(r[0], r[1]): {"rows": r[2], "distinct": r[3], "max_step": r[4]} for r in rows},
        "samples": int(samples[0]) if samples else 0,
        "reused_step_rows": int(reused[0]) if reused else 0,
        "run_statuses": {status: n for status, n in statuses},
    }


def spooled_files(spool: Path) -> int:
    return sum(1 for _ in spool.rglob("*.phk*"))


# -- the bench -------------------------------------------------------------------------------------


def latency(requests: list[tuple[float, float, int]]) -> dict[str, Any]:
    ms = [r[1] * 1000 for r in requests if r[2]]
    return {"requests": len(requests), "p50_ms": round(pct(ms, 50) or 0, 1), "p99_ms": round(pct(ms, 99) or 0, 1)}


def in_window(request: tuple[float, float, int], windows: list[tuple[float, float]]) -> bool:
    end, took = request[0], request[1]
    start = end - took
    return any(start <= w_end + GRACE_S and end >= w_start for w_start, w_end in windows)


def faults_run(stack: Stack, schedule: dict[str, float], t0: float, events: list[dict[str, Any]], stop_at: float) -> None:
    """The faults at their offsets from t0 (each once), in the order they fall."""
    for name, offset in sorted(schedule.items(), key=lambda kv: kv[1]):
        time.sleep(max(0.0, t0 + offset - time.time()))
        if time.time() > stop_at:
            break
        began = time.time()
        if name == "postgres_restart":
            done = _run(["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main", "restart"], 120)
            wait_for(pg_ready, 60, "PostgreSQL after its restart")
            note = (done.stdout + done.stderr).strip()
        elif name == "redis_outage":
            _run(["redis-cli", "-h", HOST, "-p", str(REDIS_PORT), "shutdown", "nosave"], 30)
            wait_for(lambda: not redis_up(), 10, "Redis to stop")
            time.sleep(max(0.0, began + REDIS_OUTAGE_S - time.time()))
            redis_start()
            note = ""
        elif name == "worker_kill":
            stack.worker_kill()
            stack.worker = stack.worker_start()
            note = f"new worker pid {stack.worker.pid}"
        ended = time.time()
        events.append({"fault": name, "at_s": round(began - t0, 1), "took_s": round(ended - began, 1), "began": began,
                       "ended": ended, "note": note})  # fmt: skip
        print(f"[fault] {name} at {began - t0:.0f} s, {ended - began:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of load")
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--steps-per-s", type=float, nargs=2, default=[2.0, 5.0], help="per rank, drawn once in this range")
    parser.add_argument("--flush-interval", type=float, default=2.0, help="the agent's flush interval (s)")
    parser.add_argument("--finish-timeout", type=float, default=60.0, help="the agent's final flush deadline (s)")
    parser.add_argument("--procs", type=int, default=4, help="processes the ranks are spread over")
    parser.add_argument("--web-workers", type=int, default=4, help="gunicorn workers (deploy/gunicorn.py's default)")
    parser.add_argument("--no-faults", action="store_true", help="the same load, nothing fails (a baseline)")
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS), help="which faults (default: all)")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_soak")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/8"))
    parser.add_argument("--work", default="/tmp/ph-soak")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "soak.json"))
    args = parser.parse_args()
    for name in ("database_url", "redis_url"):
        if "127.0.0.1" not in getattr(args, name):
            parser.error(f"--{name.replace('_', '-')} must be on 127.0.0.1")

    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGALRM, _interrupt)
    signal.alarm(int(args.duration + 600))  # the whole bench, setup to report, is bounded
    work = Path(args.work) / time.strftime("%Y%m%d-%H%M%S")
    spool = work / "spool"
    spool.mkdir(parents=True)
    children: list[Any] = []
    try:
        result = soak(args, work, spool, children)
    finally:
        signal.alarm(0)
        for child in children:
            if child.is_alive():
                child.kill()
        # Whatever happened: the services this bench stops come back (its own processes are
        # stopped by soak's finally).
        redis_ensure_up()
        pg_ensure_up()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    if not result["ok"]:
        sys.exit(1)


def soak(args: argparse.Namespace, work: Path, spool: Path, children: list[Any]) -> dict[str, Any]:
    import redis

    pg_ensure_up()
    redis_ensure_up()
    database_recreate(args.database_url)
    redis.Redis.from_url(args.redis_url).flushdb()
    metrics_token = "soak-metrics-" + uuid.uuid4().hex
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")},
        "PHANTOMHUB_DATABASE_URL": args.database_url,
        "PHANTOMHUB_REDIS_URL": args.redis_url,
        "PHANTOMHUB_SECRET_KEY": "s" * 48,
        "PHANTOMHUB_DEBUG": "0",
        "PHANTOMHUB_LOG_LEVEL": "WARNING",
        "PHANTOMHUB_SECURE_COOKIES": "0",
        "PHANTOMHUB_INGEST_RATE": "off",
        "PHANTOMHUB_METRICS_TOKEN": metrics_token,
        "PHANTOMHUB_VAR_DIR": str(work),
        "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
    }
    print(f"[setup] {args.database_url}, logs in {work}", flush=True)
    manage(env, "migrate", "--no-input")
    token = manage(env, "createtoken", "--team", "bench", "--project", "soak")
    reader_token = manage(
        env, "shell", "-c",
        "from django.contrib.auth.models import User; from phantomhub.accounts.models import Profile; "
        "from phantomhub.accounts.services import personal_token_create; "
        "u = User.objects.create_user('soak-reader'); Profile.objects.create(user=u, is_org_admin=True); "
        "print(personal_token_create(user=u, name='soak').raw)",
    ).splitlines()[-1]  # fmt: skip
    stack = Stack(env, work, args.web_workers)
    try:
        return _load(args, stack, token, reader_token, metrics_token, spool, children)
    finally:
        stack.stop()


def _load(
    args: argparse.Namespace,
    stack: Stack,
    token: str,
    reader_token: str,
    metrics_token: str,
    spool: Path,
    children: list[Any],
) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    runs = [str(uuid.uuid4()) for _ in range(max(1, args.ranks // RANKS_PER_RUN))]
    all_ranks = [(runs[i // RANKS_PER_RUN], i % RANKS_PER_RUN) for i in range(args.ranks)]
    server = f"http://{HOST}:{stack.port}"
    t0 = time.time()
    stop_at = t0 + args.duration
    settings = {"flush_interval_s": args.flush_interval}
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()
    procs_n = min(args.procs, args.ranks)
    for k in range(procs_n):
        spec = {"ranks": all_ranks[k::procs_n], "server": server, "token": token, "settings": settings, "seed": 100 + k,
                "stop_at": stop_at, "spool": str(spool), "steps_per_s": args.steps_per_s,
                "finish_timeout_s": args.finish_timeout}  # fmt: skip
        children.append(ctx.Process(target=ranks_main, args=(spec, queue), daemon=True))
    readers_queue: Any = ctx.Queue()
    reader_spec = {"port": stack.port, "token": reader_token, "readers": args.readers, "stop_at": stop_at}
    children.append(ctx.Process(target=readers_main, args=(reader_spec, readers_queue), daemon=True))
    for child in children:
        child.start()
    print(f"[load] {args.ranks} ranks ({len(runs)} runs), {args.readers} readers for {args.duration:.0f} s", flush=True)
    # The faults fall in the middle of the load, apart, so each one's effects are its own.
    d = args.duration
    at = {"postgres_restart": 0.2 * d, "redis_outage": 0.4 * d, "worker_kill": 0.7 * d}
    schedule = {} if args.no_faults else {name: at[name] for name in args.faults}
    events: list[dict[str, Any]] = []
    faults_run(stack, schedule, t0, events, stop_at)
    ranks_results = [queue.get(timeout=args.duration + args.finish_timeout + 120) for _ in range(procs_n)]
    readers_result = readers_queue.get(timeout=120)
    for child in children:
        child.join(30)
    ended = time.time()
    print(f"[load] ranks finished {ended - stop_at:.1f} s after the load stopped", flush=True)

    left_in_spool = spooled_files(spool)
    synced = None
    if left_in_spool:
        from phantomhub_agent.cli import sync

        log_lines: list[str] = []

        class _Out:
            def write(self, text: str) -> None:
                log_lines.append(text)

        synced = {"files": left_in_spool, "exit": sync(spool, server, token, out=_Out())}  # type: ignore[arg-type]
        print(f"[sync] {left_in_spool} spooled files uploaded by `phantomhub-agent sync` (exit {synced['exit']})", flush=True)

    # Analysis lag at the end: from the last telemetry written until no run's analysis is older
    # than its telemetry (phantomhub_runs_dirty 0); and the lag gauge as the last write left it.
    last_write = time.time()
    gauge = metrics(stack.port, metrics_token)
    lag_gauge_s = gauge.get("phantomhub_analysis_lag_seconds")
    while gauge.get("phantomhub_runs_dirty", 0) > 0 and time.time() < last_write + 120:
        time.sleep(1.0)
        gauge = metrics(stack.port, metrics_token)
    dirty_left = int(gauge.get("phantomhub_runs_dirty", 0))
    lag_s = round(time.time() - last_write, 1) if dirty_left == 0 else None

    sent = {(run_id, rank): n for res in ranks_results for run_id, rank, n in res["sent"]}
    db = stored(args.database_url, runs)
    steps_sent = sum(sent.values())
    steps_stored = sum(v["rows"] for v in db["per_rank"].values())
    exact = all(
        db["per_rank"].get(key, {"rows": 0, "distinct": 0, "max_step": None}) == {"rows": n, "distinct": n, "max_step": n - 1}
        for key, n in sent.items()
        if n
    )
    duplicates = sum(v["rows"] - v["distinct"] for v in db["per_rank"].values())
    ingest = [r for res in ranks_results for r in res["requests"]]
    portal = readers_result["requests"]
    pg_windows = [(e["began"], e["ended"]) for e in events if e["fault"] == "postgres_restart"]
    fault_windows = [(e["began"], e["ended"]) for e in events]

    def errors(requests: list[tuple[float, float, int]]) -> dict[str, int]:
        five = [r for r in requests if r[2] >= 500]
        return {
            "5xx": len(five),
            "5xx_outside_postgres_restart": sum(1 for r in five if not in_window(r, pg_windows)),
            "no_answer": sum(1 for r in requests if r[2] == 0),
            "no_answer_outside_postgres_restart": sum(1 for r in requests if r[2] == 0 and not in_window(r, pg_windows)),
            "4xx": sum(1 for r in requests if 400 <= r[2] < 500),
        }

    counters: dict[str, int] = {}
    for res in ranks_results:
        for key, value in res["counters"].items():
            counters[key] = counters.get(key, 0) + value
    steady = [r for r in ingest if not in_window(r, fault_windows)]
    steady_portal = [r for r in portal if not in_window(r, fault_windows)]
    ingest_errors, portal_errors = errors(ingest), errors(portal)
    result: dict[str, Any] = {
        "bench": "soak",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": pg_version(),
            # Others' work on the same machine shows in the latencies: the 1-minute load around the run.
            "load_avg_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "command": " ".join(["bench/soak.py", *sys.argv[1:]]),
        "load": {
            "duration_s": args.duration,
            "ranks": args.ranks,
            "runs": len(runs),
            "readers": args.readers,
            "steps_per_s_per_rank": args.steps_per_s,
            "agent_flush_interval_s": args.flush_interval,
            "web_workers": args.web_workers,
            "celery_concurrency": 1,
            "ingest_rate": "off",
        },
        "faults": [{k: v for k, v in e.items() if k not in ("began", "ended")} for e in events],
        "steps": {
            "sent": steps_sent,
            "stored": steps_stored,
            "duplicates": duplicates,
            "exact_per_rank": exact,
            "reused_step_rows": db["reused_step_rows"],
        },
        "samples_stored": db["samples"],
        "left_in_spool_after_finish": left_in_spool,
        "sync": synced,
        "ingest": {**latency(ingest), "steady": latency(steady), **ingest_errors},
        "portal": {**latency(portal), "steady": latency(steady_portal), **portal_errors},
        "agent_counters": {
            k: counters.get(k, 0)
            for k in (
                "dropped_steps",
                "dropped_samples",
                "rejected_batches",
                "send_failures",
                "spooled_batches",
                "replayed_batches",
                "sent_batches",
            )
        },
        "run_statuses": db["run_statuses"],
        "analyses_run": stack.analyses(),
        "analysis_lag_at_end_s": lag_s,
        "analysis_lag_gauge_after_last_write_s": lag_gauge_s,
        "runs_dirty_at_end": dirty_left,
    }
    checks = {
        "rows stored == rows sent, each rank exactly": steps_stored == steps_sent and exact,
        "no duplicates": duplicates == 0 and db["reused_step_rows"] == 0,
        "no 5xx outside the PostgreSQL restart": ingest_errors["5xx_outside_postgres_restart"] == 0
        and portal_errors["5xx_outside_postgres_restart"] == 0,
        "analysis lag at the end <= 60 s": lag_s is not None and lag_s <= 60,
        "every fault injected": args.no_faults or len(events) == len(args.faults),
    }
    result["checks"] = checks
    result["ok"] = all(checks.values())
    i, p = result["ingest"], result["portal"]
    print(f"rows: sent {steps_sent}, stored {steps_stored}, duplicates {duplicates}, exact per rank {exact}"
          f"{'' if not synced else f' (after sync of {left_in_spool} spooled files)'}")  # fmt: skip
    print(f"ingest: {i['requests']} requests, p50 {i['p50_ms']} ms, p99 {i['p99_ms']} ms (steady p50 "
          f"{i['steady']['p50_ms']}, p99 {i['steady']['p99_ms']}); 5xx {i['5xx']} ({i['5xx_outside_postgres_restart']} "
          f"outside the PostgreSQL restart), no answer {i['no_answer']}")  # fmt: skip
    print(f"portal: {p['requests']} requests, p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms (steady p50 "
          f"{p['steady']['p50_ms']}, p99 {p['steady']['p99_ms']}); 5xx {p['5xx']} ({p['5xx_outside_postgres_restart']} "
          f"outside the PostgreSQL restart), no answer {p['no_answer']}")  # fmt: skip
    print(f"analysis lag at the end: {lag_s} s until every run was analysed (gauge {lag_gauge_s} s after the last "
          f"write, {dirty_left} runs dirty at the end); analyses run {result['analyses_run']}")  # fmt: skip
    for name, passed in checks.items():
        print(f"  [{'ok' if passed else 'FAIL'}] {name}")
    return result


if __name__ == "__main__":
    main()

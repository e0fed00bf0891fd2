"""A fleet simulation: how many concurrently live 8-rank runs one machine keeps up with.

Every rank is simulated cheaply (a coroutine; a few driver processes hold thousands of them) but
speaks the agent's real wire: a run's 8 ranks (one 8-GPU node) send one gzip'd
``POST /api/v1/runs/{id}/batches`` with every rank's columnar batch (packed columns, as the agent
sends them to this server; ``--per-rank``: each rank its own ``POST .../batch``) per flush
interval (the agent's default unless ``--flush``), at a phase of the interval drawn per run,
with the interval's steps (1-10 steps/s per rank, drawn once), a host and a GPU sample row a
second and, once a minute, the counters event;
runs are registered through ``POST /api/v1/runs``, spread over several projects. The server is
the real one: gunicorn (W sync workers) + a Celery worker (concurrency C, the real analysis,
the server's analysis debounce) + beat (the periodic sweep) + PostgreSQL + Redis, ingest rate
limit off. Portal readers (an organization admin's personal token, a person's pace) read the
overview, the leaderboards, the runs list and a run page meanwhile.

Measured in the window after a warm-up:
- ingest errors (any answer but 2xx, or no answer within 30 s) and the delay of each batch from
  the moment it was due to its answer (queueing included);
- analysis lag: for telemetry stored between two polls of the database (every ``--poll`` s),
  the time until an analysis that has seen it (RunAnalysis.analysed_seq >= the run's
  ingest_seq at the later poll) was written, counted from the earlier poll, so an upper bound
  (by at most one poll interval); telemetry never analysed before the drain ends counts with the
  lag it had by then;
- portal p50/p95 per request;
- CPU seconds of the web and worker processes and of PostgreSQL (all its processes on this machine),
  and os.getloadavg() (the machine is shared);
- steps sent vs stored.

A trial "keeps up" when ingest does (errors = 0, batch delay p95 < the flush interval), analysis
does (lag p95 <= 60 s) and the portal does (p95 <= 100 ms, no error). ``--runs`` lists trial
sizes (ascending; a setting stops once ingest or analysis falls behind), ``--grid`` lists
web-workers x concurrency settings:

    .venv/bin/python bench/fleet_sim.py --grid 1x1 2x1 2x2 4x2 --runs 25 50 100 200 --window 90
    .venv/bin/python bench/fleet_sim.py --grid 2x1 --runs 100 --window 600 --out bench/results/fleet_sim_long.json

``--portal-workers P`` serves the readers from a gunicorn of their own (P sync workers), as a
deployment that routes ingest and the portal to separate pools does; its CPU is reported apart.
``--nice N`` starts everything but the portal's gunicorn and readers at nice N (readers first,
docs/deployment.md); ``--statements`` records PostgreSQL's statements over the window
(pg_stat_statements, preloaded).

Writes bench/results/fleet_sim.json (after every trial).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing as mp
import os
import platform
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent"))
from bench.common import (  # noqa: E402
    free_port,
    manage,
    postgres_cpu_s,
    postgres_settings,
    server_setup,
    statements_reset,
    statements_top,
    wait_healthy,
)
from bench.fleet import RANKS_PER_RUN, Server, _cpu_s, _tree, debounce_set, pct  # noqa: E402

HOST = "127.0.0.1"
PROJECTS = 8
REQUEST_TIMEOUT_S = 30.0
TARGETS = {"lag_p95_s": 60.0, "portal_p95_ms": 100.0, "errors": 0}


# -- HTTP over asyncio (gunicorn's sync workers close every connection: one per request) ---------


async def http_request(port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        head = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{port}", f"Content-Length: {len(body)}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
    return status, rest.partition(b"\r\n\r\n")[2]


# -- simulated ranks (driver processes) ------------------------------------------------------------


def _packed(values: Any) -> dict[str, str]:
    code, dtype = ("f8", "<f8") if values.dtype.kind == "f" else ("i8", "<i8")
    return {code: base64.b64encode(values.astype(dtype).tobytes()).decode("ascii")}


class RankSim:
    """One rank's telemetry, produced at the rate a real rank would, as the agent encodes it."""

    def __init__(self, run_id: str, rank: int, token: str, rate: float, seed: int) -> None:
        self.run_id, self.rank, self.token = run_id, rank, token
        self.period_ns = int(1e9 / rate)
        self.rng = np.random.default_rng(seed)
        self.step = 0
        self.next_start_ns = time.time_ns()
        self.last_sample_s = int(time.time())
        self.next_counters = time.monotonic() + 60
        self.sent_steps = 0
        self.counters_field = True  # False: the counters travel as an event (what older agents send)

    @property
    def path(self) -> str:
        return f"/api/v1/runs/{self.run_id}/batch"

    def body(self, now_ns: int) -> bytes | None:
        from phantomhub_agent._batcher import gzip_bytes

        payload = self.payload(now_ns)
        return None if payload is None else gzip_bytes(payload)

    def payload(self, now_ns: int) -> bytes | None:
        """The rank's batch as JSON, before gzip; None when it has nothing yet (within a second of
        its start: the agent sends no empty batch, and the server refuses one)."""
        from phantomhub_agent._batcher import REQUIRED_SAMPLE_COLUMNS, compact_columns, pack_columns

        n = max(0, (now_ns - self.next_start_ns) // self.period_ns)
        p = self.period_ns
        starts = self.next_start_ns + p * np.arange(n, dtype=np.int64)
        r = self.rng.random(n)
        data = (p * (0.02 + 0.08 * r)).astype(np.int64)
        comm = (p * 0.05 * r).astype(np.int64)
        full = np.full(n, 1, dtype=np.int64)
        steps = {
            "step": np.arange(self.step, self.step + n, dtype=np.int64),
            "t_start_ns": starts,
            "dur_ns": full * p,
            "data_ns": data,
            "forward_ns": full * int(p * 0.3),
            "backward_ns": full * int(p * 0.45),
            "optimizer_ns": full * int(p * 0.05),
            "comm_ns": comm,
            "flops": np.full(n, 4e14),
            "tokens": full * 8192,
            "samples": full * 8,
            "mem_allocated": full * 30 * 2**30,
            "mem_reserved": full * 40 * 2**30,
            "mem_peak": full * 35 * 2**30,
            "alloc_retries": full * 0,
        }
        self.step += int(n)
        self.next_start_ns += int(n) * p
        self.sent_steps += int(n)
        now_s = now_ns // 10**9
        seconds = list(range(self.last_sample_s + 1, now_s + 1))
        self.last_sample_s = now_s
        k = len(seconds)
        u = self.rng.uniform
        samples = compact_columns(
            {
                "t_ns": [s * 10**9 for s in seconds] * 2,
                "device": [None] * k + [0] * k,
                "gpu_util_pct": [None] * k + [round(float(u(60, 100)), 1) for _ in seconds],
                "sm_clock_mhz": [None] * k + [1980.0] * k,
                "gpu_mem_used_bytes": [None] * k + [60 * 2**30] * k,
                "power_w": [None] * k + [round(float(u(300, 700)), 1) for _ in seconds],
                "cpu_process_pct": [round(float(u(80, 100)), 1) for _ in seconds] + [None] * k,
                "cpu_other_pct": [round(float(u(0, 5)), 1) for _ in seconds] + [None] * k,
                "cpu_steal_pct": [0.0] * k + [None] * k,
                "rss_bytes": [12 * 2**30] * k + [None] * k,
            },
            REQUIRED_SAMPLE_COLUMNS,
        )
        payload: dict[str, Any] = {"rank": self.rank, "host": f"node-{self.rank // 8}"}
        # Packed, as the agent sends them to a server that takes packed columns (_batcher.pack_column);
        # the sample columns with nulls (host rows' GPU readings, GPU rows' CPU ones) with their null
        # masks, as it sends them to one that says wire.packed_nulls.
        if n:
            payload["steps"] = {name: _packed(values) for name, values in steps.items()}
        if k:
            payload["samples"] = pack_columns(samples, nulls=True)
        if time.monotonic() >= self.next_counters:
            self.next_counters += 60
            counters = {"dropped_steps": 0, "sent_batches": self.step // 10, "sender_cpu_us": self.step * 40}
            if self.counters_field:  # as the agent sends them to a server that takes them in the batch
                payload["counters"] = counters
            else:
                event = {"id": uuid.uuid4().hex, "kind": "counters", "t_ns": now_ns // 1000 * 1000, "data": counters}
                payload["events"] = [event]
        if not any(part in payload for part in ("steps", "samples", "counters", "events")):
            return None
        return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


class NodeSim:
    """A node's ranks of one run, sent as the agent sends them by default (LOCAL_WORLD_SIZE known):
    local rank 0 puts every local rank's batch in one ``POST /api/v1/runs/{id}/batches``."""

    def __init__(self, ranks: list[RankSim]) -> None:
        self.ranks = ranks
        self.run_id, self.token = ranks[0].run_id, ranks[0].token

    @property
    def path(self) -> str:
        return f"/api/v1/runs/{self.run_id}/batches"

    @property
    def sent_steps(self) -> int:
        return sum(r.sent_steps for r in self.ranks)

    def body(self, now_ns: int) -> bytes | None:
        from phantomhub_agent._batcher import gzip_bytes

        payloads = [p for p in (r.payload(now_ns) for r in self.ranks) if p is not None]
        return gzip_bytes(b'{"batches":[' + b",".join(payloads) + b"]}") if payloads else None


async def _rank_loop(
    sim: RankSim | NodeSim, port: int, flush_s: float, stop_at: float, gate: asyncio.Semaphore, log: list[Any]
) -> None:
    due = time.time() + random.uniform(0, flush_s)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    while due <= stop_at:
        await asyncio.sleep(max(0.0, due - time.time()))
        status = 0
        async with gate:
            if time.time() > stop_at + flush_s:  # fallen this far behind: the trial has failed
                log.append((due, None, -1))
                due += flush_s
                continue
            body = sim.body(time.time_ns())
            if body is None:  # nothing recorded yet
                due += flush_s
                continue
            try:
                request = http_request(port, "POST", sim.path, {**headers, "Authorization": f"Bearer {sim.token}"}, body)
                status, _ = await asyncio.wait_for(request, REQUEST_TIMEOUT_S)
            except (TimeoutError, OSError):
                status = 0
        log.append((due, time.time(), status))
        due += flush_s


def driver_main(spec: dict[str, Any], out: Any) -> None:
    if spec["nice"]:  # the load generator stands for machines elsewhere: it yields to the server
        os.nice(spec["nice"])
    ranks = [RankSim(run_id, rank, token, rate, seed) for run_id, rank, token, rate, seed in spec["ranks"]]
    sims: list[RankSim | NodeSim] = list(ranks)
    if spec["node_batches"]:  # one sender per run's node (a run's ranks all go to one driver)
        by_run: dict[str, list[RankSim]] = {}
        for rank in ranks:
            by_run.setdefault(rank.run_id, []).append(rank)
        sims = [NodeSim(node_ranks) for node_ranks in by_run.values()]
    log: list[Any] = []
    cpu0 = time.process_time()

    async def run() -> None:
        gate = asyncio.Semaphore(spec["in_flight"])
        await asyncio.gather(*(_rank_loop(s, spec["port"], spec["flush_s"], spec["stop_at"], gate, log) for s in sims))

    asyncio.run(run())
    out.put({"log": log, "steps_sent": sum(s.sent_steps for s in sims), "cpu_s": time.process_time() - cpu0})


# -- portal readers --------------------------------------------------------------------------------


def readers_main(spec: dict[str, Any], out: Any) -> None:
    import http.client

    paths = [
        "/api/v1/portal/overview",
        "/api/v1/portal/leaderboards/teams",
        "/api/v1/portal/leaderboards/projects",
        "/api/v1/portal/leaderboards/runs",
        "/api/v1/portal/runs?page_size=20",
        "/api/v1/portal/runs/{run}",
    ]
    log: list[tuple[float, float, int, str]] = []
    lock = threading.Lock()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while time.time() < spec["stop_at"]:
            path = rng.choice(paths)
            name = path.split("?")[0].replace("{run}", "{id}")
            path = path.replace("{run}", rng.choice(spec["runs"]))
            t0 = time.perf_counter()
            status = 0
            try:
                conn = http.client.HTTPConnection(HOST, spec["port"], timeout=30)
                conn.request("GET", path, headers={"Authorization": f"Bearer {spec['token']}"})
                response = conn.getresponse()
                response.read()
                status = response.status
                conn.close()
            except (OSError, http.client.HTTPException):
                pass
            with lock:
                log.append((time.time(), time.perf_counter() - t0, status, name))
            time.sleep(rng.uniform(0.2, 1.0))  # a person's pace, about

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(spec["readers"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put({"log": log})


# -- analysis lag ----------------------------------------------------------------------------------


class LagWatch:
    """Polls each run's ingest_seq and its analysis's analysed_seq / analysed_at (see the docstring)."""

    def __init__(self, database_url: str, run_ids: list[str], poll_s: float) -> None:
        self.database_url, self.run_ids, self.poll_s = database_url, run_ids, poll_s
        # run -> list of (earlier poll time, seq seen at the later poll) not yet analysed
        self.pending: dict[str, list[tuple[float, int]]] = {r: [] for r in run_ids}
        self.last_seq: dict[str, int] = {r: 0 for r in run_ids}
        self.lags: list[tuple[float, float]] = []  # (earlier poll time, lag s)
        self.stop = threading.Event()
        self.prev_poll = time.time()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _poll(self, conn: Any) -> bool:
        now = time.time()
        rows = conn.execute(
            "SELECT r.id::text, r.ingest_seq, a.analysed_seq, extract(epoch FROM a.analysed_at) "
            "FROM telemetry_run r LEFT JOIN waste_runanalysis a ON a.run_id = r.id WHERE r.id = ANY(%s::uuid[])",
            [self.run_ids],
        ).fetchall()
        caught_up = True
        for run_id, seq, analysed_seq, analysed_at in rows:
            if seq > self.last_seq[run_id]:
                self.pending[run_id].append((self.prev_poll, int(seq)))
                self.last_seq[run_id] = int(seq)
            waiting = self.pending[run_id]
            while waiting and analysed_seq is not None and analysed_seq >= waiting[0][1]:
                t_prev, _ = waiting.pop(0)
                self.lags.append((t_prev, max(0.0, float(analysed_at) - t_prev)))
            caught_up = caught_up and not waiting
        self.prev_poll = now
        return caught_up

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self.stop.wait(self.poll_s):
                self._poll(conn)

    def drain(self, timeout_s: float) -> float:
        """Polls until every run's telemetry is analysed or `timeout_s`; seconds it took."""
        import psycopg

        self.stop.set()
        self.thread.join()
        t0 = time.time()
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while time.time() - t0 < timeout_s:
                time.sleep(self.poll_s)
                if self._poll(conn):
                    break
        end = time.time()
        for waiting in self.pending.values():  # never analysed: the lag it had by the end
            self.lags.extend((t_prev, end - t_prev) for t_prev, _ in waiting)
        return end - t0


# -- one trial -------------------------------------------------------------------------------------


def register_runs(port: int, runs: list[tuple[str, str]]) -> None:
    async def one(gate: asyncio.Semaphore, run_id: str, token: str) -> None:
        meta = {"id": run_id, "name": f"sim-{run_id[:8]}", "gpu_model": "H100-SXM", "gpu_count": RANKS_PER_RUN,
                "world_size": RANKS_PER_RUN, "nodes": 1, "dtype": "bf16", "pricing_tier": "on_demand"}  # fmt: skip
        async with gate:
            status, body = await http_request(
                port, "POST", "/api/v1/runs", {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
                orjson.dumps(meta),
            )  # fmt: skip
        if status not in (200, 201):
            raise RuntimeError(f"registering run {run_id}: {status} {body[:200]!r}")

    async def all_runs() -> None:
        gate = asyncio.Semaphore(8)
        await asyncio.gather(*(one(gate, run_id, token) for run_id, token in runs))

    asyncio.run(all_runs())


def stored_steps(database_url: str, run_ids: list[str]) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(n), 0) FROM telemetry_stepchunk WHERE run_id = ANY(%s::uuid[])", [run_ids]
        ).fetchone()
    return int(row[0]) if row else 0


class Portal:
    """A gunicorn of its own for the portal's readers (``--portal-workers``), as a deployment routes
    /api/v1/runs/*/batch and the portal to separate pools: reads never queue behind ingest."""

    def __init__(self, env: dict[str, str], workers: int, log_dir: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--bind", f"127.0.0.1:{self.port}", "--workers",
             str(workers), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=(log_dir / "portal.log").open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_healthy(self.port)

    def cpu(self) -> float:
        return _cpu_s(_tree(self.proc.pid))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def trial(
    args: argparse.Namespace, server: Server, portal_server: Portal | None, tokens: list[str], reader_token: str, n_runs: int
) -> dict[str, Any]:
    runs = [(str(uuid.uuid4()), tokens[i % len(tokens)]) for i in range(n_runs)]
    t_reg = time.time()
    register_runs(server.port, runs)
    reg_s = time.time() - t_reg
    rng = random.Random(n_runs)
    ranks = [
        (run_id, r, token, rng.uniform(1.0, 10.0), rng.randrange(2**31)) for run_id, token in runs for r in range(RANKS_PER_RUN)
    ]
    runs_index = {run_id: i for i, (run_id, _) in enumerate(runs)}
    t_start = time.time()
    w0_at, stop_at = t_start + args.warmup, t_start + args.warmup + args.window
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()
    drivers = []
    for k in range(args.drivers):
        mine = [rank for rank in ranks if runs_index[rank[0]] % args.drivers == k]  # a run's ranks in one driver
        spec = {"ranks": mine, "port": server.port, "flush_s": args.flush, "stop_at": stop_at,
                "in_flight": args.in_flight, "node_batches": not args.per_rank, "nice": args.nice}  # fmt: skip
        drivers.append(ctx.Process(target=driver_main, args=(spec, queue), daemon=True))
    rqueue: Any = ctx.Queue()
    reader_spec = {"port": portal_server.port if portal_server else server.port, "token": reader_token, "readers": args.readers,
                   "stop_at": stop_at, "runs": [r for r, _ in runs]}  # fmt: skip
    readers = ctx.Process(target=readers_main, args=(reader_spec, rqueue), daemon=True)
    for proc in [*drivers, readers]:
        proc.start()
    driver_ps = [psutil.Process(p.pid) for p in drivers]
    lag = LagWatch(args.database_url, [r for r, _ in runs], args.poll)
    lag.thread.start()
    time.sleep(max(0.0, w0_at - time.time()))
    if args.statements:
        statements_reset(args.database_url)
    cpu0, pg0, load0, w0 = server.cpu(), postgres_cpu_s(), os.getloadavg(), time.time()
    portal_cpu0 = portal_server.cpu() if portal_server else 0.0
    sys_cpu0 = psutil.cpu_times()
    time.sleep(max(0.0, stop_at - time.time()))
    cpu1, pg1, w1 = server.cpu(), postgres_cpu_s(), time.time()
    statements = statements_top(args.database_url) if args.statements else None
    portal_cpu = (portal_server.cpu() - portal_cpu0) if portal_server else 0.0
    sys_cpu1 = psutil.cpu_times()
    driver_cpu = 0.0
    for p in driver_ps:
        try:
            t = p.cpu_times()
            driver_cpu += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    results = [queue.get(timeout=2 * REQUEST_TIMEOUT_S + 2 * args.flush + 60) for _ in drivers]
    portal = rqueue.get(timeout=60)
    for proc in [*drivers, readers]:
        proc.join(10)
    drain_s = lag.drain(args.drain)
    load1 = os.getloadavg()
    alive = server.alive()

    logged = [row for res in results for row in res["log"] if row[0] >= w0]
    batches = [row for row in logged if row[2] != -1]
    not_sent = len(logged) - len(batches)
    errors = sum(1 for _, _, status in batches if not 200 <= status < 300)
    delays = [end - due for due, end, _ in batches]
    lags = [s for t_prev, s in lag.lags if t_prev >= w0 - args.poll]
    portal_in = [row for row in portal["log"] if row[0] >= w0]
    portal_ms = [row[1] * 1000 for row in portal_in]
    portal_errors = sum(1 for row in portal_in if row[2] != 200)
    by_page: dict[str, list[float]] = {}
    for row in portal_in:
        by_page.setdefault(row[3], []).append(row[1] * 1000)
    minutes = (w1 - w0) / 60
    gpus = n_runs * RANKS_PER_RUN
    busy = sum(getattr(sys_cpu1, f) - getattr(sys_cpu0, f) for f in ("user", "system", "nice", "irq", "softirq"))
    total = busy + (sys_cpu1.idle - sys_cpu0.idle) + (sys_cpu1.iowait - sys_cpu0.iowait)
    steps_sent = sum(res["steps_sent"] for res in results)
    case = {
        "runs": n_runs,
        "ranks": gpus,
        "registration_s": round(reg_s, 1),
        "window_s": round(w1 - w0, 1),
        "batches_in_window": len(batches),
        "batches_per_s": round(len(batches) / (w1 - w0), 1),
        "errors": errors,
        "not_sent_by_the_end": not_sent,
        "batch_delay_s": {
            "p50": round(pct(delays, 50) or 0, 3),
            "p95": round(pct(delays, 95) or 0, 3),
            "max": round(max(delays, default=0), 3),
        },
        "analysis_lag_s": {
            "p50": round(pct(lags, 50) or 0, 1),
            "p95": round(pct(lags, 95) or 0, 1),
            "max": round(max(lags, default=0), 1),
            "samples": len(lags),
        },
        "drain_s": round(drain_s, 1),
        "portal_ms": {
            "p50": round(pct(portal_ms, 50) or 0, 1),
            "p95": round(pct(portal_ms, 95) or 0, 1),
            "requests": len(portal_ms),
            "errors": portal_errors,
            "p95_by_page": {k: round(pct(v, 95) or 0, 1) for k, v in sorted(by_page.items())},
        },
        "cpu_ms_per_gpu_min": {
            "web": round((cpu1[0] - cpu0[0]) * 1000 / gpus / minutes, 2),
            "worker": round((cpu1[1] - cpu0[1]) * 1000 / gpus / minutes, 2),
        },
        "cpu_cores": {
            "web": round((cpu1[0] - cpu0[0]) / (w1 - w0), 2),
            "worker": round((cpu1[1] - cpu0[1]) / (w1 - w0), 2),
            "portal": round(portal_cpu / (w1 - w0), 2),
            "drivers": round(driver_cpu / (stop_at - t_start), 2),
            "postgres": round((pg1 - pg0) / (w1 - w0), 2),  # all its processes (bench.common.postgres_cpu_s)
            "machine_busy_pct": round(100 * busy / total, 1) if total else None,
        },
        "load_avg_1m": {"start": round(load0[0], 2), "end": round(load1[0], 2)},
        "steps": {"sent": steps_sent, "stored": stored_steps(args.database_url, [r for r, _ in runs])},
        "server_alive": alive,
    }
    case["ingest_kept_up"] = bool(
        alive and errors == 0 and not not_sent and batches and case["batch_delay_s"]["p95"] < args.flush
    )
    case["analysis_kept_up"] = bool(lags and case["analysis_lag_s"]["p95"] <= TARGETS["lag_p95_s"])
    case["portal_ok"] = bool(portal_errors == 0 and portal_ms and case["portal_ms"]["p95"] <= TARGETS["portal_p95_ms"])
    case["kept_up"] = case["ingest_kept_up"] and case["analysis_kept_up"] and case["portal_ok"]
    if statements is not None:
        case["postgres_statements"] = statements
    c = case
    print(
        f"  {n_runs:>5} runs ({gpus} ranks): {c['batches_per_s']} batches/s, errors {errors}, delay p95 "
        f"{c['batch_delay_s']['p95']} s; lag p50/p95 {c['analysis_lag_s']['p50']}/{c['analysis_lag_s']['p95']} s "
        f"(drain {c['drain_s']} s); portal p50/p95 {c['portal_ms']['p50']}/{c['portal_ms']['p95']} ms; cores web "
        f"{c['cpu_cores']['web']} worker {c['cpu_cores']['worker']} portal {c['cpu_cores']['portal']} "
        f"drivers {c['cpu_cores']['drivers']} PostgreSQL {c['cpu_cores']['postgres']}; load "
        f"{c['load_avg_1m']['start']}-{c['load_avg_1m']['end']}; steps {steps_sent} = {c['steps']['stored']}: "
        f"{'KEPT UP' if c['kept_up'] else 'fell behind'} (ingest {c['ingest_kept_up']}, analysis "
        f"{c['analysis_kept_up']}, portal {c['portal_ok']})",
        flush=True,
    )
    for st in statements or []:
        print(f"    {st['share']:6.1%} of PostgreSQL's statement time, {st['calls']} calls, {st['rows']} rows: "
              f"{st['query'][:90]}")  # fmt: skip
    return case


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    from phantomhub_agent._config import Settings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, nargs="+", default=[25, 50, 100, 200, 400, 1000])
    parser.add_argument("--grid", nargs="+", default=["2x1"], help="WEBxCONCURRENCY settings, e.g. 1x1 2x1 4x2")
    parser.add_argument("--window", type=float, default=90.0)
    parser.add_argument(
        "--warmup", type=float, default=None,
        help="s before the window (every rank's first batch, first analyses); default: the flush interval + 40 s",
    )  # fmt: skip
    parser.add_argument("--drain", type=float, default=90.0, help="s to wait after the load for analysis to catch up")
    parser.add_argument("--flush", type=float, default=Settings().flush_interval_s, help="s between a rank's batches")
    parser.add_argument("--drivers", type=int, default=2, help="processes the simulated ranks are spread over")
    parser.add_argument(
        "--per-rank", action="store_true",
        help="each rank its own POST .../batch (the agent without LOCAL_WORLD_SIZE, or before node batches); "
        "default: a run's 8 ranks in one POST .../batches, as the agent sends them from an 8-GPU node",
    )  # fmt: skip
    parser.add_argument("--in-flight", type=int, default=32, help="requests in flight per driver at most")
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument(
        "--portal-workers", type=int, default=0,
        help="a separate gunicorn with this many workers serves the portal's readers (0: they share ingest's)",
    )  # fmt: skip
    parser.add_argument(
        "--nice", type=int, default=0,
        help="nice value of the ingest gunicorn, the Celery worker and beat and the load generator; the portal's "
        "gunicorn and readers stay at 0 (docs/deployment.md, \"Shared cores: readers first\")",
    )  # fmt: skip
    parser.add_argument(
        "--statements", action="store_true",
        help="record PostgreSQL's statements over the window (pg_stat_statements, which must be preloaded): "
        "each one's share of the time the server spent executing them",
    )  # fmt: skip
    parser.add_argument("--poll", type=float, default=3.0)
    parser.add_argument("--keep-going", action="store_true", help="try every size even after a failure")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_fleet_sim")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    parser.add_argument("--work", default="/tmp/ph-fleet-sim")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fleet_sim.json"))
    args = parser.parse_args()
    grid = [tuple(int(x) for x in g.split("x")) for g in args.grid]
    if args.warmup is None:
        args.warmup = args.flush + 40.0

    env = server_setup(args.database_url, args.redis_url)
    tokens = [manage(env, "createtoken", "--team", f"team-{i % 3}", "--project", f"proj-{i}") for i in range(PROJECTS)]
    reader_token = manage(
        env, "shell", "-c",
        "from django.contrib.auth.models import User; from phantomhub.accounts.models import Profile; "
        "from phantomhub.accounts.services import personal_token_create; "
        "u = User.objects.create_user('sim-reader'); Profile.objects.create(user=u, is_org_admin=True); "
        "print(personal_token_create(user=u, name='sim').raw)",
    ).splitlines()[-1]  # fmt: skip
    debounce = debounce_set(env, None)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    settings_out: list[dict[str, Any]] = []
    for web, conc in grid:
        wire = "a request per rank" if args.per_rank else "a request per node"
        print(f"[{web} web workers x {conc} analysis workers] flush {args.flush:g} s, {wire}, debounce {debounce} s"
              + (f", all but the portal at nice {args.nice}" if args.nice else ""), flush=True)  # fmt: skip
        server = Server(env, web, work, concurrency=conc, beat=True, nice=args.nice)
        portal = Portal(env, args.portal_workers, work) if args.portal_workers else None
        entry: dict[str, Any] = {"web_workers": web, "celery_concurrency": conc, "portal_workers": args.portal_workers,
                                 "trials": []}  # fmt: skip
        settings_out.append(entry)
        try:
            for n in args.runs:
                case = trial(args, server, portal, tokens, reader_token, n)
                entry["trials"].append(case)
                kept = [t["runs"] for t in entry["trials"] if t["kept_up"]]
                entry["largest_kept_up_runs"] = max(kept) if kept else 0
                served = [t["runs"] for t in entry["trials"] if t["ingest_kept_up"] and t["analysis_kept_up"]]
                entry["largest_ingest_and_analysis_kept_up_runs"] = max(served) if served else 0
                write_result(args, debounce, settings_out)
                # Portal latency is the first to suffer from other load on a shared machine: the
                # search goes on while ingest and analysis keep up.
                if not (case["ingest_kept_up"] and case["analysis_kept_up"]) and not args.keep_going:
                    break
        finally:
            server.stop()
            if portal:
                portal.stop()
    print("largest fleet kept up (8-rank runs): all targets / ingest and analysis", flush=True)
    for entry in settings_out:
        print(
            f"  {entry['web_workers']} web x {entry['celery_concurrency']} worker: {entry.get('largest_kept_up_runs', 0)} / "
            f"{entry.get('largest_ingest_and_analysis_kept_up_runs', 0)} runs"
        )
    print(f"wrote {args.out}")


def write_result(args: argparse.Namespace, debounce: int, settings_out: list[dict[str, Any]]) -> None:
    result = {
        "bench": "fleet_sim",
        "command": " ".join(["bench/fleet_sim.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "flush_interval_s": args.flush,
        "wire": "one POST .../batch per rank" if args.per_rank else "one POST .../batches per run's node of 8 ranks",
        "analysis_debounce_s": debounce,
        "nice": {"ingest web, worker, beat, load generator": args.nice, "portal web, readers": 0},
        "ranks_per_run": RANKS_PER_RUN,
        "steps_per_s_per_rank": "uniform 1-10, drawn once per rank",
        "window_s": args.window,
        "warmup_s": args.warmup,
        "targets": TARGETS,
        "postgres": postgres_settings(args.database_url),
        "settings": settings_out,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

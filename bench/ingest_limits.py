"""What the largest ingest request the limits allow costs one web worker: memory and time.

A gunicorn server of one worker (production settings, PostgreSQL, Redis; the ingest rate limits
off, so the same batches can be sent again), started afresh for each shape, takes node batches
(``POST /api/v1/runs/{id}/batches``, gzip, a new run each time) of that shape ``--repeat`` times:

- ``agent_largest``: what the agent sends at most in one request: a node of 7 ranks whose rank
  batches are each just under the agent's batch_max_bytes (1 MiB), every step column packed
  (6,000 steps each), 60 samples each: ~7 MiB, the node sender's 6 MiB of peers' batches
  (phantomhub_agent._node.MAX_RAW_BYTES) and its own;
- ``arrays_at_inflated_cap``: plain JSON arrays (the densest objects per byte that a columnar
  batch makes in Python), all 15 step columns, ranks of 10,000 steps up to the node batch's
  inflated cap (PHANTOMHUB_MAX_NODE_BATCH_INFLATED_BYTES);
- ``rows_at_request_cap``: PHANTOMHUB_MAX_REQUEST_ROWS steps of the three columns the agent always
  sends (step, t_start_ns, dur_ns) as plain arrays, ranks of 10,000;
- ``over_inflated_cap`` and ``over_request_rows``: one rank more than each of the two above
  (refused with 413);
- ``issue_batch``: the request of the report (149 ranks x 10,000 steps, 4 columns as arrays,
  ~64 MiB inflated, ~7.4 MiB gzip), refused with 413.

Per shape: the answer, the bytes sent and inflated, the request's wall time p50 / p99 as the
client saw it, and the worker's peak RSS (the kernel's high-water mark, VmHWM, reset through
/proc/PID/clear_refs before each request) over its idle RSS (after three small warm-up batches)
and over its RSS just before the request, and its RSS half a second after the answer. The server
runs with the production gunicorn config (deploy/gunicorn.py). ``--old-limits`` sends the issue's
batch once more to a worker with the limits of before (64 MiB inflated, no rows bound).

    .venv/bin/python bench/ingest_limits.py [--repeat 5] [--old-limits]

Writes bench/results/ingest_limits.json.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent"))
from bench.common import free_port, manage, server_setup, wait_healthy  # noqa: E402
from phantomhub_agent._batcher import encode_json, gzip_bytes, pack_columns  # noqa: E402

MIB = 1024 * 1024
STEP_NS = 100_000_000
STEP_COLUMNS = ("step", "t_start_ns", "dur_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns",
                "flops", "tokens", "samples", "mem_allocated", "mem_reserved", "mem_peak", "alloc_retries")  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def steps(n: int, t0_ns: int, columns: tuple[str, ...]) -> dict[str, list[Any]]:
    """`n` plausible steps of 100 ms from t0_ns: each column in `columns`, values of their real width."""
    every = {
        "step": list(range(n)),
        "t_start_ns": [t0_ns + i * STEP_NS for i in range(n)],
        "dur_ns": [STEP_NS - 1_234 * (i % 97) for i in range(n)],
        "data_ns": [10_000_000 + 3_001 * (i % 89) for i in range(n)],
        "forward_ns": [30_000_000 + 1_777 * (i % 83) for i in range(n)],
        "backward_ns": [45_000_000 + 2_113 * (i % 79) for i in range(n)],
        "optimizer_ns": [5_000_000 + 911 * (i % 73) for i in range(n)],
        "comm_ns": [4_000_000 + 517 * (i % 71) for i in range(n)],
        "flops": [3.1415926535897932e15 + 7.0e9 * (i % 67) for i in range(n)],
        "tokens": [65_536] * n,
        "samples": [32] * n,
        "mem_allocated": [41_234_567_890 + 4_096 * (i % 61) for i in range(n)],
        "mem_reserved": [52_345_678_901 + 8_192 * (i % 59) for i in range(n)],
        "mem_peak": [61_234_567_890 + 4_096 * (i % 53) for i in range(n)],
        "alloc_retries": [i % 3 for i in range(n)],
    }
    return {name: every[name] for name in columns}


def samples(n: int, t0_ns: int) -> dict[str, list[Any]]:
    return {
        "t_ns": [t0_ns + i * 10**9 for i in range(n)],
        "device": [0] * n,
        "gpu_util_pct": [87.5 + (i % 7) for i in range(n)],
        "sm_clock_mhz": [1_980.0] * n,
        "gpu_mem_used_bytes": [71_000_000_000 + i for i in range(n)],
        "power_w": [612.25 + (i % 11) for i in range(n)],
    }


class Body(bytes):
    """A node batch's raw JSON, knowing its step rows."""

    rows: int


def node_body(ranks: list[dict[str, Any]]) -> Body:
    body = Body(b'{"batches":[' + b",".join(encode_json(rank) for rank in ranks) + b"]}")
    body.rows = sum(len(rank["steps"]["step"]) if isinstance(rank["steps"]["step"], list) else 0 for rank in ranks)
    return body


def shapes(t0_ns: int, limits: dict[str, int]) -> dict[str, Body]:
    """The raw (not yet gzipped) node batch of each shape."""
    bodies: dict[str, Body] = {}
    # The agent: packed columns (the server says so), rank batches just under 1 MiB each.
    agent = [{"rank": k, "host": f"node-{k // 8}", "steps": pack_columns(steps(6_000, t0_ns, STEP_COLUMNS)),
              "samples": pack_columns(samples(60, t0_ns))} for k in range(7)]  # fmt: skip
    bodies["agent_largest"] = node_body(agent)
    bodies["agent_largest"].rows = 7 * 6_000
    # Plain arrays, all columns, ranks of 10,000 until the inflated cap.
    one = encode_json({"rank": 0, "steps": steps(10_000, t0_ns, STEP_COLUMNS)})
    fit = (limits["inflated"] - 20) // (len(one) + 1)
    rest_rows = int(10_000 * ((limits["inflated"] - 20) - fit * (len(one) + 1)) / (len(one) + 1) * 0.98)
    arrays = [{"rank": k, "steps": steps(10_000, t0_ns, STEP_COLUMNS)} for k in range(fit)]
    if rest_rows > 0:
        arrays.append({"rank": fit, "steps": steps(rest_rows, t0_ns, STEP_COLUMNS)})
    bodies["arrays_at_inflated_cap"] = node_body(arrays)
    bodies["over_inflated_cap"] = node_body([*arrays, {"rank": len(arrays), "steps": steps(10_000, t0_ns, STEP_COLUMNS)}])
    # The rows bound in the densest rows the agent sends, as plain arrays (more objects than packed).
    dense = ("step", "t_start_ns", "dur_ns")
    full, part = divmod(limits["rows"], 10_000)
    rows = [{"rank": k, "steps": steps(10_000, t0_ns, dense)} for k in range(full)]
    if part:
        rows.append({"rank": full, "steps": steps(part, t0_ns, dense)})
    bodies["rows_at_request_cap"] = node_body(rows)
    bodies["over_request_rows"] = node_body([*rows, {"rank": len(rows), "steps": steps(1, t0_ns, dense)}])
    # The report's request: 149 ranks x 10,000 steps, ~64 MiB inflated.
    issue = [{"rank": k, "steps": steps(10_000, t0_ns, ("step", "t_start_ns", "dur_ns", "data_ns"))} for k in range(149)]
    bodies["issue_batch"] = node_body(issue)
    return bodies


@contextlib.contextmanager
def gunicorn_server(env: dict[str, str]) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The production gunicorn config (deploy/gunicorn.py: boot objects frozen, the URLconf
    imported at boot), one worker, on a free port: (port, the master process)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--config", "deploy/gunicorn.py",
         "--bind", f"127.0.0.1:{port}", "--workers", "1", "--log-level", "warning", "--access-logfile", "/dev/null"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        wait_healthy(port)
        yield port, server
    finally:
        server.terminate()
        server.wait(30)


class Worker:
    """The one gunicorn worker: its RSS, and its peak RSS since the last reset."""

    def __init__(self, master_pid: int) -> None:
        children = psutil.Process(master_pid).children()
        assert len(children) == 1, children
        self.pid = children[0].pid

    def _status(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    def rss(self) -> int:
        return self._status("VmRSS")

    def peak_reset(self) -> None:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS

    def peak(self) -> int:
        return self._status("VmHWM")


def post(port: int, path: str, body: bytes, token: str, gzipped: bool = True) -> tuple[int, bytes, float]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before all was read: the answer is there
        conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    answer = response.read()
    elapsed = time.perf_counter() - t
    conn.close()
    return response.status, answer, elapsed


def register(port: int, token: str, t0_ns: int) -> str:
    run_id = str(uuid.uuid4())
    start = datetime.fromtimestamp(t0_ns / 1e9 - 1, tz=UTC).isoformat()
    meta = {"id": run_id, "name": f"limits-{run_id[:8]}", "gpu_model": "H100-SXM", "gpu_count": 8, "allocation_start": start}
    status, answer, _ = post(port, "/api/v1/runs", json.dumps(meta).encode(), token, gzipped=False)
    assert status in (200, 201), answer[:300]
    return run_id


def measure(port: int, token: str, worker: Worker, idle: int, name: str, raw: Body, t0_ns: int, repeat: int) -> dict[str, Any]:
    sent = gzip_bytes(raw)
    times, peaks, over_idle, afters, statuses, answer = [], [], [], [], set(), b""
    for _ in range(repeat):
        run_id = register(port, token, t0_ns)
        time.sleep(0.2)
        before = worker.rss()
        worker.peak_reset()
        status, answer, elapsed = post(port, f"/api/v1/runs/{run_id}/batches", sent, token)
        peak = worker.peak()
        peaks.append(peak - before)
        over_idle.append(peak - idle)
        time.sleep(0.5)  # what it keeps once its answer is sent (and a large body released)
        afters.append(worker.rss())
        times.append(elapsed)
        statuses.add(status)
    case = {
        "shape": name,
        "status": sorted(statuses),
        "answer": answer[:200].decode(errors="replace") if max(statuses) >= 400 else None,
        "sent_bytes": len(sent),
        "inflated_bytes": len(raw),
        "step_rows": raw.rows,
        "requests": repeat,
        "wall_s": {"p50": round(pct(times, 50), 3), "p99": round(pct(times, 99), 3)},
        "peak_rss_over_before_mib": {"p50": round(pct(peaks, 50) / MIB, 1), "max": round(max(peaks) / MIB, 1)},
        "peak_rss_over_idle_mib": {"p50": round(pct(over_idle, 50) / MIB, 1), "max": round(max(over_idle) / MIB, 1)},
        "rss_after_mib": round(max(afters) / MIB, 1),
    }
    print(
        f"  {name:22} {','.join(map(str, case['status'])):7} sent {len(sent) / MIB:6.2f} MiB, inflated "
        f"{len(raw) / MIB:6.2f} MiB, {case['step_rows']:>9,} rows: wall p50 {case['wall_s']['p50']:6.3f} s "
        f"p99 {case['wall_s']['p99']:6.3f} s; peak RSS +{case['peak_rss_over_before_mib']['max']:6.1f} MiB over before, "
        f"+{case['peak_rss_over_idle_mib']['max']:6.1f} MiB over idle; after {case['rss_after_mib']:.0f} MiB",
        flush=True,
    )
    return case


def server_case(
    env: dict[str, str], token: str, label: str, limits: dict[str, int], repeat: int, names: list[str]
) -> dict[str, Any]:
    """Each shape against a worker of its own (started, warmed, its idle RSS read): what one shape
    costs is not mixed with what an earlier one left behind."""
    t0_ns = time.time_ns() - 3 * 86_400 * 10**9
    bodies = shapes(t0_ns, limits)
    cases = []
    print(f"[{label}] limits {limits}", flush=True)
    for name in names:
        with gunicorn_server(env) as (port, server):
            worker = Worker(server.pid)
            for _ in range(3):  # warm: imports, the first COPY's plan, the first gzip body
                run_id = register(port, token, t0_ns)
                warm = node_body([{"rank": k, "steps": steps(100, t0_ns, STEP_COLUMNS)} for k in range(4)])
                post(port, f"/api/v1/runs/{run_id}/batches", gzip_bytes(warm), token)
            idle = worker.rss()
            case = measure(port, token, worker, idle, name, bodies[name], t0_ns, repeat)
            cases.append({**case, "idle_rss_mib": round(idle / MIB, 1)})
    return {"limits": label, "settings": limits, "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="requests of each shape (each into a new run)")
    parser.add_argument("--old-limits", action="store_true", help="also against the limits of before (64 MiB, no rows bound)")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_limits")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest_limits.json"))
    args = parser.parse_args()

    env = server_setup(args.database_url, args.redis_url)
    env["PHANTOMHUB_INGEST_ROWS_RATE"] = "off"
    token = manage(env, "createtoken", "--team", "bench", "--project", "limits")
    now = {"inflated": 16 * MIB, "rows": 250_000}
    for name, key in (("PHANTOMHUB_MAX_NODE_BATCH_INFLATED_BYTES", "inflated"), ("PHANTOMHUB_MAX_REQUEST_ROWS", "rows")):
        if name in os.environ:
            now[key] = int(os.environ[name])
    names = [
        "agent_largest",
        "arrays_at_inflated_cap",
        "rows_at_request_cap",
        "over_inflated_cap",
        "over_request_rows",
        "issue_batch",
    ]
    runs = [server_case(env, token, "now", now, args.repeat, names)]
    if args.old_limits:
        old_env = {**env, "PHANTOMHUB_MAX_NODE_BATCH_INFLATED_BYTES": str(64 * MIB), "PHANTOMHUB_MAX_REQUEST_ROWS": "10000000"}
        runs.append(server_case(old_env, token, "before", {"inflated": 64 * MIB, "rows": 10_000_000}, 1, ["issue_batch"]))
    result = {
        "bench": "ingest_limits",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "what": "POST /api/v1/runs/{id}/batches (gzip) to one gunicorn worker a shape: wall time, the worker's peak RSS",
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

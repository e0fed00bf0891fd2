"""Ingest throughput: the HTTP API against a fair raw-COPY baseline, side by side in one run.

Both sides store the same 5,000-row step batches in telemetry_stepchunk of one database (a
batch is one packed chunk row: phantomhub/telemetry/storage.py), with the same number of
clients, each client owning one run, one batch per transaction, payloads built before the clock
starts:
- API: C client threads POST the JSON batches, encoded as the agent encodes them (packed int64 /
  float64 columns, gzip level 1; ``--columns arrays`` for plain JSON arrays, ``--no-gzip``) to
  /api/v1/runs/{id}/steps on gunicorn (W workers), one keep-alive connection each;
- raw COPY: C client threads, one psycopg connection each, send the same rows as prebuilt
  binary COPY payloads of the chunk row the API stores for the batch, COPY + COMMIT per batch:
  what the API does underneath, without HTTP, authentication, JSON, validation or the rank/run
  bookkeeping (the rank's lock and marks, the run's sequence);
- raw COPY of rows: the same, but each batch as 5,000 rows of a row-per-step table with the
  primary key (run_id, rank, step) (`bench_step_rows`, made by this bench: how PhantomHub stored
  steps before migration 0009), the baseline this bench used then.
Rounds rotate which side goes first (the table grows as it runs). Prints, per side, rows/s,
per-batch latency p50/p99, the cold first batch (on a fresh gunicorn, and on a fresh connection,
connecting included) and CPU seconds per million rows by process (gunicorn workers, PostgreSQL
backends, the bench's client threads); the ratio API rows/s ÷ COPY rows/s per round, and its
median; and the same ratio from CPU seconds per row, which other load on the machine disturbs
less. Gunicorn runs without a broker (no analysis is enqueued) and without a rate limit.
Writes bench/results/ingest.json.

    .venv/bin/python bench/ingest.py [--rounds 5] [--batches 60] [--batch 5000] [--clients 4] [--workers 4]
        [--no-gzip] [--columns arrays]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent"))
from bench.common import database_recreate, gunicorn_server, manage  # noqa: E402

T0_NS = 1_790_000_000 * 10**9
TARGET_RATIO = 0.6


def batch_columns(first: int, n: int, rng: np.random.Generator) -> dict[str, list[Any]]:
    dur = rng.integers(90_000_000, 130_000_000, n)
    return {
        "step": list(range(first, first + n)),
        "t_start_ns": (T0_NS + np.cumsum(dur) + first * 110_000_000).tolist(),
        "dur_ns": dur.tolist(),
        "data_ns": rng.integers(1_000_000, 30_000_000, n).tolist(),
        "forward_ns": rng.integers(25_000_000, 35_000_000, n).tolist(),
        "backward_ns": rng.integers(50_000_000, 70_000_000, n).tolist(),
        "optimizer_ns": rng.integers(4_000_000, 6_000_000, n).tolist(),
        "comm_ns": rng.integers(0, 8_000_000, n).tolist(),
        "flops": (rng.uniform(1.4, 1.6, n) * 1e15).tolist(),
        "tokens": [4096] * n,
        "samples": [8] * n,
        "mem_allocated": rng.integers(30 * 2**30, 32 * 2**30, n).tolist(),
        "mem_reserved": [36 * 2**30] * n,
        "mem_peak": rng.integers(33 * 2**30, 35 * 2**30, n).tolist(),
        "alloc_retries": [0] * n,
    }


def post_json(conn: http.client.HTTPConnection, path: str, body: bytes, token: str, gz: bool) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{path}: {response.status} {payload[:300]!r}")
    return dict(json.loads(payload))


def run_register(port: int, token: str, name: str) -> uuid.UUID:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        answer = post_json(conn, "/api/v1/runs", json.dumps({"id": str(uuid.uuid4()), "name": name}).encode(), token, False)
    finally:
        conn.close()
    return uuid.UUID(answer["id"])


@dataclass
class Cpu:
    """CPU seconds (user + system) of the processes in a role, between two snapshots."""

    pids: Callable[[], list[int]]
    _start: dict[int, float] = field(default_factory=dict)

    @staticmethod
    def _read(pids: list[int]) -> dict[int, float]:
        seen: dict[int, float] = {}
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            seen[pid] = times.user + times.system
        return seen

    def start(self) -> None:
        self._start = self._read(self.pids())

    def stop(self) -> float:
        end = self._read(sorted(set(self.pids()) | set(self._start)))
        return sum(end[pid] - self._start.get(pid, 0.0) for pid in end)


@dataclass
class Side:
    name: str
    seconds: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    first_batch_s: list[float] = field(default_factory=list)  # the first batch of each round
    cpu_s: dict[str, float] = field(default_factory=dict)

    def rate(self, i: int) -> float:
        return self.rows[i] / self.seconds[i]

    def summary(self) -> dict[str, Any]:
        lat = np.array(self.latencies_s) * 1000
        total_rows = sum(self.rows)
        return {
            "rows_per_s_per_round": [round(self.rate(i)) for i in range(len(self.rows))],
            "rows_per_s_median": round(statistics.median(self.rate(i) for i in range(len(self.rows)))),
            "batch_ms_p50": round(float(np.percentile(lat, 50)), 1),
            "batch_ms_p99": round(float(np.percentile(lat, 99)), 1),
            "batch_ms_max": round(float(lat.max()), 1),
            "first_batch_of_round_ms": [round(s * 1000, 1) for s in self.first_batch_s],
            "cpu_s_per_million_rows": {role: round(s / total_rows * 1e6, 2) for role, s in self.cpu_s.items()},
        }


def timed_clients(clients: int, work: Callable[[int, list[float]], None], cpus: dict[str, Cpu], side: Side, rows: int) -> None:
    """Run `work(client, latencies)` on `clients` threads at once; record time, latency and CPU."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def target(k: int) -> None:
        try:
            work(k, latencies[k])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(clients)]
    for cpu in cpus.values():
        cpu.start()
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for role, cpu in cpus.items():
        side.cpu_s[role] = side.cpu_s.get(role, 0.0) + cpu.stop()
    if errors:
        raise errors[0]
    side.seconds.append(elapsed)
    side.rows.append(rows)
    side.latencies_s += [s for per_client in latencies for s in per_client]
    side.first_batch_s.append(min(per_client[0] for per_client in latencies if per_client))


def backend_pids(database_url: str, dbname: str) -> Callable[[], list[int]]:
    def pids() -> list[int]:
        with psycopg.connect(database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'"
                " AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchall()
        return [int(row[0]) for row in rows]

    return pids


@contextmanager
def copy_connections(database_url: str, n: int) -> Iterator[list[psycopg.Connection[Any]]]:
    conns = [psycopg.connect(database_url) for _ in range(n)]
    try:
        yield conns
    finally:
        for conn in conns:
            conn.close()


COPY_SQL = "COPY telemetry_stepchunk (run_id, rank, seq, key_lo, key_hi, n, payload, run_week) FROM STDIN (FORMAT BINARY)"
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)


def chunk_copy_payload(run_id: uuid.UUID, seq: int, batch: Any, week: int) -> bytes:
    """A binary COPY of the one chunk row storing `batch` as rank 0's chunk `seq` of the run."""
    from phantomhub.telemetry.storage import STEPS, chunk_rows

    run, rank, seq, lo, hi, n, packed, week = chunk_rows(STEPS, run_id, 0, seq, batch, week)
    fields = [
        run.bytes, rank.to_bytes(4, "big"), seq.to_bytes(8, "big"), lo.to_bytes(8, "big", signed=True),
        hi.to_bytes(8, "big", signed=True), n.to_bytes(4, "big"), packed, week.to_bytes(4, "big"),
    ]  # fmt: skip
    row = len(fields).to_bytes(2, "big") + b"".join(len(f).to_bytes(4, "big") + f for f in fields)
    return _COPY_HEADER + row + b"\xff\xff"


ROWS_DDL = "CREATE TABLE bench_step_rows (run_id uuid NOT NULL, rank integer NOT NULL, {cols}, PRIMARY KEY (run_id, rank, step))"
ROWS_COPY_SQL = "COPY bench_step_rows (run_id, rank, {cols}) FROM STDIN (FORMAT BINARY)"


def rows_copy_payload(run_id: uuid.UUID, batch: Any, names: list[str], floats: frozenset[str]) -> bytes:
    """A binary COPY of the batch as a row per step (every value present: these batches have no nulls)."""
    assert not batch.nulls
    fields: list[tuple[str, str]] = [("nf", ">i2"), ("l_run", ">i4"), ("run", "V16"), ("l_rank", ">i4"), ("rank", ">i4")]
    for name in names:
        fields += [(f"l_{name}", ">i4"), (name, ">f8" if name in floats else ">i8")]
    out = np.zeros(batch.n, dtype=np.dtype(fields))
    out["nf"], out["l_run"], out["l_rank"] = 2 + len(names), 16, 4
    out["run"] = np.frombuffer(run_id.bytes, dtype="V16")[0]
    for name in names:
        out[f"l_{name}"] = 8
        out[name] = batch.values[name]
    return _COPY_HEADER + out.tobytes() + b"\xff\xff"


def copy_one(conn: psycopg.Connection[Any], sql: str, payload: bytes) -> None:
    with conn.cursor() as cur, cur.copy(sql) as copy:
        copy.write(payload)
    conn.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=60, help="batches per side per round")
    parser.add_argument("--batch", type=int, default=5_000, help="rows per batch")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients, on both sides")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=True, help="gzip bodies, as the agent does")
    parser.add_argument(
        "--columns",
        choices=("packed", "arrays"),
        default="packed",
        help="packed: base64 int64/float64 columns, as the agent sends them to a server that takes them; arrays: JSON arrays",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_ingest"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest.json"))
    args = parser.parse_args()
    if args.batches % args.clients:
        parser.error("--batches must be a multiple of --clients (each client sends the same number)")

    dbname = args.database_url.rsplit("/", 1)[1]
    database_recreate(args.database_url)
    env = {name: value for name, value in os.environ.items() if not name.startswith("PHANTOMHUB_")}
    env.update(
        {
            "PHANTOMHUB_DATABASE_URL": args.database_url,
            "PHANTOMHUB_SECRET_KEY": "b" * 48,
            "PHANTOMHUB_DEBUG": "0",
            "PHANTOMHUB_LOG_LEVEL": "WARNING",
            "PHANTOMHUB_SECURE_COOKIES": "0",
            "PHANTOMHUB_INGEST_RATE": "off",
        }
    )
    print(f"[setup] migrating {dbname} …", flush=True)
    manage(env, "migrate", "--no-input")
    token = manage(env, "createtoken", "--team", "bench", "--project", "ingest")

    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")
    import django

    django.setup()
    from phantomhub.telemetry.columns import STEP_COLUMNS, columns_validate
    from phantomhub.telemetry.partitions import run_week
    from phantomhub.telemetry.storage import STEPS

    rng = np.random.default_rng(7)
    print(f"[setup] building {args.batches} batches of {args.batch} rows …", flush=True)
    # Client k sends batches k, k + C, k + 2C, ... to a run of its own: steps 0, batch, 2 batch, ...
    columns = [batch_columns(i // args.clients * args.batch, args.batch, rng) for i in range(args.batches)]
    from phantomhub_agent._batcher import encode_json, gzip_bytes, pack_columns

    # Encoded as the agent encodes a batch (_batcher.fit_columns): JSON, packed columns, gzip level 1.
    wire = [pack_columns(c) if args.columns == "packed" else c for c in columns]
    raw_bodies = [encode_json({"rank": 0, "steps": w}) for w in wire]
    bodies = [gzip_bytes(raw) if args.gzip else raw for raw in raw_bodies]
    validated = [columns_validate(c, STEP_COLUMNS, where="steps", keys=("step",), max_rows=10**6) for c in columns]
    copy_sql = COPY_SQL
    row_names = list(STEPS.columns)
    row_cols = ", ".join(row_names)
    rows_sql = ROWS_COPY_SQL.format(cols=row_cols)
    with psycopg.connect(args.database_url) as conn:
        conn.execute(ROWS_DDL.format(cols=", ".join(f"{n} {'float8' if n in STEPS.floats else 'int8'}" for n in row_names)))
    rows_per_round = args.batches * args.batch

    api, copy, rows_side = Side("api"), Side("copy"), Side("copy_rows")
    pg_pids = backend_pids(args.database_url, dbname)
    bench_pid = os.getpid()
    cold: dict[str, float] = {}

    # Cold: the first steps batch a freshly started gunicorn receives (the health check came before it).
    with gunicorn_server(env, args.workers) as (port, _server):
        cold_run = run_register(port, token, "cold")
    with gunicorn_server(env, args.workers) as (port, _server):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        started = time.perf_counter()
        post_json(conn, f"/api/v1/runs/{cold_run}/steps", bodies[0], token, args.gzip)
        cold["api_ms"] = (time.perf_counter() - started) * 1000
        conn.close()
    with gunicorn_server(env, args.workers) as (port, server):
        cold_copy_run = run_register(port, token, "cold-copy")
        started = time.perf_counter()
        with psycopg.connect(args.database_url) as fresh:
            copy_one(fresh, copy_sql, chunk_copy_payload(cold_copy_run, 0, validated[0], run_week(cold_copy_run)))
        cold["copy_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        with psycopg.connect(args.database_url) as fresh:
            copy_one(fresh, rows_sql, rows_copy_payload(uuid.uuid4(), validated[0], row_names, STEPS.floats))
        cold["copy_rows_ms"] = (time.perf_counter() - started) * 1000

        workers = lambda: [child.pid for child in psutil.Process(server.pid).children()]  # noqa: E731
        api_cpus = {"gunicorn": Cpu(workers), "postgres": Cpu(pg_pids), "client": Cpu(lambda: [bench_pid])}
        copy_cpus = {"postgres": Cpu(pg_pids), "client": Cpu(lambda: [bench_pid])}

        with copy_connections(args.database_url, args.clients) as conns:
            # Warm every gunicorn worker and every COPY connection before timing.
            warm = run_register(port, token, "warm")
            http_conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=120) for _ in range(args.clients)]
            for i in range(args.workers * 3):
                post_json(http_conns[0], f"/api/v1/runs/{warm}/steps", bodies[i % len(bodies)], token, args.gzip)
                http_conns[0].close()  # a new connection may land on another worker
            for conn_k in conns:
                warm_copy = run_register(port, token, "warm")
                copy_one(conn_k, copy_sql, chunk_copy_payload(warm_copy, 0, validated[0], run_week(warm_copy)))
                copy_one(conn_k, rows_sql, rows_copy_payload(uuid.uuid4(), validated[0], row_names, STEPS.floats))

            for round_i in range(args.rounds):
                api_runs = [run_register(port, token, f"api-{round_i}-{k}") for k in range(args.clients)]
                copy_runs = [run_register(port, token, f"copy-{round_i}-{k}") for k in range(args.clients)]
                payloads = [
                    chunk_copy_payload(copy_runs[i % args.clients], i, batch, run_week(copy_runs[i % args.clients]))
                    for i, batch in enumerate(validated)
                ]
                row_runs = [uuid.uuid4() for _ in range(args.clients)]
                row_payloads = [
                    rows_copy_payload(row_runs[i % args.clients], batch, row_names, STEPS.floats)
                    for i, batch in enumerate(validated)
                ]

                def api_work(k: int, lat: list[float], api_runs: list[uuid.UUID] = api_runs) -> None:
                    path = f"/api/v1/runs/{api_runs[k]}/steps"
                    for body in bodies[k :: args.clients]:
                        t = time.perf_counter()
                        answer = post_json(http_conns[k], path, body, token, args.gzip)
                        lat.append(time.perf_counter() - t)
                        assert answer["accepted"] == args.batch, answer

                def copy_work(k: int, lat: list[float], payloads: list[bytes] = payloads) -> None:
                    for payload in payloads[k :: args.clients]:
                        t = time.perf_counter()
                        copy_one(conns[k], copy_sql, payload)
                        lat.append(time.perf_counter() - t)

                def rows_work(k: int, lat: list[float], payloads: list[bytes] = row_payloads) -> None:
                    for payload in payloads[k :: args.clients]:
                        t = time.perf_counter()
                        copy_one(conns[k], rows_sql, payload)
                        lat.append(time.perf_counter() - t)

                order = [("api", api_work, api_cpus, api), ("copy", copy_work, copy_cpus, copy),
                         ("copy_rows", rows_work, copy_cpus, rows_side)]  # fmt: skip
                shift = round_i % len(order)
                for _name, work, cpus, side in order[shift:] + order[:shift]:
                    timed_clients(args.clients, work, cpus, side, rows_per_round)
                print(
                    f"[round {round_i + 1}/{args.rounds}] API {api.rate(round_i):,.0f} rows/s   "
                    f"COPY chunk {copy.rate(round_i):,.0f} rows/s (ratio {api.rate(round_i) / copy.rate(round_i):.3f})   "
                    f"COPY rows {rows_side.rate(round_i):,.0f} rows/s (ratio {api.rate(round_i) / rows_side.rate(round_i):.3f})",
                    flush=True,
                )
            for conn_h in http_conns:
                conn_h.close()

    ratios = [api.rate(i) / copy.rate(i) for i in range(args.rounds)]
    row_ratios = [api.rate(i) / rows_side.rate(i) for i in range(args.rounds)]
    # What the ratio would be with both sides CPU-bound on the same cores: less sensitive to other
    # load on the machine than the rates themselves (which it slows unevenly).
    cpu_per_row = {side.name: sum(side.cpu_s.values()) / sum(side.rows) for side in (api, copy, rows_side)}
    stored = psycopg.connect(args.database_url).execute("SELECT coalesce(sum(n), 0) FROM telemetry_stepchunk").fetchone()
    result = {
        "benchmark": "ingest",
        "command": " ".join(["bench/ingest.py", *(a for a in sys.argv[1:] if a != args.out and not a.startswith("--out"))]),
        "rounds": args.rounds,
        "rows_per_side_per_round": rows_per_round,
        "batch_rows": args.batch,
        "clients": args.clients,
        "gunicorn_workers": args.workers,
        "gzip": args.gzip,
        "columns": args.columns,
        "body_kb_per_batch": round(sum(len(b) for b in bodies) / len(bodies) / 1000, 1),
        "json_kb_per_batch": round(sum(len(b) for b in raw_bodies) / len(raw_bodies) / 1000, 1),
        "api": api.summary(),
        "copy": copy.summary(),
        "copy_rows": rows_side.summary(),
        "cold_first_batch_ms": {side: round(ms, 1) for side, ms in cold.items()},
        "api_over_copy_per_round": [round(r, 3) for r in ratios],
        "api_over_copy_median": round(statistics.median(ratios), 3),
        "api_over_copy_by_cpu": round(cpu_per_row["copy"] / cpu_per_row["api"], 3),
        "api_over_copy_rows_per_round": [round(r, 3) for r in row_ratios],
        "api_over_copy_rows_median": round(statistics.median(row_ratios), 3),
        "api_over_copy_rows_by_cpu": round(cpu_per_row["copy_rows"] / cpu_per_row["api"], 3),
        "target_api_over_copy": TARGET_RATIO,
        "rows_stored_at_end": int(stored[0]) if stored else None,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg": os.getloadavg(),
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    s_api, s_copy, s_rows = result["api"], result["copy"], result["copy_rows"]
    print(f"\n{args.clients} clients on each side, {args.batch:,}-row batches, {args.rounds} rounds of {rows_per_round:,} rows")
    for label, s in (("API (gunicorn)", s_api), ("COPY of chunks", s_copy), ("COPY of rows", s_rows)):
        print(
            f"{label:16} {s['rows_per_s_median']:>9,} rows/s (median of rounds)   batch p50 {s['batch_ms_p50']} ms"
            f"  p99 {s['batch_ms_p99']} ms   CPU s per 1M rows {s['cpu_s_per_million_rows']}"
        )
    print(
        f"cold first batch: API {cold['api_ms']:.0f} ms, COPY of chunks {cold['copy_ms']:.0f} ms,"
        f" of rows {cold['copy_rows_ms']:.0f} ms (fresh connection)"
    )
    print(
        f"API / COPY: median {result['api_over_copy_median']:.3f}, rounds {result['api_over_copy_per_round']}"
        f"   (target ≥ {TARGET_RATIO})"
    )
    print(f"API / COPY by CPU seconds per row (all processes): {result['api_over_copy_by_cpu']:.3f}")
    print(
        f"API / COPY of rows: median {result['api_over_copy_rows_median']:.3f}, by CPU {result['api_over_copy_rows_by_cpu']:.3f},"
        f" rounds {result['api_over_copy_rows_per_round']}"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

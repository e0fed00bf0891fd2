"""What storing a 1,024-rank run's analysis costs PostgreSQL, by the column's type.

The big job's incremental pass (bench/big_job.py) waits on PostgreSQL for about 40 ms beyond its
own CPU; most of that is the write of the analysis. This takes the stored result of the big
job's run (about 1.1 MB of JSON with its per-rank figures, three quarters of it those figures,
which are stored apart in ``rank_figures`` since migration waste/0010) and its state's rank part
from the database bench/big_job.py leaves behind, and times one UPDATE + COMMIT of each,
alternating, into a scratch table whose columns are jsonb, json and bytea (lz4, as the real
columns). Wall time per statement, p50 / max over ``--repeat`` rounds.

    .venv/bin/python bench/big_job.py          # first: leaves the database behind
    .venv/bin/python bench/pg_result_write.py [--repeat 15]

Writes bench/results/pg_result_write.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import psycopg
from psycopg.types.json import Json, Jsonb

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_bigjob"),
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "pg_result_write.json"))
    args = parser.parse_args()
    with psycopg.connect(args.database_url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT a.result::text, a.rank_figures, s.ranks FROM waste_runanalysis a JOIN telemetry_run r ON r.id = a.run_id "
            "JOIN waste_runanalysisstate s ON s.run_id = a.run_id "
            "WHERE r.name LIKE 'bench-%%-ranks' ORDER BY r.gpu_count DESC LIMIT 1"
        )
        row = cur.fetchone()
        if row is None:
            raise SystemExit("no analysed big-job run in that database: run bench/big_job.py first")
        stored = json.loads(row[0])
        figures = stored.pop("ranks", None) if row[1] is None else json.loads(bytes(row[1]))
        result = json.dumps({**stored, "ranks": figures}).encode()  # the whole result, as stored before waste/0010
        without_ranks = json.dumps(stored).encode()
        rank_figures = json.dumps(figures).encode()
        state_ranks = bytes(row[2])
        cur.execute("DROP TABLE IF EXISTS bench_result_write")
        cur.execute("CREATE TABLE bench_result_write (id int PRIMARY KEY, j jsonb, t json, b bytea)")
        cur.execute(
            "ALTER TABLE bench_result_write ALTER j SET COMPRESSION lz4, ALTER t SET COMPRESSION lz4, ALTER b SET COMPRESSION lz4"
        )
        cur.execute("INSERT INTO bench_result_write VALUES (1, '{}', '{}', '')")
        conn.commit()
        cases = {
            "result as jsonb (before)": ("UPDATE bench_result_write SET j = %s WHERE id = 1", Jsonb(result, dumps=bytes)),
            "result without the per-rank figures, as jsonb (now)": (
                "UPDATE bench_result_write SET j = %s WHERE id = 1", Jsonb(without_ranks, dumps=bytes)),
            "the per-rank figures as bytea (now)": ("UPDATE bench_result_write SET b = %s WHERE id = 1", rank_figures),
            "result as json": ("UPDATE bench_result_write SET t = %s WHERE id = 1", Json(result, dumps=bytes)),
            "result as bytea": ("UPDATE bench_result_write SET b = %s WHERE id = 1", result),
            "the state's rank part as bytea (as stored now)": ("UPDATE bench_result_write SET b = %s WHERE id = 1", state_ranks),
            "nothing (a commit)": ("SELECT %s::int", 1),
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, (sql, param) in cases.items():
                t = time.perf_counter()
                cur.execute(sql, [param])
                conn.commit()
                times[name].append((time.perf_counter() - t) * 1000)
        cur.execute("DROP TABLE bench_result_write")
        conn.commit()
    sizes = {"result_bytes": len(result), "result_without_ranks_bytes": len(without_ranks), "state_ranks_bytes": len(state_ranks)}
    ranks_b = len(result) - len(without_ranks)
    print(f"result {len(result):,} B ({ranks_b:,} B of it per-rank figures); state ranks {len(state_ranks):,} B")
    out = {}
    for name, values in times.items():
        out[name] = {"p50_ms": round(statistics.median(values), 2), "max_ms": round(max(values), 2)}
        print(f"{name:48s} p50 {out[name]['p50_ms']:6.1f} ms, max {out[name]['max_ms']:6.1f} ms")
    Path(args.out).write_text(json.dumps({
        "bench": "pg_result_write", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                 "load_avg_1m": os.getloadavg()[0]},
        "repeat": args.repeat, "sizes": sizes, "update_and_commit_wall_ms": out}, indent=1) + "\n")  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Bytes per raw row, hot in PostgreSQL and archived in Parquet, and archive/export throughput.

A realistic generated run (8 ranks by default, 25,000 steps each = 200,000 step rows, and one
GPU plus one host sample per rank per second of training) goes in through the ingest service
(the same validation and storage as the API). Then:
- hot bytes per row: pg_total_relation_size (heap + TOAST + every index) of the partition that
  holds the run, after VACUUM, divided by its rows;
- archived bytes per row: the Parquet file's size / rows (run_archive, zstd);
- archive throughput (rows/s through run_archive) and export throughput (steps.parquet built
  from hot rows, and streamed from the archive).

The step timings are noisy the way measured ones are: ns-resolution Gaussian jitter around
per-stage means (dur 100 ms ± 2 ms, forward 30 ± 0.5, backward 45 ± 0.8, optimizer 5 ± 0.1,
comm 4 ± 1, data 5 ms + exp(1 ms)); memory varies by a few MiB; flops, tokens, samples are
constant per step. Noise is what costs bytes in Parquet: these are not flattering constants.

    PHANTOMHUB_DATABASE_URL=postgres://... python bench/storage.py [--ranks 8 --steps 25000]

It creates a database of its own on that server (and drops it at the end). Prints the figures
and writes bench/results/storage.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

T0_NS = 1_790_000_000 * 10**9


def synthetic_steps(*, rank: int, n: int, first: int = 0, seed: int = 0, t0_ns: int = T0_NS) -> dict[str, list[Any]]:
    """n steps of one rank, as the agent sends them (columnar lists)."""
    rng = np.random.default_rng([seed, rank, first])
    dur = (100e6 + rng.normal(0, 2e6, n)).astype(np.int64)
    start = t0_ns + first * 100_000_000 + np.concatenate([[0], np.cumsum(dur[:-1])])
    mib = 2**20
    return {
        "step": list(range(first, first + n)),
        "t_start_ns": start.tolist(),
        "dur_ns": dur.tolist(),
        "data_ns": (5e6 + rng.exponential(1e6, n)).astype(np.int64).tolist(),
        "forward_ns": (30e6 + rng.normal(0, 0.5e6, n)).astype(np.int64).tolist(),
        "backward_ns": (45e6 + rng.normal(0, 0.8e6, n)).astype(np.int64).tolist(),
        "optimizer_ns": (5e6 + rng.normal(0, 0.1e6, n)).astype(np.int64).tolist(),
        "comm_ns": (4e6 + rng.normal(0, 1e6, n)).clip(0).astype(np.int64).tolist(),
        "flops": [1.5e15] * n,
        "tokens": [4096] * n,
        "samples": [8] * n,
        "mem_allocated": (30 * 2**30 + rng.integers(0, 4, n) * mib).tolist(),
        "mem_reserved": [36 * 2**30] * n,
        "mem_peak": (34 * 2**30 + rng.integers(0, 4, n) * mib).tolist(),
        "alloc_retries": (rng.random(n) < 0.001).astype(np.int64).tolist(),
    }


def synthetic_samples(*, rank: int, seconds: int, seed: int = 0, t0_ns: int = T0_NS) -> list[dict[str, list[Any]]]:
    """One GPU row (device = rank) and one host row (device -1) per second, as two batches."""
    rng = np.random.default_rng([seed, rank, 7])
    t = (t0_ns + np.arange(seconds) * 10**9 + rng.integers(0, 10**6, seconds)).tolist()
    gpu = {
        "t_ns": t,
        "device": [rank] * seconds,
        "gpu_util_pct": rng.integers(80, 101, seconds).astype(float).tolist(),
        "sm_clock_mhz": rng.choice([1755.0, 1770.0, 1785.0, 1980.0], seconds).tolist(),
        "gpu_mem_used_bytes": (60 * 2**30 + rng.integers(0, 8, seconds) * 2**20).tolist(),
        "power_w": np.round(550 + rng.normal(0, 40, seconds), 1).tolist(),
    }
    host = {
        "t_ns": t,
        "device": [-1] * seconds,
        "cpu_process_pct": np.round(100 + rng.normal(0, 15, seconds), 1).clip(0).tolist(),
        "cpu_other_pct": np.round(rng.exponential(3, seconds), 1).clip(0, 100).tolist(),
        "cpu_steal_pct": np.round(rng.exponential(0.2, seconds), 1).clip(0, 100).tolist(),
        "rss_bytes": (8 * 2**30 + rng.integers(0, 64, seconds) * 2**20).tolist(),
    }
    return [gpu, host]


def ingest_run(run: Any, *, ranks: int, steps: int, batch: int = 5_000, seed: int = 0) -> tuple[int, int]:
    """Send a generated run through the ingest service: (step rows, sample rows)."""
    from phantomhub.telemetry import services

    step_rows = sample_rows = 0
    for rank in range(ranks):
        for first in range(0, steps, batch):
            body = synthetic_steps(rank=rank, n=min(batch, steps - first), first=first, seed=seed)
            step_rows += services.steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=body).accepted
        seconds = steps // 10  # 100 ms steps: one sample row per device per second
        for first in range(0, seconds, batch):
            for part in synthetic_samples(rank=rank, seconds=seconds, seed=seed):
                chunk = {k: v[first : first + batch] for k, v in part.items()}
                sample_rows += services.samples_ingest(run=run, rank=rank, host=f"node-{rank // 8}", samples=chunk).accepted
    return step_rows, sample_rows


def _setup_django(database_url: str, archive_url: str) -> None:
    os.environ["PHANTOMHUB_DATABASE_URL"] = database_url
    os.environ["PHANTOMHUB_ARCHIVE_URL"] = archive_url
    os.environ.setdefault("PHANTOMHUB_DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _hot_bytes(run: Any) -> dict[str, Any]:
    from django.db import connection

    from phantomhub.telemetry.partitions import partition_name

    out: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for table, key in (("telemetry_stepchunk", "step"), ("telemetry_samplechunk", "sample")):
            part = partition_name(table, run.storage_week)
            cursor.execute(f"VACUUM ANALYZE {part}")
            sizes = f"pg_relation_size('{part}'), pg_indexes_size('{part}'), pg_total_relation_size('{part}')"
            cursor.execute(f"SELECT {sizes}, coalesce(sum(n), 0), count(*) FROM {part}")
            heap, indexes, total, rows, chunks = cursor.fetchone()
            out[key] = {
                "partition": part,
                "rows": rows,
                "chunks": chunks,
                "heap_bytes": heap,
                "index_bytes": indexes,
                "total_bytes": total,
                "bytes_per_row": round(total / rows, 1) if rows else None,
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=25_000, help="steps per rank")
    parser.add_argument("--database-url", default=os.environ.get("PHANTOMHUB_DATABASE_URL"))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "storage.json"))
    parser.add_argument("--keep-archive", action="store_true", help="keep the archive directory (to read it in a notebook)")
    args = parser.parse_args()
    if not args.database_url or not args.database_url.startswith("postgres"):
        sys.exit("bench/storage.py measures PostgreSQL: set PHANTOMHUB_DATABASE_URL (or --database-url) to postgres://...")
    archive_dir = tempfile.mkdtemp(prefix="phantomhub-bench-archive-")
    # A database of its own, dropped at the end: bytes per row are measured on partitions that
    # hold this run alone (another run's deleted rows would count as this one's).
    scratch_url = _scratch_database(args.database_url)
    try:
        _setup_django(scratch_url, archive_dir)
        _measure(args)
    finally:
        from django.db import connections

        connections.close_all()
        _scratch_database(args.database_url, drop=scratch_url)
        if args.keep_archive:
            print(f"archive kept in {archive_dir}")
        else:
            shutil.rmtree(archive_dir, ignore_errors=True)


def _scratch_database(url: str, drop: str | None = None) -> str:
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    name = urlsplit(drop).path.lstrip("/") if drop else f"phantomhub_bench_storage_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)" if drop else f"CREATE DATABASE {name}")
    return urlunsplit(parts._replace(path=f"/{name}"))


def _measure(args: argparse.Namespace) -> None:

    import uuid

    from django.test import RequestFactory
    from django.utils import timezone

    from phantomhub.accounts.services import project_token_for_slugs
    from phantomhub.telemetry.archive import run_archive
    from phantomhub.telemetry.exports import steps_parquet_chunks
    from phantomhub.telemetry.models import Run, RunArchive, RunStatus

    del RequestFactory
    project = project_token_for_slugs(team_slug="bench", project_slug="bench-storage").token.project
    assert project is not None
    now = timezone.now()
    run = Run.objects.create(
        id=uuid.uuid4(),
        project=project,
        name="bench-storage",
        gpu_model="H100-SXM",
        gpu_count=args.ranks,
        world_size=args.ranks,
        allocation_start=now,
        started_at=now,
        last_seen_at=now,
    )
    t0 = time.perf_counter()
    step_rows, sample_rows = ingest_run(run, ranks=args.ranks, steps=args.steps)
    ingest_s = time.perf_counter() - t0
    hot = _hot_bytes(run)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.FINISHED, finished_at=now)
    run.refresh_from_db()  # its ingest_seq: an archive at the current one is streamed as stored

    def timed(fn: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        value = fn()
        return value, time.perf_counter() - start

    export_hot, export_hot_s = timed(lambda: sum(len(c) for c in steps_parquet_chunks(run)))
    archived, archive_s = timed(lambda: run_archive(run_id=run.pk))
    RunArchive.objects.filter(pk=run.pk).update(pruned_at=now)  # read as the archive from here on
    export_archive, export_archive_s = timed(lambda: sum(len(c) for c in steps_parquet_chunks(run)))
    RunArchive.objects.filter(pk=run.pk).update(pruned_at=None)
    result = {
        "bench": "storage",
        "ranks": args.ranks,
        "steps_per_rank": args.steps,
        "step_rows": step_rows,
        "sample_rows": sample_rows,
        "ingest_rows_per_s": round((step_rows + sample_rows) / ingest_s),
        "hot": hot,
        "archived": {
            "step": {
                "rows": archived.step_rows,
                "bytes": archived.steps_bytes,
                "bytes_per_row": round(archived.steps_bytes / archived.step_rows, 1),
            },
            "sample": {
                "rows": archived.sample_rows,
                "bytes": archived.samples_bytes,
                "bytes_per_row": round(archived.samples_bytes / archived.sample_rows, 1),
            },
        },
        "archive_rows_per_s": round((archived.step_rows + archived.sample_rows) / archive_s),
        "export_from_hot_rows_per_s": round(step_rows / export_hot_s),
        "export_from_hot_bytes": export_hot,
        "export_from_archive_rows_per_s": round(step_rows / export_archive_s),
        "export_from_archive_bytes": export_archive,
    }
    print(f"step rows {step_rows:,}, sample rows {sample_rows:,} ({args.ranks} ranks x {args.steps:,} steps)")
    for key in ("step", "sample"):
        h, a = hot[key], result["archived"][key]
        print(
            f"{key:>6}: hot {h['bytes_per_row']} B/row (heap {h['heap_bytes']:,} + indexes {h['index_bytes']:,}), "
            f"archived {a['bytes_per_row']} B/row ({a['bytes']:,} bytes)"
        )
    print(
        f"archive {result['archive_rows_per_s']:,} rows/s; steps.parquet export "
        f"{result['export_from_hot_rows_per_s']:,} rows/s from hot rows, "
        f"{result['export_from_archive_rows_per_s']:,} rows/s from the archive"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

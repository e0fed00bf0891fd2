"""Portal read latency with a big store: 10,000 runs and 10,000,000 step rows in PostgreSQL.

Setup (not timed): raw steps by binary COPY; 20 runs analysed for real, their analyses copied to
the other runs with per-run figures (the derived tables then have production-like sizes); daily
rollups rebuilt. Timed: the leaderboard, runs-list and run-detail endpoints over HTTP through
gunicorn, authenticated with a personal token, each N times; p50/p95 printed and written to
bench/results/portal.json. With --browser, also the leaderboard page's render time in headless
Chromium (needs frontend/dist and Debian's chromium).

With --in-process, the pages the fleet simulation's readers request (bench/fleet_sim.py, "portal
readers") are served through Django's full request path with django.test.Client instead (no
gunicorn, no network): per endpoint the first (cold) request, p50 and p99 of wall time and of the
process's CPU time, and SQL statements per request; written to bench/results/portal_inprocess.json.
--ranks 8 --raw-steps templates builds the data a fleet of 8-rank runs leaves (each analysis the
size of an 8-rank result) without the 10M raw rows only the 20 real analyses need.

    .venv/bin/python bench/portal.py [--runs 10000] [--rows-per-run 1000] [--requests 200] [--browser]
    .venv/bin/python bench/portal.py --in-process --runs 1000 --ranks 8 --raw-steps templates --rows-per-run 3000 \\
        [--against 518f06a] [--profile run_detail]

--against REV serves every page also with the portal's selectors and run page as they were at git
revision REV, requests alternating in the same process, and writes both.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import http.client
import io
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import database_recreate, gunicorn  # noqa: E402

NS = 10**9


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rows-per-run", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--browser", action="store_true")
    parser.add_argument("--ranks", type=int, default=1, help="ranks per run (the fleet simulation's runs have 8)")
    parser.add_argument(
        "--raw-steps", choices=["all", "templates"], default="all",
        help="raw step rows for every run, or only for the 20 analysed for real (the portal reads none)",
    )  # fmt: skip
    parser.add_argument("--in-process", action="store_true", help="django.test.Client: CPU and SQL per request")
    parser.add_argument("--profile", default="", help="with --in-process: cProfile this endpoint (process time)")
    parser.add_argument(
        "--against", default="", help="with --in-process: also the portal's selectors and run page at this git revision, A/B"
    )
    parser.add_argument("--keep", action="store_true", help="reuse the database of a previous run if it is complete")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PHANTOMHUB_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub_bench_portal"),
    )
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    args.out = args.out or str(ROOT / "bench" / "results" / ("portal_inprocess.json" if args.in_process else "portal.json"))
    env = {
        **os.environ,
        "PHANTOMHUB_DATABASE_URL": args.database_url,
        "PHANTOMHUB_SECRET_KEY": "p" * 48,
        "PHANTOMHUB_DEBUG": "0",
        "PHANTOMHUB_LOG_LEVEL": "WARNING",
        "PHANTOMHUB_SECURE_COOKIES": "0",
    }
    os.environ.update(env)
    os.environ["DJANGO_SETTINGS_MODULE"] = "phantomhub.settings"

    reuse = False
    if args.keep:
        try:
            with psycopg.connect(args.database_url) as conn:
                reuse = conn.execute("SELECT count(*) FROM waste_runanalysis").fetchone()[0] >= args.runs  # type: ignore[index]
        except psycopg.Error:
            reuse = False
    if not reuse:
        database_recreate(args.database_url)
        subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    token = setup(args) if not reuse else personal_token()
    if args.in_process:
        in_process(token, args)
        return
    with gunicorn(env, args.workers) as port:
        results = measure(port, token, args)
        if args.browser:
            results["leaderboard_page_render_s"] = browser_render(port)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(n), 0) FROM telemetry_stepchunk")
        steps = cursor.fetchone()[0]  # type: ignore[index]
        cursor.execute("SELECT count(*) FROM telemetry_run")
        runs = cursor.fetchone()[0]  # type: ignore[index]
    out = {
        "benchmark": "portal",
        "runs": runs,
        "step_rows": steps,
        "requests_per_endpoint": args.requests,
        "gunicorn_workers": args.workers,
        "endpoints": results["endpoints"],
        "leaderboard_page_render_s": results.get("leaderboard_page_render_s"),
        "targets": {"p95_ms": 100, "leaderboard_page_render_s": 1.0},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"store: {runs:,} runs, {steps:,} step rows")
    for name, figures in results["endpoints"].items():
        print(f"{name:<28} p50 {figures['p50_ms']:7.1f} ms   p95 {figures['p95_ms']:7.1f} ms   (target p95 ≤ 100 ms)")
    if out["leaderboard_page_render_s"] is not None:
        print(f"leaderboard page render in headless Chromium: {out['leaderboard_page_render_s']:.3f} s (target ≤ 1 s)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


def personal_token() -> str:
    from django.contrib.auth.models import User

    from phantomhub.accounts.models import Profile
    from phantomhub.accounts.services import personal_token_create

    user, _ = User.objects.get_or_create(username="bench-finance")
    Profile.objects.get_or_create(user=user, defaults={"is_finance": True})
    return personal_token_create(user=user, name="bench").raw


def setup(args: argparse.Namespace) -> str:
    from django.db import connection, transaction

    from phantomhub.accounts.services import project_get_or_create, team_get_or_create
    from phantomhub.demo.fleet import ORG
    from phantomhub.telemetry.columns import STEP_COLUMNS, columns_validate
    from phantomhub.telemetry.models import Run, RunRank
    from phantomhub.telemetry.storage import STEPS, chunk_rows
    from phantomhub.waste.models import RunAnalysis, RunDay
    from phantomhub.waste.rollups import rollups_rebuild
    from phantomhub.waste.services import run_analyze

    rng = np.random.default_rng(3)
    projects = []
    for team_slug, items in ORG:
        team = team_get_or_create(slug=team_slug)
        projects += [project_get_or_create(team=team, slug=slug) for slug, *_ in items]
    now = datetime.now(UTC).replace(microsecond=0)
    n = args.rows_per_run
    print(f"[setup] {args.runs:,} runs × {n:,} steps, a chunk a rank …", flush=True)
    started = time.perf_counter()
    runs = []
    for i in range(args.runs):
        start = now - timedelta(hours=float(rng.uniform(1, 90 * 24)))
        runs.append(
            Run(
                id=uuid.uuid4(),
                project=projects[i % len(projects)],
                name=f"bench-{i:05d}",
                tags=["bench"],
                status="finished",
                gpu_model="H100-SXM",
                gpu_count=8,
                world_size=args.ranks,
                dtype="bf16",
                allocation_start=start - timedelta(minutes=2),
                started_at=start,
                last_seen_at=start,
                finished_at=start + timedelta(seconds=n * 2),
                ingest_seq=1,
            )
        )
    Run.objects.bulk_create(runs, batch_size=2000)
    RunRank.objects.bulk_create(
        [
            RunRank(run=r, rank=k, host=f"node-{k // 8}", step_rows=n, last_step=n - 1, chunk_seq=2)
            for r in runs
            for k in range(args.ranks)
        ],
        batch_size=2000,
    )
    dur = rng.integers(1_800_000_000, 2_200_000_000, n)
    base = {
        "step": list(range(n)),
        "dur_ns": dur.tolist(),
        "data_ns": rng.integers(10**8, 5 * 10**8, n).tolist(),
        "forward_ns": [4 * 10**8] * n,
        "backward_ns": [8 * 10**8] * n,
        "optimizer_ns": [10**8] * n,
        "flops": [0.35 * 989.4e12 * 8 * 1.2] * n,
    }
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    insert = "INSERT INTO telemetry_stepchunk (run_id, rank, seq, key_lo, key_hi, n, payload) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    with raw.cursor() as cur:
        for i, run in enumerate(runs[:20] if args.raw_steps == "templates" else runs):
            t0 = int(run.started_at.timestamp()) * NS
            for rank in range(args.ranks):
                # Ranks a little apart in speed, so the analysis finds stragglers as in a real job.
                skew = dur + rank * 1_000_000
                starts = t0 + np.concatenate([[0], np.cumsum(skew[:-1])])
                body = {**base, "dur_ns": skew.tolist(), "t_start_ns": starts.tolist()}
                batch = columns_validate(body, STEP_COLUMNS, where="steps", keys=("step",), max_rows=10**7)
                cur.execute(insert, chunk_rows(STEPS, run.pk, rank, 0, batch, None))
            if i % 500 == 499:
                raw.commit()
                print(f"  {i + 1:,} runs, {(i + 1) * n:,} rows ({time.perf_counter() - started:.0f} s)", flush=True)
    raw.commit()
    print("[setup] analysing 20 runs for real, copying their analyses to the rest …", flush=True)
    templates = [run_analyze(run_id=r.pk) for r in runs[:20]]
    rows, days = [], []
    for i, run in enumerate(runs[20:], start=20):
        t = templates[i % 20]
        assert t is not None
        scale = float(rng.uniform(0.3, 3.0))
        rows.append(
            RunAnalysis(
                run=run,
                project=run.project,
                team_id=run.project.team_id,
                analysed_seq=1,
                analysed_at=now,
                complete=True,
                started_at=run.started_at,
                gpu_key="H100-SXM",
                gpu_hours=t.gpu_hours * scale,
                cost_usd=round(t.cost_usd * type(t.cost_usd)(scale), 2),
                waste_usd=round(t.waste_usd * type(t.cost_usd)(scale), 2),
                recoverable_usd=round(t.recoverable_usd * type(t.cost_usd)(scale), 2),
                waste_share=t.waste_share,
                mfu=t.mfu,
                # Copied in SQL below: a stored result can hold integers past 64 bits (a rank's FLOPs
                # as a JSON integer), which orjson, the field's writer, refuses to write back.
                result={},
                recommendations=[],
            )
        )
        for d in RunDay.objects.filter(run_id=t.run_id):
            shift = d.day - runs[i % 20].started_at.date()
            days.append(
                RunDay(
                    run=run,
                    day=run.started_at.date() + shift,
                    project=run.project,
                    team_id=run.project.team_id,
                    gpu_key=d.gpu_key,
                    gpu_seconds=d.gpu_seconds * scale,
                    cost_usd=round(d.cost_usd * type(d.cost_usd)(scale), 2),
                    categories_usd={k: round(v * scale, 2) for k, v in d.categories_usd.items()},
                    recoverable_usd=round(d.recoverable_usd * type(d.cost_usd)(scale), 2),
                    mfu_gpu_seconds=d.mfu_gpu_seconds * scale,
                    mfu_known_gpu_seconds=d.mfu_known_gpu_seconds * scale,
                )
            )
    with transaction.atomic():
        RunAnalysis.objects.bulk_create(rows, batch_size=500)
        RunDay.objects.bulk_create(days, batch_size=2000)
        with connection.cursor() as cursor:
            for j, t in enumerate(templates):
                assert t is not None
                copies = [str(r.pk) for i, r in enumerate(runs[20:], start=20) if i % 20 == j]
                cursor.execute(
                    "UPDATE waste_runanalysis a SET result = t.result, recommendations = t.recommendations "
                    "FROM waste_runanalysis t WHERE t.run_id = %s AND a.run_id = ANY(%s::uuid[])",
                    [t.run_id, copies],
                )
    rollups_rebuild(days=set(RunDay.objects.values_list("day", flat=True)))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"[setup] done in {time.perf_counter() - started:.0f} s", flush=True)
    return personal_token()


def measure(port: int, token: str, args: argparse.Namespace) -> dict[str, Any]:
    from phantomhub.telemetry.models import Run

    run_ids = [str(r) for r in Run.objects.values_list("id", flat=True)[:500]]
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/api/v1/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.2)
    headers = {"Authorization": f"Bearer {token}"}
    endpoints = {
        "leaderboard_teams_30d": lambda i: "/api/v1/portal/leaderboards/teams?period=30d",
        "leaderboard_projects_90d": lambda i: "/api/v1/portal/leaderboards/projects?period=90d",
        "leaderboard_runs_30d": lambda i: "/api/v1/portal/leaderboards/runs?period=30d",
        "runs_list": lambda i: "/api/v1/portal/runs?sort=-recoverable_usd&page_size=50",
        "runs_list_filtered": lambda i: "/api/v1/portal/runs?team=nlp&status=finished&sort=-cost_usd&page=2",
        "run_detail": lambda i: f"/api/v1/portal/runs/{run_ids[i % len(run_ids)]}",
    }
    out: dict[str, Any] = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for name, path in endpoints.items():
        for i in range(5):  # warm-up
            conn.request("GET", path(i), headers=headers)
            conn.getresponse().read()
        times = []
        for i in range(args.requests):
            t = time.perf_counter()
            conn.request("GET", path(i), headers=headers)
            response = conn.getresponse()
            response.read()
            times.append((time.perf_counter() - t) * 1000)
            assert response.status == 200, (name, response.status)
        out[name] = {
            "p50_ms": round(percentile(times, 50), 2),
            "p95_ms": round(percentile(times, 95), 2),
            "max_ms": round(max(times), 2),
        }
        print(f"  {name}: p95 {out[name]['p95_ms']} ms", flush=True)
    return {"endpoints": out}


# The pages bench/fleet_sim.py's readers request, as they request them.
READER_PAGES = {
    "overview": lambda run: "/api/v1/portal/overview",
    "leaderboard_teams": lambda run: "/api/v1/portal/leaderboards/teams",
    "leaderboard_projects": lambda run: "/api/v1/portal/leaderboards/projects",
    "leaderboard_runs": lambda run: "/api/v1/portal/leaderboards/runs",
    "runs_list": lambda run: "/api/v1/portal/runs?page_size=20",
    "run_detail": lambda run: f"/api/v1/portal/runs/{run}",
}


def _figures(values: list[float]) -> dict[str, float]:
    return {"first": round(values[0], 2), "p50": round(percentile(values, 50), 2), "p99": round(percentile(values, 99), 2),
            "mean": round(sum(values) / len(values), 2)}  # fmt: skip


def _portal_at(rev: str) -> tuple[Any, Any]:
    """The portal's selectors and run page as they were at git revision `rev` (for --against)."""
    import importlib.util
    import tempfile

    out = []
    for name in ("selectors", "api"):
        text = subprocess.run(["git", "show", f"{rev}:phantomhub/portal/{name}.py"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
        path = Path(tempfile.mkdtemp()) / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"phantomhub.portal._at_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        out.append(module)
    return out[0], out[1].RunPageApi.get


@contextlib.contextmanager
def _portal(variant: tuple[Any, Any] | None) -> Iterator[None]:
    """Serve the pages with `variant`'s selectors and run page (None: as they are now)."""
    from phantomhub.portal import api

    if variant is None:
        yield
        return
    selectors, get = api.selectors, api.RunPageApi.get
    api.selectors, api.RunPageApi.get = variant  # type: ignore[method-assign]
    try:
        yield
    finally:
        api.selectors, api.RunPageApi.get = selectors, get  # type: ignore[method-assign]


def in_process(token: str, args: argparse.Namespace) -> None:
    """Each reader page through Django's request path in this process: wall and CPU per request
    (the first one, cold, apart), SQL statements per request, response size."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from phantomhub.telemetry.models import Run
    from phantomhub.waste.models import RunAnalysis

    rng = np.random.default_rng(11)
    run_ids = [str(r) for r in Run.objects.values_list("id", flat=True)]
    picks = [run_ids[int(k)] for k in rng.integers(0, len(run_ids), max(args.requests + 1, 10))]
    client = Client(SERVER_NAME="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/health").status_code == 200  # the framework's own first-request work
    prof = cProfile.Profile(time.process_time) if args.profile else None
    variants: dict[str, Any] = {"now": None}
    if args.against:
        variants[args.against] = _portal_at(args.against)
    endpoints: dict[str, Any] = {}
    for name, path in READER_PAGES.items():
        seen: dict[str, dict[str, Any]] = {v: {"wall": [], "cpu": [], "size": 0} for v in variants}
        for i in range(args.requests + 1):
            # A/B alternating, each variant first every other time: the same load for both.
            for v in list(variants) if i % 2 == 0 else list(reversed(variants)):
                profiling = prof is not None and name == args.profile and i > 0 and v == "now"
                with _portal(variants[v]):
                    t0, c0 = time.perf_counter(), time.process_time()
                    if profiling:
                        prof.enable()  # type: ignore[union-attr]
                    response = client.get(path(picks[i]))
                    if profiling:
                        prof.disable()  # type: ignore[union-attr]
                    seen[v]["cpu"].append((time.process_time() - c0) * 1000)
                    seen[v]["wall"].append((time.perf_counter() - t0) * 1000)
                assert response.status_code == 200, (name, v, response.status_code, response.content[:300])
                seen[v]["size"] += len(response.content)
        figures = {}
        for v in variants:
            statements = []
            with _portal(variants[v]):
                for i in range(10):  # counted apart: capturing SQL costs time of its own
                    with CaptureQueriesContext(connection) as queries:
                        client.get(path(picks[i]))
                    statements.append(len(queries))
            figures[v] = {
                "wall_ms": _figures(seen[v]["wall"]),
                "cpu_ms": _figures(seen[v]["cpu"]),
                "sql_statements": max(statements),
                "response_bytes_mean": round(seen[v]["size"] / len(seen[v]["wall"])),
            }
            e = figures[v]
            print(f"  {name:<21} {v:<8} first {e['wall_ms']['first']:6.1f} ms  wall p50 {e['wall_ms']['p50']:6.1f} p99 "
                  f"{e['wall_ms']['p99']:6.1f}  cpu p50 {e['cpu_ms']['p50']:6.1f} p99 {e['cpu_ms']['p99']:6.1f} ms  "
                  f"{e['sql_statements']} SQL  {e['response_bytes_mean']:,} B", flush=True)  # fmt: skip
        endpoints[name] = {"path": path("{id}"), **figures.pop("now")}
        if figures:
            endpoints[name]["then"] = {"rev": args.against, **figures[args.against]}
    with connection.cursor() as cursor:
        cursor.execute("SELECT avg(pg_column_size(result))::bigint, avg(length(result::text))::bigint FROM waste_runanalysis")
        stored, text = cursor.fetchone()
    out = {
        "benchmark": "portal_inprocess",
        "what": "reader pages of bench/fleet_sim.py through Django's request path (django.test.Client), PostgreSQL",
        "runs": len(run_ids),
        "analyses": RunAnalysis.objects.count(),
        "ranks_per_run": args.ranks,
        "result_json_bytes_mean": text,
        "result_stored_bytes_mean": stored,
        "requests_per_endpoint": args.requests,
        "endpoints": endpoints,
        "targets": {"idle_ms": 25},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out} (load average {os.getloadavg()[0]:.2f})")
    if prof is not None:
        text_out = io.StringIO()
        stats = pstats.Stats(prof, stream=text_out).sort_stats("cumulative")
        stats.print_stats(50)
        stats.sort_stats("tottime").print_stats(25)
        print(text_out.getvalue())


def browser_render(port: int) -> float | None:
    chromium = shutil.which("chromium")
    if chromium is None or not (ROOT / "frontend" / "dist" / "index.html").exists():
        print("  (no chromium or no frontend build: page render not measured)")
        return None
    from django.contrib.auth.models import User
    from playwright.sync_api import sync_playwright

    user = User.objects.get(username="bench-finance")
    user.set_password("bench-password")
    user.save()
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=flags)
        page = browser.new_page()
        page.request.post(
            f"http://127.0.0.1:{port}/api/v1/portal/session",
            data={"username": "bench-finance", "password": "bench-password"},
            headers={"X-CSRFToken": page.request.get(f"http://127.0.0.1:{port}/api/v1/portal/session").json()["csrf_token"]},
        )
        page.goto(f"http://127.0.0.1:{port}/leaderboards")  # warm the cache of static assets
        page.wait_for_selector("table tbody tr")
        times = []
        for _ in range(5):
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/leaderboards")
            page.wait_for_selector("table tbody tr")
            times.append(time.perf_counter() - t)
        browser.close()
    return round(float(np.median(times)), 3)


if __name__ == "__main__":
    main()

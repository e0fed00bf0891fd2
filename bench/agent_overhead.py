#!/usr/bin/env python
"""What the agent costs the training loop. Prints figures and writes bench/results/agent_overhead.json.

    .venv/bin/python bench/agent_overhead.py            # full run (a few minutes on 2 cores)
    .venv/bin/python bench/agent_overhead.py --quick    # smaller counts, for a smoke test

1. Hot path: training-thread time of a step with a data wait and three stages (forward,
   backward, optimizer) and no work inside, p50/p99 over many steps, beside a bare loop making
   the same number of perf_counter_ns calls, and (when wandb is importable) wandb.log of 6
   scalars in offline mode.
2. A real CPU training loop (an MLP, fixed number of steps) timed with and without the agent,
   alternating the order pair by pair; the median of the per-pair slowdowns is the figure.
3. Memory with the server down: RSS while a long run spools (server address that refuses).
4. The first step of a fresh run (the one that starts the sender thread), p50/p99 over many
   runs, and the time ``import phantomhub_agent`` took in this process.

The agent runs in debug mode (errors would raise) and writes to a temporary spool.

Two agent trees side by side (a change's before and after, on a machine too noisy for two runs
minutes apart to compare), alternating child processes of this script, one per tree and round:

    git worktree add /tmp/agent_old HEAD~1
    .venv/bin/python bench/agent_overhead.py --compare /tmp/agent_old/agent --quick --rounds 6

It prints each figure's median over the rounds for both trees and their ratio, and writes
bench/results/agent_overhead_compare.json. ``--agent DIR`` measures the agent package in DIR
instead of this repository's agent/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def agent_dir(argv: list[str]) -> Path:
    """The agent tree to import (``--agent DIR``; parsed before the import, so by hand)."""
    for k, arg in enumerate(argv):
        if arg == "--agent" and k + 1 < len(argv):
            return Path(argv[k + 1]).resolve()
        if arg.startswith("--agent="):
            return Path(arg.split("=", 1)[1]).resolve()
    return REPO / "agent"


AGENT = agent_dir(sys.argv[1:])
sys.path.insert(0, str(AGENT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

_import_started = time.perf_counter_ns()
import phantomhub_agent as pa  # noqa: E402

IMPORT_MS = round((time.perf_counter_ns() - _import_started) / 1e6, 2)

pc = time.perf_counter_ns
SENDER_CPU_US: list[float] = []  # the agent's own report of its sender thread's CPU, per step


def percentiles(values: list[int]) -> dict[str, float]:
    ordered = sorted(values)
    n = len(ordered)
    return {
        "p50_us": round(ordered[n // 2] / 1e3, 3),
        "p99_us": round(ordered[min(n - 1, int(n * 0.99))] / 1e3, 3),
        "mean_us": round(sum(ordered) / n / 1e3, 3),
        "n": n,
    }


def items(n: int) -> Iterator[int]:
    yield from range(n)


hot_path_p50_us = [0.0]


def timed_step(run: pa.Run, batches: Iterator[object]) -> int:
    """Training-thread ns of one step with no work: the data wait, the step, its three stages."""
    t0 = pc()
    next(batches)
    with run.step(tokens=4096, samples=8):
        with run.stage("forward"):
            pass
        with run.stage("backward"):
            pass
        with run.stage("optimizer"):
            pass
    return pc() - t0


def agent_hot_path(n: int, spool: Path) -> dict[str, float]:
    run = pa.init(name="bench-hot-path", mode="offline", spool_dir=spool, debug=True, system_interval_s=1.0)
    costs = []
    batches = run.data(items(n))
    for _ in range(n):
        costs.append(timed_step(run, batches))
    run.finish()
    figures = percentiles(costs[n // 10 :])
    hot_path_p50_us[0] = figures["p50_us"]
    return figures


def first_step(runs: int, spool: Path) -> dict[str, float]:
    """Training-thread time of a fresh run's first step (data wait + 3 stages): the step that
    starts the sender thread. One run after another, each finished before the next."""
    costs = []
    for _ in range(runs):
        run = pa.init(name="bench-first-step", mode="offline", spool_dir=spool, debug=True, system_interval_s=1.0)
        costs.append(timed_step(run, run.data(items(2))))
        run.finish()
    return percentiles(costs)


def bare_loop(n: int) -> dict[str, float]:
    """The same loop shape and the same 10 perf_counter_ns calls the agent makes per step."""

    def timed_items(count: int) -> Iterator[int]:
        for i in range(count):
            pc()
            pc()
            yield i

    costs = []
    batches = timed_items(n)
    for _ in range(n):
        t0 = pc()
        next(batches)
        pc(), pc()  # step begin / end
        pc(), pc()  # forward
        pc(), pc()  # backward
        pc(), pc()  # optimizer
        costs.append(pc() - t0)
    return percentiles(costs[n // 10 :])


def wandb_log(n: int, workdir: Path) -> dict[str, Any] | None:
    try:
        import wandb
    except ImportError:
        return None
    os.environ.setdefault("WANDB_SILENT", "true")
    wb = wandb.init(project="phantomhub-bench", mode="offline", dir=str(workdir))
    costs = []
    for i in range(n):
        t0 = pc()
        wb.log({"loss": 1.0 / (i + 1), "lr": 1e-4, "grad_norm": 0.5, "tokens": 4096, "step_s": 0.1, "mfu": 0.4})
        costs.append(pc() - t0)
    wb.finish()
    return {**percentiles(costs[n // 10 :]), "wandb": wandb.__version__}


def training_loop_ms(steps: int, with_agent: bool, spool: Path, warmup: int = 50) -> tuple[float, float]:
    """Wall time and process CPU time (all threads, the agent's included) of ``steps`` steps of a
    small MLP, after ``warmup`` untimed steps.

    Both variants warm up the same way and then pause briefly, so that the agent's one-time
    start (its thread's first pass, the sampler's set-up) is not charged to the steady state
    that a long training run sees.
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(16)]
    run = pa.init(name="bench-train", mode="offline", spool_dir=spool, debug=True) if with_agent else None

    def loop(n: int) -> None:
        batches = (data[i % len(data)] for i in range(n))
        if run is None:
            for x, y in batches:
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
            return
        for x, y in run.data(batches):
            with run.step(samples=64):
                with run.stage("forward"):
                    loss = nn.functional.cross_entropy(model(x), y)
                with run.stage("backward"):
                    loss.backward()
                with run.stage("optimizer"):
                    opt.step()
                    opt.zero_grad()

    loop(warmup)
    time.sleep(0.5)
    sender_start = run.counters["sender_cpu_us"] if run is not None else 0
    start, cpu_start = pc(), time.process_time_ns()
    loop(steps)
    elapsed, cpu = (pc() - start) / 1e6, (time.process_time_ns() - cpu_start) / 1e6
    if run is not None:
        SENDER_CPU_US.append((run.counters["sender_cpu_us"] - sender_start) / steps)
        run.finish()
    return elapsed, cpu


def training_slowdown(pairs: int, steps: int, spool: Path) -> dict[str, Any]:
    """Pairs of trials, the order alternating; slowdown = median over pairs of with/without - 1.

    Wall time is the figure a training job feels; process CPU time (which includes the agent's
    background thread) is reported beside it because it is far less disturbed by other load on a
    shared machine.
    """
    import torch

    torch.set_num_threads(1)
    rows = []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        times = {flag: training_loop_ms(steps, flag, spool) for flag in order}
        rows.append(
            {
                "with_ms": round(times[True][0], 2),
                "without_ms": round(times[False][0], 2),
                "with_cpu_ms": round(times[True][1], 2),
                "without_cpu_ms": round(times[False][1], 2),
            }
        )
    wall = [r["with_ms"] / r["without_ms"] - 1 for r in rows]
    cpu = [r["with_cpu_ms"] / r["without_cpu_ms"] - 1 for r in rows]
    step_us = 1000 * statistics.median(r["without_ms"] for r in rows) / steps
    sender_us = statistics.median(SENDER_CPU_US)
    return {
        # Accounting, robust to other load: the sender thread's CPU per step (as the agent reports
        # it) plus the training-thread cost of a step (hot-path p50), over the step time.
        "sender_cpu_us_per_step": round(sender_us, 3),
        "estimated_overhead_pct": round(100 * (sender_us + hot_path_p50_us[0]) / step_us, 3),
        "steps_per_trial": steps,
        "pairs": rows,
        "median_step_ms_without": round(statistics.median(r["without_ms"] for r in rows) / steps, 4),
        "median_slowdown_pct": round(100 * statistics.median(wall), 3),
        "median_cpu_slowdown_pct": round(100 * statistics.median(cpu), 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "torch_threads": torch.get_num_threads(),
    }


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_server_down(steps: int, spool: Path) -> dict[str, Any]:
    """RSS while a long run spools to disk because the server refuses connections.

    Each step sleeps ~50 us (the GIL is released, as in real training), so the sender keeps up
    and every row goes to the spool; the spool cap (64 MiB here) drops oldest files, counted.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    run = pa.init(
        name="bench-rss",
        server=dead,
        token="phk_bench",
        spool_dir=spool,
        debug=True,
        spool_max_bytes=64 * 2**20,
        max_retries=0,
    )
    marks: list[dict[str, float]] = []
    batches = run.data(items(steps))
    started = time.monotonic()
    every = max(1, steps // 10)
    for i in range(steps):
        next(batches)
        with run.step(tokens=4096, samples=8):
            with run.stage("forward"):
                time.sleep(0.00005)
            with run.stage("backward"):
                pass
        if i % every == 0:
            marks.append({"step": i, "rss_mib": round(rss_bytes() / 2**20, 2), "queued": len(run._worker.steps)})
    run.finish(timeout=5)
    marks.append({"step": steps, "rss_mib": round(rss_bytes() / 2**20, 2), "queued": 0})
    after_warmup = [m["rss_mib"] for m in marks[1:]]
    return {
        "steps": steps,
        "seconds": round(time.monotonic() - started, 2),
        "rss_mib": marks,
        "growth_after_warmup_mib": round(max(after_warmup) - after_warmup[0], 2),
        "counters": run.counters,
        "spool_bytes": sum(p.stat().st_size for p in spool.rglob("*.phk")),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


# (label, section, key) of the figures --compare puts side by side.
COMPARED = [
    ("hot path p50 us", "hot_path_agent", "p50_us"),
    ("hot path p99 us", "hot_path_agent", "p99_us"),
    ("bare loop p50 us", "hot_path_bare_loop", "p50_us"),
    ("bare loop p99 us", "hot_path_bare_loop", "p99_us"),
    ("first step p50 us", "first_step", "p50_us"),
    ("first step p99 us", "first_step", "p99_us"),
    ("import ms", None, "import_ms"),
    ("training slowdown % wall", "training_loop", "median_slowdown_pct"),
    ("training slowdown % CPU", "training_loop", "median_cpu_slowdown_pct"),
    ("sender CPU us/step", "training_loop", "sender_cpu_us_per_step"),
    ("overhead % by accounting", "training_loop", "estimated_overhead_pct"),
    ("RSS growth MiB, server down", "rss_server_down", "growth_after_warmup_mib"),
]


def compare(old_agent: Path, rounds: int, passed: list[str], out: Path) -> int:
    """Alternates child runs of this script on the old tree and on this one (the order flips each
    round, so neither always runs first); the median of each figure over the rounds, side by side."""
    import compileall
    import subprocess

    trees = {"old": old_agent.resolve(), "new": AGENT}
    for tree in trees.values():  # both import from bytecode (PYTHONDONTWRITEBYTECODE would leave one compiling)
        compileall.compile_dir(str(tree / "phantomhub_agent"), quiet=1)
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    workdir = Path(tempfile.mkdtemp(prefix="phantomhub-bench-compare-"))
    try:
        for r in range(rounds):
            for label in ("old", "new") if r % 2 == 0 else ("new", "old"):
                child_out = workdir / f"{label}-{r}.json"
                command = [sys.executable, __file__, "--agent", str(trees[label]), "--out", str(child_out), *passed]
                started = time.monotonic()
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                runs[label].append(json.loads(child_out.read_text()))
                print(f"round {r + 1}/{rounds} {label} ({time.monotonic() - started:.0f}s)", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    figures = []
    print()
    print(f"{'median over ' + str(rounds) + ' rounds':34} {'old':>10} {'new':>10} {'new/old':>8}")
    for name, section, key in COMPARED:
        medians = {}
        for label in ("old", "new"):
            values = [(run[section] if section else run)[key] for run in runs[label] if not section or run.get(section)]
            medians[label] = round(statistics.median(values), 3) if values else None
        old, new = medians["old"], medians["new"]
        ratio = round(new / old, 3) if old and new is not None else None
        figures.append({"figure": name, "old": old, "new": new, "ratio": ratio})
        print(f"{name:34} {old!s:>10} {new!s:>10} {ratio!s:>8}")
    write_json(
        out,
        {
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "trees": {label: str(path) for label, path in trees.items()},
            "rounds": rounds,
            "arguments": passed,
            "figures": figures,
            "runs": runs,
        },
    )
    print(f"wrote {out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=None, help="training-loop pairs (default 31; 5 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="steps per training trial (default 400)")
    parser.add_argument("--out", default=None, help="default bench/results/agent_overhead.json (--compare: ..._compare.json)")
    parser.add_argument("--agent", default=None, help="the agent tree to measure (default: this repository's agent/)")
    parser.add_argument("--compare", default=None, metavar="OLD_AGENT_DIR", help="alternate runs of that tree and this one")
    parser.add_argument("--rounds", type=int, default=6, help="--compare: child runs per tree (default 6)")
    args = parser.parse_args()
    results_dir = REPO / "bench" / "results"
    if args.compare:
        passed = [*(["--quick"] if args.quick else []), *(["--pairs", str(args.pairs)] if args.pairs else []),
                  *(["--steps", str(args.steps)] if args.steps else [])]  # fmt: skip
        out = Path(args.out) if args.out else results_dir / "agent_overhead_compare.json"
        return compare(Path(args.compare), args.rounds, passed, out)
    quick = args.quick
    workdir = Path(tempfile.mkdtemp(prefix="phantomhub-bench-"))
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "agent": pa.__version__,
        "agent_path": str(Path(pa.__file__).parent),
        "import_ms": IMPORT_MS,
    }
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("hot_path_agent", lambda: agent_hot_path(20_000 if quick else 200_000, workdir / "hot")),
        ("hot_path_bare_loop", lambda: bare_loop(20_000 if quick else 200_000)),
        ("first_step", lambda: first_step(50 if quick else 200, workdir / "first")),
        ("wandb_log_6_scalars_offline", lambda: wandb_log(500 if quick else 5_000, workdir / "wandb")),
        (
            "training_loop",
            lambda: training_slowdown(args.pairs or (5 if quick else 31), args.steps or 400, workdir / "train"),
        ),
        ("rss_server_down", lambda: rss_server_down(30_000 if quick else 400_000, workdir / "rss")),
    ]
    try:
        for name, fn in sections:
            started = time.monotonic()
            results[name] = fn()
            print(f"{name} ({time.monotonic() - started:.1f}s): {json.dumps(results[name])}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    import torch

    results["torch"] = torch.__version__
    hot, bare, first = results["hot_path_agent"], results["hot_path_bare_loop"], results["first_step"]
    print()
    print(f"agent: {results['agent_path']} (import {IMPORT_MS} ms)")
    print(f"training-thread cost of a step (data wait + 3 stages): p50 {hot['p50_us']} us, p99 {hot['p99_us']} us")
    print(f"bare loop, same perf_counter_ns calls:                 p50 {bare['p50_us']} us, p99 {bare['p99_us']} us")
    print(f"a fresh run's first step (starts the sender thread):   p50 {first['p50_us']} us, p99 {first['p99_us']} us")
    wb = results["wandb_log_6_scalars_offline"]
    if wb:
        print(f"wandb.log of 6 scalars (offline, {wb['wandb']}):            p50 {wb['p50_us']} us, p99 {wb['p99_us']} us")
    else:
        print("wandb.log: wandb not installed here, not measured")
    train = results["training_loop"]
    print(
        f"CPU training loop ({train['median_step_ms_without']} ms/step, {len(train['pairs'])} pairs): "
        f"median slowdown {train['median_slowdown_pct']}% wall, {train['median_cpu_slowdown_pct']}% CPU time "
        f"(load average {train['load_average_1m']}); by accounting {train['estimated_overhead_pct']}% "
        f"(sender thread {train['sender_cpu_us_per_step']} us/step + hot path)"
    )
    rss = results["rss_server_down"]
    print(f"RSS, {rss['steps']} steps with the server down: growth after warm-up {rss['growth_after_warmup_mib']} MiB")
    out = Path(args.out) if args.out else results_dir / "agent_overhead.json"
    write_json(out, results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

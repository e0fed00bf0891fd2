"""What an idle Celery worker costs: CPU a second of the worker's process tree with no task, for
each broker poll interval (PHANTOMHUB_BROKER_POLL_S) and with or without the flags bench/fleet.py
and deploy/entrypoint.sh start it with (--without-gossip --without-mingle --without-heartbeat),
and how long it takes to exit after SIGTERM (a warm shutdown).

    .venv/bin/python bench/worker_idle.py [--polls 1 5] [--seconds 40]

Writes bench/results/worker_idle.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import server_setup  # noqa: E402
from bench.fleet import _cpu_s, _tree  # noqa: E402

QUIET = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


def one(env: dict[str, str], poll: float, quiet: bool, seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "celery", "-A", "phantomhub", "worker", "--concurrency", "1", "-Q", "phantomhub",
           "--loglevel", "WARNING", *(QUIET if quiet else [])]  # fmt: skip
    worker = subprocess.Popen(cmd, cwd=ROOT, env={**env, "PHANTOMHUB_BROKER_POLL_S": str(poll)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(15)  # boot, connect, fork the pool
        procs = _tree(worker.pid)
        c0, t0 = _cpu_s(procs), time.monotonic()
        time.sleep(seconds)
        c1, t1 = _cpu_s(procs), time.monotonic()
        stop0 = time.monotonic()
        worker.terminate()
        worker.wait(120)
        stop_s = time.monotonic() - stop0
    finally:
        if worker.poll() is None:
            worker.kill()
    case = {"poll_s": poll, "flags": QUIET if quiet else [], "idle_cpu_ms_per_s": round(1000 * (c1 - c0) / (t1 - t0), 2),
            "sigterm_to_exit_s": round(stop_s, 2)}  # fmt: skip
    print(f"poll {poll:g} s, {'without gossip/mingle/heartbeat' if quiet else 'Celery defaults'}: idle "
          f"{case['idle_cpu_ms_per_s']} ms CPU a second; SIGTERM to exit {case['sigterm_to_exit_s']} s", flush=True)  # fmt: skip
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=float, nargs="+", default=[1.0, 5.0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ph_bench_idle")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "worker_idle.json"))
    args = parser.parse_args()
    env = server_setup(args.database_url, args.redis_url)
    cases = [one(env, poll, quiet, args.seconds) for quiet in (True, False) for poll in args.polls]
    result = {"bench": "worker_idle", "command": " ".join(["bench/worker_idle.py", *sys.argv[1:]]),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
              "seconds": args.seconds, "cases": cases}  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""What naming the actor of the audit log costs each request: PhantomHub's context
(audit/context.py `request_context`, a context variable) against django-auditlog's own
(`auditlog.context.set_actor`, which connects a signal receiver per request and disconnects it).

    .venv/bin/python bench/audit_context.py [--n 20000] [--out bench/results/audit_context.json]

Each is entered and left around nothing, interleaved in rounds so both see the same machine, and
timed per request (p50, p99, and the first, cold one). No entry is written: this is the price
every request pays, ingest included, whether or not it changes anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="requests timed per way (default 20000)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "audit_context.json"))
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")
    os.environ.setdefault("PHANTOMHUB_SECRET_KEY", "b" * 48)
    import django

    django.setup()
    from auditlog.context import set_actor
    from django.test import RequestFactory

    from phantomhub.audit.context import request_context

    request = RequestFactory().get("/api/v1/runs/x/batch", REMOTE_ADDR="192.0.2.7")

    def ours() -> None:
        with request_context(request):
            pass

    def auditlogs() -> None:
        with set_actor(None, remote_addr="192.0.2.7"):
            pass

    ways = {"phantomhub request_context": ours, "auditlog set_actor": auditlogs}
    samples: dict[str, list[float]] = {name: [] for name in ways}
    rounds = 20
    for _ in range(rounds):
        for name, call in ways.items():
            for _ in range(args.n // rounds):
                t0 = time.perf_counter_ns()
                call()
                samples[name].append((time.perf_counter_ns() - t0) / 1000)
    result = {}
    for name, times in samples.items():
        ordered = sorted(times)
        result[name] = {
            "n": len(times),
            "first_us": round(times[0], 2),
            "p50_us": round(statistics.median(ordered), 2),
            "p99_us": round(ordered[int(len(ordered) * 0.99) - 1], 2),
        }
        row = result[name]
        print(f"{name:28s} p50 {row['p50_us']:7.2f} µs  p99 {row['p99_us']:7.2f} µs  first {row['first_us']:7.2f} µs")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

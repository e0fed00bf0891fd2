#!/usr/bin/env python
"""Exercises the agent's CUDA path on one GPU in a few minutes; skips cleanly without one.

    .venv/bin/python scripts/agent_gpu_check.py [--steps 200] [--json out.json]

Checks, each printed PASS/FAIL (exit status 1 on any FAIL, 0 on success or SKIP):
- no hidden synchronization: the training loop (agent included) runs under
  ``torch.cuda.set_sync_debug_mode("error")``, so any synchronizing call raises;
- stage times come from CUDA events, resolved off the training thread, for every step;
- allocator statistics (allocated, reserved, peak, retries) are recorded;
- an out-of-memory inside a step becomes an "oom" event;
- NVML samples for the job's own device (when nvidia-ml-py is installed);
- a one-rank NCCL DistributedDataParallel run reports comm_ns through the comm hook;
- the training-thread cost per step on GPU (printed; budget as on CPU plus the event records).

Everything goes to a temporary spool in offline mode, which the script decodes; no server needed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))


def read_spool(spool: Path, run_id: str) -> dict[str, list[dict[str, Any]]]:
    from phantomhub_agent._spool import decode_file

    out: dict[str, list[dict[str, Any]]] = {"steps": [], "samples": [], "events": [], "run": []}
    for path in sorted((spool / run_id).glob("*.phk")):
        request = decode_file(path.read_bytes())
        body = gzip.decompress(request.body) if request.gzipped else request.body
        out[request.kind].append(json.loads(body))
    return out


def rows(batches: list[dict[str, Any]], key: str) -> dict[str, list[Any]]:
    """Columnar batches merged into one mapping; a column missing from a batch is null there."""
    merged: dict[str, list[Any]] = {}
    total = 0
    for batch in batches:
        cols = batch[key]
        n = len(next(iter(cols.values())))
        for name in cols:
            merged.setdefault(name, [None] * total)
        for name, values in merged.items():
            values.extend(cols.get(name, [None] * n))
        total += n
    return merged


class Checks:
    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.failed = False

    def check(self, name: str, ok: bool, detail: Any = "") -> None:
        self.results[name] = {"ok": bool(ok), "detail": detail}
        self.failed |= not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0

    import phantomhub_agent as pa

    checks = Checks()
    spool = Path(tempfile.mkdtemp(prefix="phantomhub-gpu-check-"))
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    batches = [torch.randn(64, 1024, device=device) for _ in range(8)]

    run = pa.init(
        name="gpu-check",
        mode="offline",
        spool_dir=spool,
        debug=True,
        timing="cuda",
        flush_interval_s=0.5,
        system_interval_s=0.2,
        dtype="fp32",
    )
    flops = run.count_flops(model, batches[0])
    checks.check("count_flops", bool(flops and flops > 0), flops)
    torch.cuda.synchronize()

    costs: list[int] = []
    pc = time.perf_counter_ns
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(args.steps):
            t0 = pc()
            with run.step(samples=64):
                with run.stage("forward"):
                    loss = model(batches[i % 8]).float().pow(2).mean()
                with run.stage("backward"):
                    loss.backward()
                with run.stage("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            costs.append(pc() - t0)
        sync_error = None
    except RuntimeError as exc:  # a synchronizing call under "error" mode
        sync_error = str(exc)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    checks.check("no synchronizing call in the loop", sync_error is None, sync_error or "")

    oom_seen = False
    try:
        with run.step():
            torch.empty(1 << 50, dtype=torch.uint8, device=device)
    except torch.cuda.OutOfMemoryError:
        oom_seen = True
    checks.check("an OOM inside a step raised normally", oom_seen)
    time.sleep(1.0)
    try:
        run.finish(timeout=30)
        finish_error = None
    except pa.AgentError as exc:  # debug mode: an error of the background thread surfaces here
        finish_error = repr(exc.__cause__ or exc)
    checks.check("background thread (event resolution, sampling) without errors", finish_error is None, finish_error)

    spooled = read_spool(spool, run.id)
    steps = rows(spooled["steps"], "steps")
    n = args.steps
    stage_ok = (
        all(
            isinstance(v, int) and v > 0
            for name in ("forward_ns", "backward_ns", "optimizer_ns")
            for v in steps.get(name, [])[:n]
        )
        and len(steps.get("step", [])) >= n
    )
    checks.check(
        "CUDA event stage times on every step",
        stage_ok,
        {k: statistics.median(steps[k][:n]) for k in ("forward_ns", "backward_ns", "optimizer_ns") if k in steps},
    )
    mem = [v for v in steps.get("mem_allocated", []) if v is not None]
    checks.check(
        "allocator stats recorded",
        len(mem) > 0 and all(v > 0 for v in mem),
        {"rows_with_memory": len(mem), "peak": max((v for v in steps.get("mem_peak", []) if v), default=0)},
    )
    events = [e for batch in spooled["events"] for e in batch["events"]]
    checks.check("oom event", any(e["kind"] == "oom" for e in events))
    samples = rows(spooled["samples"], "samples") if spooled["samples"] else {}
    gpu_rows = [d for d in samples.get("device", []) if d is not None]
    try:
        import pynvml  # noqa: F401

        checks.check(
            "NVML samples for the own device",
            len(gpu_rows) > 0 and set(gpu_rows) == {0},
            {"rows": len(gpu_rows), "util_pct": [v for v in samples.get("gpu_util_pct", []) if v is not None][-3:]},
        )
    except ImportError:
        print("SKIP  NVML samples (pip install nvidia-ml-py)")
    costs.sort()
    p50, p99 = costs[len(costs) // 2] / 1e3, costs[int(len(costs) * 0.99)] / 1e3
    checks.check("training-thread cost per step (3 stages, CUDA events)", p50 <= 60, {"p50_us": p50, "p99_us": p99})

    checks.results["ddp"] = ddp_check(checks, spool)
    if args.json:
        Path(args.json).write_text(json.dumps(checks.results, indent=2, default=str))
    print("FAILED" if checks.failed else "OK")
    return 1 if checks.failed else 0


def ddp_check(checks: Checks, spool: Path) -> Any:
    import torch
    import torch.distributed as dist

    import phantomhub_agent as pa

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).cuda(), device_ids=[0])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        run = pa.init(name="gpu-check-ddp", mode="offline", spool_dir=spool, debug=True, timing="cuda")
        run.watch(model)
        x = torch.randn(64, 1024, device="cuda")
        for _ in range(20):
            with run.step():
                with run.stage("forward"):
                    loss = model(x).sum()
                with run.stage("backward"):
                    loss.backward()
                with run.stage("optimizer"):
                    opt.step()
                    opt.zero_grad()
        try:
            run.finish(timeout=30)
        except pa.AgentError as exc:
            checks.check("DDP run finished without agent errors", False, repr(exc.__cause__ or exc))
        steps = rows(read_spool(spool, run.id)["steps"], "steps")
        comm = [v for v in steps.get("comm_ns", []) if v is not None]
        checks.check("DDP comm hook reports comm_ns", len(comm) >= 15, {"median_ns": statistics.median(comm) if comm else None})
        return comm
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

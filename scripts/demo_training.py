"""Short real CPU PyTorch training runs through the agent, for the demo organization.

    python scripts/demo_training.py healthy|starved|ddp-straggler

PHANTOMHUB_SERVER and PHANTOMHUB_TOKEN say where to post. Each scenario trains a small MLP on
synthetic data for a few seconds; the CPU stands in for an L4 so the run is priced (tagged
"cpu-demo").
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import torch
import torch.distributed as dist
from torch import nn

import phantomhub_agent as pa

STEPS = 120
BATCH = 64


def model_and_data(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    x, y = torch.randn(BATCH * 8, 256), torch.randint(0, 10, (BATCH * 8,))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), x, y


def batches(x: torch.Tensor, y: torch.Tensor, delay_s: float):  # type: ignore[no-untyped-def]
    for step in range(STEPS):
        if delay_s:
            time.sleep(delay_s)  # a slow input pipeline: decoding, augmentation, remote reads
        i = (step * BATCH) % len(x)
        yield x[i : i + BATCH], y[i : i + BATCH]


def train(run: pa.Run, delay_s: float, slow_compute_s: float = 0.0, ddp: bool = False) -> None:
    model, opt, x, y = model_and_data(0)
    if ddp:
        model = run.watch(nn.parallel.DistributedDataParallel(model))  # measures exposed gradient-sync wait
    loss_fn = nn.CrossEntropyLoss()
    run.count_flops(model, (x[:BATCH],), loss_fn=lambda out: loss_fn(out, y[:BATCH]))
    for step, (xb, yb) in enumerate(run.data(batches(x, y, delay_s))):
        with run.step(tokens=BATCH * 256, samples=BATCH):
            with run.stage("forward"):
                loss = loss_fn(model(xb), yb)
                if slow_compute_s:
                    time.sleep(slow_compute_s)  # this rank is the straggler
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()
        if step == STEPS // 2:
            with run.phase("eval"):
                time.sleep(0.3)


def single(name: str, delay_s: float) -> None:
    run = pa.init(project="quickstart", team="demo", name=name, gpu_model="L4", gpu_count=1, dtype="fp32",
                  tags=["cpu-demo"], config={"note": "trained on CPU, billed as an L4 for the demo"},
                  run_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"phantomhub-demo-training/{name}")))  # fmt: skip
    train(run, delay_s)
    run.finish()


def ddp_rank(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    run = pa.init(project="quickstart", team="demo", name="ddp-slow-rank", gpu_model="L4", gpu_count=world, dtype="fp32",
                  tags=["cpu-demo"], run_id=str(uuid.uuid5(uuid.NAMESPACE_URL, "phantomhub-demo-training/ddp")))  # fmt: skip
    train(run, delay_s=0.0, slow_compute_s=0.03 if rank == 1 else 0.0, ddp=True)
    run.finish()
    dist.destroy_process_group()


def main() -> None:
    torch.set_num_threads(1)
    scenario = sys.argv[1] if len(sys.argv) > 1 else "healthy"
    if scenario == "healthy":
        single("cpu-healthy", 0.0)
    elif scenario == "starved":
        single("cpu-starved-dataloader", 0.03)
    elif scenario == "ddp-straggler":
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(ddp_rank, args=(2, port), nprocs=2, join=True)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main()

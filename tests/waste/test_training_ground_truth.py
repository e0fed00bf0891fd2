"""Ground truth from real CPU PyTorch training through the agent and a live server.

A known data stall is injected into the input pipeline: its share of the run's cost must come out
within ±10% of the injected share. A 2-process DDP (gloo) run with one deliberately slow rank must
name that rank as the straggler.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pa = pytest.importorskip("phantomhub_agent")

from phantomhub.accounts.services import project_token_for_slugs  # noqa: E402
from phantomhub.pricing.models import PriceEntry  # noqa: E402
from phantomhub.pricing.services import price_set  # noqa: E402
from phantomhub.telemetry.models import Run  # noqa: E402
from phantomhub.waste.selectors import rank_figures_of  # noqa: E402
from phantomhub.waste.services import run_analyze  # noqa: E402
from tests.conftest import free_port  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.alone]
ROOT = Path(__file__).resolve().parents[2]
STALL_S = 0.04
STEPS = 60


@pytest.fixture
def token(db: None) -> str:
    PriceEntry.objects.all().delete()
    from datetime import UTC, datetime

    # A price high enough that a few seconds come to thousands of cents: shares are then exact to 0.1%.
    price_set(gpu="L4", usd_per_gpu_hour=Decimal("36000"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    return project_token_for_slugs(team_slug="ml", project_slug="ground-truth").raw


def _train(run: Any, stall_s: float) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))

    def loader():  # type: ignore[no-untyped-def]
        for _ in range(STEPS):
            time.sleep(stall_s)  # the injected stall: a slow input pipeline
            yield x, y

    for xb, yb in run.data(loader()):
        with run.step(samples=32):
            with run.stage("forward"):
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
                time.sleep(0.02)  # steady compute, so the stall's share is well defined
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()


def test_an_injected_data_stall_is_priced_at_its_share(live_server: Any, token: str, tmp_path: Path) -> None:
    # Allocated now: a later run of this (test) process would otherwise be billed from the end of
    # the previous run of the process, whatever test that was (docs/agent.md).
    from datetime import UTC, datetime

    run = pa.init(project="ground-truth", team="ml", name="stalled", gpu_model="L4", gpu_count=1, dtype="fp32",
                  server=live_server.url, token=token, debug=True, spool_dir=str(tmp_path / "spool"),
                  allocation_start=datetime.now(UTC))  # fmt: skip
    _train(run, STALL_S)
    run.finish()
    stored = Run.objects.get(name="stalled")
    row = run_analyze(run_id=stored.pk)
    assert row is not None and row.result["steps"] == STEPS
    billed_s = row.result["billed_gpu_seconds"]  # one GPU: GPU-seconds are seconds
    injected_share = STEPS * STALL_S / billed_s
    categories = {c["category"]: c for c in row.result["categories"]}
    measured_share = categories["data_stall"]["usd_cents"] / row.result["cost_cents"]
    print(f"data stall: injected {injected_share:.4f} of billed time, priced {measured_share:.4f} of cost")
    assert measured_share == pytest.approx(injected_share, rel=0.10)
    assert categories["data_stall"]["gpu_seconds"] == pytest.approx(STEPS * STALL_S, rel=0.10)
    assert any(r["code"] == "DATA_STALL" for r in row.recommendations)


DDP_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import torch, torch.distributed as dist
    import phantomhub_agent as pa

    rank, world = int(sys.argv[1]), 2
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = pa_model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    run = pa.init(project="ground-truth", team="ml", name="ddp-straggler", gpu_model="L4", gpu_count=2, dtype="fp32",
                  debug=True, spool_dir=sys.argv[2])
    model = run.watch(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 64)
    for _ in run.data(range(40)):
        with run.step(samples=16):
            with run.stage("forward"):
                loss = model(x).pow(2).mean()
                time.sleep(0.06 if rank == 1 else 0.01)  # rank 1 is the slow one
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()
    run.finish()
    dist.destroy_process_group()
    """
)


def test_a_slow_rank_in_ddp_is_named_the_straggler(live_server: Any, token: str, tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    port = free_port()
    env = {**os.environ, "PHANTOMHUB_SERVER": live_server.url, "PHANTOMHUB_TOKEN": token, "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "PHANTOMHUB_RUN_ID": str(uuid.uuid4()), "PYTHONPATH": str(ROOT)}  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(tmp_path / f"spool{rank}")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out[-2000:]
    stored = Run.objects.get(name="ddp-straggler")
    assert stored.world_size == 2
    row = run_analyze(run_id=stored.pk)
    assert row is not None and row.result["ranks_reporting"] == 2
    stragglers = row.result["stragglers"]
    print(f"stragglers: {[(s['rank'], round(s['slow_step_share'], 2)) for s in stragglers]}")
    assert [s["rank"] for s in stragglers] == [1], stragglers
    fast = next(r for r in rank_figures_of(row) if r["rank"] == 0)
    assert fast["comm_ns_mean"] > 30e6  # rank 0 waits about 50 ms a step for rank 1 in the all-reduce

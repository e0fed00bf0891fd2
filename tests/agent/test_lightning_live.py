"""The Lightning callback in a real Lightning training loop (tiny model built in code)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch import nn

from .conftest import LiveServer

pl = pytest.importorskip("pytorch_lightning")

from phantomhub_agent.integrations.lightning import PhantomHubCallback  # noqa: E402

pytestmark = [pytest.mark.live_server, pytest.mark.slow]
torch.set_num_threads(1)
MS = 1_000_000


class SlowData(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i % 4 == 0:
            time.sleep(0.02)  # one sleep per batch of 4
        return torch.randn(16), torch.randn(2)


class Tiny(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        time.sleep(0.005)
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_lightning_fit_reports_every_batch_with_its_stages(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    callback = PhantomHubCallback(name="lightning", server=live.url, token=live.token, **agent_kwargs)
    trainer = pl.Trainer(
        max_steps=10,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=2,
        val_check_interval=5,
        num_sanity_val_steps=0,
        callbacks=[callback],
    )
    loader = torch.utils.data.DataLoader(SlowData(), batch_size=4)
    trainer.fit(Tiny(), loader, torch.utils.data.DataLoader(SlowData(), batch_size=4))
    run = callback.run
    assert run is not None and run.finished
    rows = live.steps(run.id, rank=0)
    assert rows["step"] == list(range(10))
    assert rows["samples"] == [4] * 10
    assert all(v >= 5 * MS for v in rows["forward_ns"])  # training_step sleeps 5 ms
    assert all(v is not None and v > 0 for v in rows["backward_ns"] + rows["optimizer_ns"])
    assert all(v >= 20 * MS for v in rows["data_ns"][1:])  # the loader sleeps 20 ms per batch
    for i in range(9):
        assert rows["t_start_ns"][i] + rows["dur_ns"][i] <= rows["t_start_ns"][i + 1]
    assert live.run(run.id)["status"] == "finished"

"""The Hugging Face Trainer callback in a real Trainer loop (tiny GPT-2 built from a config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from .conftest import LiveServer

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer itself needs accelerate")

from phantomhub_agent.integrations.transformers import PhantomHubCallback  # noqa: E402

pytestmark = [pytest.mark.live_server, pytest.mark.slow]
torch.set_num_threads(1)
SEQ = 16


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (SEQ,))
        return {"input_ids": ids, "labels": ids.clone()}


def test_a_trainer_run_reports_every_optimizer_step_with_its_stages(
    live: LiveServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=SEQ)
    model = transformers.GPT2LMHeadModel(config)
    callback = PhantomHubCallback(name="hf", server=live.url, token=live.token, tokens_per_step=4 * 2 * SEQ, **agent_kwargs)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        eval_strategy="steps",
        eval_steps=3,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens(), callbacks=[callback])
    trainer.train()
    run = callback.run
    assert run is not None and run.finished
    rows = live.steps(run.id, rank=0)
    assert rows["step"] == list(range(6))
    assert rows["tokens"] == [128] * 6 and rows["samples"] == [8] * 6
    for name in ("forward_ns", "backward_ns", "optimizer_ns"):
        assert all(v is not None and v > 0 for v in rows[name]), name
    for i in range(6):
        stages = rows["forward_ns"][i] + rows["backward_ns"][i] + rows["optimizer_ns"][i]
        assert stages <= rows["dur_ns"][i]
    # the evaluation after step 2 is a phase, not part of step 2 nor of step 3's data wait
    assert rows["t_start_ns"][3] - (rows["t_start_ns"][2] + rows["dur_ns"][2]) > 0
    stored = live.run(run.id)
    assert stored["status"] == "finished"
    assert stored["config"]["gradient_accumulation_steps"] == 2

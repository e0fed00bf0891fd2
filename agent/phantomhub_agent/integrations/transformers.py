"""Hugging Face Trainer integration.

    from phantomhub_agent.integrations.transformers import PhantomHubCallback

    trainer = Trainer(..., callbacks=[PhantomHubCallback(project="llm-pretrain", gpu_model="H100-SXM")])

A step is an optimizer step (``state.global_step``), micro-batches of gradient accumulation
included. Forward is timed by hooks on the model's forward; backward runs from the end of each
forward to the next forward or ``on_pre_optimizer_step`` (so it includes loss bookkeeping and
gradient clipping); optimizer from ``on_pre_optimizer_step`` to ``on_optimizer_step``. The data
wait is the gap between two steps. Evaluation and checkpoint saving are phases.

Checkpoints: ``on_save`` fires after the Trainer wrote ``checkpoint-<global_step>`` (model,
optimizer, scheduler, RNG and trainer state), so the "checkpoint" phase runs from the end of the
step (or of the evaluation just before the save, when there is one) to ``on_save``: the save and
whatever the Trainer did between the two (logging), with the step ``state.global_step`` and the
directory's size. A resume (``train(resume_from_checkpoint=...)``) is seen at ``on_train_begin``
with ``state.global_step > 0``: a "restore" event with that step and no duration (the Trainer
loads the checkpoint before any callback runs, so its load time is not measured).

``tokens_per_step``, ``samples_per_step`` (default: per-device batch size x accumulation steps)
and ``flops_per_step`` are per optimizer step; FLOPs counted with ``run.count_flops`` apply
otherwise.
"""

from __future__ import annotations

import os
import time
from typing import Any

from transformers import TrainerCallback

from .._run import Run
from ._common import StageTracker, size_on_disk

CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


class PhantomHubCallback(TrainerCallback):
    def __init__(
        self,
        run: Run | None = None,
        *,
        tokens_per_step: int | None = None,
        samples_per_step: int | None = None,
        flops_per_step: int | None = None,
        **init_kwargs: Any,
    ) -> None:
        self._tracker = StageTracker()
        self._tracker.run = run
        self._init_kwargs = init_kwargs
        self._tokens = tokens_per_step
        self._samples = samples_per_step
        self._flops = flops_per_step
        self._handles: list[Any] = []
        self._eval_start: int | None = None

    @property
    def run(self) -> Run | None:
        return self._tracker.run

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        config = {
            key: getattr(args, key, None)
            for key in (
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "learning_rate",
                "max_steps",
                "num_train_epochs",
                "bf16",
                "fp16",
                "seed",
            )
        }
        run = self._tracker.ensure_run(self._init_kwargs, defaults={"config": config})
        if int(getattr(state, "global_step", 0) or 0) > 0:  # resumed from a checkpoint
            run.restored(int(state.global_step))
            self._tracker.last_end_pc = time.perf_counter_ns()
        if model is not None and not self._handles:
            self._handles.append(model.register_forward_pre_hook(self._before_forward))
            self._handles.append(model.register_forward_hook(self._after_forward))

    def _before_forward(self, module: Any, inputs: Any) -> None:
        if self._tracker.run is not None and self._tracker.run.in_step:
            self._tracker.open("forward")

    def _after_forward(self, module: Any, inputs: Any, output: Any) -> None:
        if self._tracker.open_name == "forward":
            self._tracker.open("backward")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._close_eval()
        samples = self._samples
        if samples is None:
            samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self._tracker.begin_step(int(state.global_step), self._tokens, samples, self._flops)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._tracker.open("optimizer")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._tracker.close("optimizer")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._tracker.end_step()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._eval_start is None:
            last = self._tracker.last_end_pc
            self._eval_start = last if last is not None else time.perf_counter_ns()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._close_eval()

    def _close_eval(self) -> None:
        if self._eval_start is not None:
            self._tracker.phase("eval", self._eval_start, time.perf_counter_ns())
            self._eval_start = None

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        last = self._tracker.last_end_pc
        step = int(state.global_step)
        data: dict[str, Any] = {"step": step, "async": False}
        output_dir = getattr(args, "output_dir", None)
        size = size_on_disk(os.path.join(output_dir, f"{CHECKPOINT_PREFIX}-{step}")) if output_dir else None
        if size is not None:
            data["bytes"] = size
        now = time.perf_counter_ns()  # after the size: its reading is the checkpoint's time too
        self._tracker.phase("checkpoint", last if last is not None else now, now, data)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._tracker.finish("finished")

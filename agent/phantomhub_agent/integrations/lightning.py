"""PyTorch Lightning integration.

    from phantomhub_agent.integrations.lightning import PhantomHubCallback

    trainer = Trainer(callbacks=[PhantomHubCallback(project="llm-pretrain", gpu_model="H100-SXM")])

Every training batch is a step: forward runs from ``on_train_batch_start`` to
``on_before_backward``, backward to ``on_after_backward``, optimizer from
``on_before_optimizer_step`` to ``on_train_batch_end``. The data wait is the gap between two
batches (fetching plus the move to the device). Validation is an "eval" phase. Under DDP the
strategy's model gets the comm hook, so exposed gradient-sync wait is measured per rank.

Works with ``lightning.pytorch`` or ``pytorch_lightning``, whichever is installed (the former
first); pass ``run=`` to reuse a run from ``phantomhub_agent.init``, otherwise each rank starts
one with the keyword arguments given here. ``tokens_per_batch``, ``samples_per_batch`` and
``flops_per_batch`` take an int or a callable of the batch (samples default to the batch's
leading dimension); FLOPs counted once with ``run.count_flops`` apply to every step otherwise.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from .._run import Run
from ._common import Count, StageTracker, batch_size, evaluate_count


def _lightning() -> Any:
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("PhantomHubCallback needs lightning or pytorch-lightning installed")


pl: Any = _lightning()


class PhantomHubCallback(pl.Callback):  # type: ignore[misc]
    def __init__(
        self,
        run: Run | None = None,
        *,
        tokens_per_batch: Count = None,
        samples_per_batch: Count = batch_size,
        flops_per_batch: Count = None,
        **init_kwargs: Any,
    ) -> None:
        super().__init__()
        self._tracker = StageTracker()
        self._tracker.run = run
        self._init_kwargs = init_kwargs
        self._tokens = tokens_per_batch
        self._samples = samples_per_batch
        self._flops = flops_per_batch
        self._eval_start: int | None = None
        self._own_step = 0

    @property
    def run(self) -> Run | None:
        return self._tracker.run

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._tracker.ensure_run(self._init_kwargs)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        run = self._tracker.ensure_run(self._init_kwargs)
        model = getattr(trainer.strategy, "model", None)
        if model is not None and type(model).__name__ == "DistributedDataParallel":
            run.watch(model)

    def _step_number(self, trainer: Any) -> int:
        try:
            return int(trainer.fit_loop.epoch_loop.total_batch_idx)
        except Exception:
            self._own_step += 1
            return self._own_step - 1

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        tracker = self._tracker
        tracker.ensure_run(self._init_kwargs)
        tracker.begin_step(
            self._step_number(trainer),
            evaluate_count(self._tokens, batch),
            evaluate_count(self._samples, batch),
            evaluate_count(self._flops, batch),
        )
        tracker.open("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._tracker.open("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._tracker.close("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._tracker.open("optimizer")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._tracker.end_step()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._eval_start = time.perf_counter_ns()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._eval_start is not None:
            self._tracker.phase("eval", self._eval_start, time.perf_counter_ns())
            self._eval_start = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._tracker.finish("crashed")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._tracker.finish("finished")

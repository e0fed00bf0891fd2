"""PyTorch Lightning integration.

    from phantomhub_agent.integrations.lightning import PhantomHubCallback

    trainer = Trainer(callbacks=[PhantomHubCallback(project="llm-pretrain", gpu_model="H100-SXM")])

Every training batch is a step: forward runs from ``on_train_batch_start`` to
``on_before_backward``, backward to ``on_after_backward``, optimizer from
``on_before_optimizer_step`` to ``on_train_batch_end``. The data wait is the gap between two
batches (fetching plus the move to the device). Validation is an "eval" phase. Under DDP the
strategy's model gets the comm hook, so exposed gradient-sync wait is measured per rank.

Checkpoints: the callback wraps ``trainer.save_checkpoint`` for the fit (what ``ModelCheckpoint``
and a user's own call go through: the state dump, the write by the checkpoint IO plugin and the
barrier after it), so the "checkpoint" phase is the time the save blocked this rank, with the
step ``trainer.global_step`` (given to ``on_save_checkpoint``), the file's size on the rank that
wrote it, and ``async`` when the IO plugin is ``AsyncCheckpointIO``. Should the wrapping be
impossible, the phase runs from ``on_save_checkpoint`` to the next training batch's start (or the
end of the fit). A resume (``fit(ckpt_path=...)``) is a "restore" phase from the start of
``strategy.load_checkpoint`` (the file read) to ``on_load_checkpoint`` (the module's weights
loaded), with the checkpoint's ``global_step``.

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
from ._common import Count, StageTracker, batch_size, evaluate_count, size_on_disk


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
        # checkpoints: a save in progress (its start, set by the wrapper of trainer.save_checkpoint)
        # and its step; a save seen only by on_save_checkpoint (start, step), closed later
        self._save_start: int | None = None
        self._save_step: int | None = None
        self._save_pending: tuple[int, int] | None = None
        self._load_start: int | None = None
        self._load_path: Any = None
        self._wrapped: list[tuple[Any, str]] = []
        self._trainer_io: Any = None

    @property
    def run(self) -> Run | None:
        return self._tracker.run

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._tracker.ensure_run(self._init_kwargs)
            self._wrap(trainer, "save_checkpoint", self._timed_save)
            self._wrap(trainer.strategy, "load_checkpoint", self._timed_load)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._close_pending_save()
        for owner, name in self._wrapped:
            if name in vars(owner):
                delattr(owner, name)  # the class's method again
        self._wrapped = []

    # -- checkpoints ---------------------------------------------------------------------------

    def _wrap(self, owner: Any, name: str, make: Any) -> None:
        """Replaces ``owner.name`` by a timed wrapper on the instance (undone at teardown)."""
        try:
            original = getattr(owner, name)
            if getattr(original, "_phantomhub", False):
                return
            wrapper = make(original)
            wrapper._phantomhub = True
            setattr(owner, name, wrapper)
            self._wrapped.append((owner, name))
        except Exception as exc:  # the fallback (on_save_checkpoint to the next batch) measures instead
            run = self._tracker.run
            if run is not None:
                run._error(exc)

    def _timed_save(self, original: Any) -> Any:
        def save_checkpoint(filepath: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            self._save_start, self._save_step = start, None
            try:
                return original(filepath, *args, **kwargs)
            finally:
                self._save_start = None
                self._saved(start, filepath)

        return save_checkpoint

    def _saved(self, start: int, filepath: Any) -> None:
        trainer_step = self._save_step
        self._save_step = None
        if trainer_step is None:
            return  # on_save_checkpoint did not run: not a checkpoint of this fit
        io = self._trainer_io
        is_async = io is not None and any(c.__name__ == "AsyncCheckpointIO" for c in type(io).__mro__)
        data: dict[str, Any] = {"step": trainer_step, "async": is_async}
        size = None if is_async else size_on_disk(filepath)
        if size is not None:
            data["bytes"] = size
        self._tracker.phase("checkpoint", start, time.perf_counter_ns(), data)

    def _timed_load(self, original: Any) -> Any:
        def load_checkpoint(checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
            self._load_start, self._load_path = time.perf_counter_ns(), checkpoint_path
            return original(checkpoint_path, *args, **kwargs)

        return load_checkpoint

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._trainer_io = getattr(trainer.strategy, "checkpoint_io", None)
        step = int(trainer.global_step)
        if self._save_start is not None:
            self._save_step = step  # the wrapper records the save when it returns
            return
        self._close_pending_save()
        self._save_pending = (time.perf_counter_ns(), step)

    def _close_pending_save(self) -> None:
        pending, self._save_pending = self._save_pending, None
        if pending is not None:
            self._tracker.phase("checkpoint", pending[0], time.perf_counter_ns(), {"step": pending[1], "async": False})

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        run = self._tracker.ensure_run(self._init_kwargs)
        start, path = self._load_start, self._load_path
        self._load_start = self._load_path = None
        step = checkpoint.get("global_step")
        size = size_on_disk(path) if path is not None else None
        run.restored(int(step) if step is not None else 0, bytes=size, started_pc=start)
        self._tracker.last_end_pc = time.perf_counter_ns()

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
        if self._save_pending is not None:
            self._close_pending_save()
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
        self._close_pending_save()
        self._tracker.finish("crashed", exception=exception)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_pending_save()
        self._tracker.finish("finished")

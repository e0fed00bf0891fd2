"""What both framework callbacks share: owning a run, open stages, data gaps, batch sizes."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

from .._run import Run, get_run, init

Count = Union[int, Callable[[Any], Optional[int]], None]


def batch_size(batch: Any) -> int | None:
    """Leading dimension of the first tensor found in a batch (tensor, sequence or mapping)."""
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(batch, dict):
        for value in batch.values():
            found = batch_size(value)
            if found is not None:
                return found
    if isinstance(batch, (list, tuple)):
        for value in batch:
            found = batch_size(value)
            if found is not None:
                return found
    return None


def evaluate_count(count: Count, batch: Any) -> int | None:
    if count is None:
        return None
    if callable(count):
        value = count(batch)
        return None if value is None else int(value)
    return int(count)


class StageTracker:
    """Opens and closes the run's stages from framework hooks, one at a time."""

    def __init__(self) -> None:
        self.run: Run | None = None
        self.owns_run = False
        self._open: Any = None
        self._open_name: str | None = None
        self.last_end_pc: int | None = None

    def ensure_run(self, init_kwargs: dict[str, Any], defaults: dict[str, Any] | None = None) -> Run:
        """The run given to the callback, else one started with ``init`` before, else a new one."""
        if self.run is None:
            existing = get_run()
            if existing is not None and not init_kwargs:
                self.run = existing
            else:
                self.run = init(**{**(defaults or {}), **init_kwargs})
                self.owns_run = True
        return self.run

    def open(self, name: str) -> None:
        if self.run is None:
            return
        self.close()
        stage = self.run.stage(name)
        stage.__enter__()
        self._open, self._open_name = stage, name

    def close(self, name: str | None = None) -> None:
        if self._open is None or (name is not None and name != self._open_name):
            return
        stage, self._open, self._open_name = self._open, None, None
        stage.__exit__(None, None, None)

    @property
    def open_name(self) -> str | None:
        return self._open_name

    def begin_step(self, step: int | None, tokens: int | None, samples: int | None, flops: int | None = None) -> None:
        run = self.run
        if run is None:
            return
        now = time.perf_counter_ns()
        if self.last_end_pc is not None:
            # Between two steps the framework fetched the next batch and moved it to the device.
            run.data_wait(self.last_end_pc, now - self.last_end_pc)
        run.step_begin(step=step, tokens=tokens, samples=samples, flops=flops)

    def end_step(self) -> None:
        self.close()
        if self.run is not None and self.run.in_step:
            self.run.step_end()
        self.last_end_pc = time.perf_counter_ns()

    def phase(self, name: str, start_pc: int, end_pc: int, data: Mapping[str, Any] | None = None) -> None:
        if self.run is not None:
            self.run.record_phase(name, start_pc, end_pc, data)
        self.last_end_pc = end_pc

    def finish(self, status: str = "finished", exception: BaseException | None = None) -> None:
        self.close()
        if self.run is not None and self.run.in_step:
            self.run.step_end()
        if self.run is not None and self.owns_run:
            self.run.finish(status, exception=exception)


def size_on_disk(path: Any, max_files: int = 10_000) -> int | None:
    """Bytes of a checkpoint file, or of the files under a checkpoint directory; None when it is
    not a local path (or cannot be read). Called outside the training step only."""
    try:
        target = os.fspath(path)
        if os.path.isfile(target):
            return os.path.getsize(target)
        if not os.path.isdir(target):
            return None
        total = seen = 0
        for root, _dirs, files in os.walk(target):
            for name in files:
                seen += 1
                if seen > max_files:
                    return None
                total += os.path.getsize(os.path.join(root, name))
        return total
    except (OSError, TypeError, ValueError):
        return None

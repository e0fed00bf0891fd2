"""What the training thread runs each step: clock readings and one deque append.

Budget: a step with a data wait and three or four stages costs p50 <= 10 us and p99 <= 50 us of
training-thread time (see bench/agent_overhead.py). So nothing here takes a lock, allocates more
than one tuple and one list per step, formats a string, or touches JSON. The deques are bounded by
a length check (a step beyond the cap is dropped and counted, never blocks).
"""

from __future__ import annotations

import collections
import time
from types import TracebackType
from typing import Any, Callable

from ._batcher import STAGE_SLOTS

_pc = time.perf_counter_ns

STAGE_ALIASES = {
    "data": "data",
    "h2d": "data",
    "forward": "forward",
    "fwd": "forward",
    "backward": "backward",
    "bwd": "backward",
    "optimizer": "optimizer",
    "optim": "optimizer",
    "opt": "optimizer",
    "optimizer_step": "optimizer",
    "comm": "comm",
    "allreduce": "comm",
}


class Recorder:
    """Per-run state touched by the training thread."""

    __slots__ = (
        "acc",
        "comm",
        "cuda_pool",
        "data_ns",
        "data_t0",
        "default_flops",
        "dropped_events",
        "dropped_steps",
        "enabled",
        "flops",
        "items",
        "items_max",
        "live",
        "marks",
        "mem",
        "mem_every_ns",
        "mem_next",
        "numbered",
        "on_error",
        "on_oom",
        "open",
        "q",
        "q_max",
        "samples",
        "start",
        "start_worker",
        "step_no",
        "tokens",
    )

    def __init__(
        self,
        steps: collections.deque[Any],
        items: collections.deque[Any],
        *,
        q_max: int,
        items_max: int,
        start_worker: Callable[[], bool],
        on_error: Callable[[BaseException], None],
        on_oom: Callable[[BaseException | None, int], None],
    ) -> None:
        self.q = steps
        self.q_max = q_max
        self.items = items
        self.items_max = items_max
        self.enabled = True
        self.step_no = 0
        self.numbered = False  # the user gave a step number (see Run.step)
        self.start = 0
        self.open = False
        self.acc: list[int | None] = [None, None, None, None, None]
        self.marks: list[Any] | None = None
        self.data_t0: int | None = None
        self.data_ns: int | None = None
        self.tokens: Any = None
        self.samples: Any = None
        self.flops: Any = None
        self.default_flops: int | None = None
        self.dropped_steps = 0
        self.dropped_events = 0
        self.live = False
        self.start_worker = start_worker
        self.on_error = on_error
        self.on_oom = on_oom
        self.mem: Any = None
        self.mem_every_ns = 50_000_000
        self.mem_next = 0
        self.comm: Any = None
        self.cuda_pool: Any = None

    def begin(self) -> None:
        t = _pc()
        if self.open:
            self.end(None)  # the previous step was never closed: close it where this one starts
        d0 = self.data_t0
        self.start = t if d0 is None else d0
        self.open = True

    def end(self, exc: BaseException | None) -> None:
        t = _pc()
        if not self.open:
            return
        self.open = False
        try:
            acc = self.acc
            data = self.data_ns
            extra = acc[0]
            if extra is not None:
                data = extra if data is None else data + extra
            flops = self.flops
            if flops is None:
                flops = self.default_flops
            comm = self.comm
            if comm is not None:
                self._take_comm(comm, acc)
            mem_a = mem_r = mem_p = retries = None
            mem = self.mem
            if mem is not None and t >= self.mem_next:
                self.mem_next = t + self.mem_every_ns
                before = mem.last_ooms
                mem_a, mem_r, mem_p, retries, ooms = mem.read()
                if exc is None and before is not None and ooms > before:
                    self.on_oom(None, self.step_no)
            if exc is not None:
                self.on_oom(exc, self.step_no)
            record = (
                self.step_no,
                self.start,
                t,
                data,
                acc[1],
                acc[2],
                acc[3],
                acc[4],
                flops,
                self.tokens,
                self.samples,
                mem_a,
                mem_r,
                mem_p,
                retries,
                self.marks,
            )
            if self.enabled:
                q = self.q
                if len(q) < self.q_max:
                    q.append(record)
                else:
                    self.dropped_steps += 1
        except Exception as err:
            self.on_error(err)
        finally:
            self.step_no += 1
            self.acc = [None, None, None, None, None]
            self.marks = None
            self.data_t0 = self.data_ns = None
            self.tokens = self.samples = self.flops = None
        if not self.live:
            self.live = self.start_worker()

    def _take_comm(self, comm: Any, acc: list[int | None]) -> None:
        if comm.cuda:
            pair = comm.take_events()
            if pair is not None:
                mark = (4, pair[0], pair[1], 2)  # comm slot; subtract from backward, which waited for it
                if self.marks is None:
                    self.marks = [mark]
                else:
                    self.marks.append(mark)
            return
        exposed = comm.take_host(self.start)
        if exposed is None:
            return
        current = acc[4]
        acc[4] = exposed if current is None else current + exposed
        backward = acc[2]
        if backward is not None:
            acc[2] = max(0, backward - exposed)

    def mark(self, kind: str, t_pc: int) -> None:
        if self.enabled:
            self.q.append((kind, t_pc))

    def push_item(self, item: Any) -> None:
        if not self.enabled:
            return
        if len(self.items) < self.items_max:
            self.items.append(item)
        else:
            self.dropped_events += 1
        if not self.live:
            self.live = self.start_worker()


class StepContext:
    __slots__ = ("_rec",)

    def __init__(self, rec: Recorder) -> None:
        self._rec = rec

    def __enter__(self) -> StepContext:
        try:
            self._rec.begin()
        except Exception as exc:
            self._rec.on_error(exc)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._rec.end(exc)


class CpuStage:
    """A stage timed with perf_counter_ns (CPU training, or host-side work)."""

    __slots__ = ("_rec", "_slot", "_t0")

    def __init__(self, rec: Recorder, slot: int) -> None:
        self._rec = rec
        self._slot = slot
        self._t0 = 0

    def __enter__(self) -> CpuStage:
        self._t0 = _pc()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        dt = _pc() - self._t0
        acc = self._rec.acc
        slot = self._slot
        current = acc[slot]
        acc[slot] = dt if current is None else current + dt


class CudaStage:
    """A stage timed by a pair of CUDA events on the current stream, read later off-thread."""

    __slots__ = ("_e0", "_rec", "_slot", "_t0")

    def __init__(self, rec: Recorder, slot: int) -> None:
        self._rec = rec
        self._slot = slot
        self._e0: Any = None
        self._t0 = 0

    def __enter__(self) -> CudaStage:
        try:
            event = self._rec.cuda_pool.get()
            if event is not None:
                event.record()
            self._e0 = event
        except Exception as exc:
            self._e0 = None
            self._rec.on_error(exc)
        self._t0 = _pc()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        rec = self._rec
        start = self._e0
        self._e0 = None
        try:
            end = rec.cuda_pool.get() if start is not None else None
            if end is None:
                if start is not None:
                    rec.cuda_pool.put(start)
                return  # pool exhausted: this stage stays unmeasured rather than block
            end.record()
            mark = (self._slot, start, end, -1)
            if rec.marks is None:
                rec.marks = [mark]
            else:
                rec.marks.append(mark)
        except Exception as err:
            rec.on_error(err)


class NullStage:
    __slots__ = ()

    def __enter__(self) -> NullStage:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None


def stage_slot(name: str) -> int | None:
    canonical = STAGE_ALIASES.get(name.lower())
    return None if canonical is None else STAGE_SLOTS[canonical]

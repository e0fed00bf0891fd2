"""Everything that touches torch. Imported only when torch is installed and used.

Nothing here synchronizes the device: CUDA events are recorded on the training thread and read
on the background thread once ``query()`` says they completed; allocator statistics come from the
caching allocator's host-side counters.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable

import torch

from ._batcher import STAGE_SLOTS

COMM_SLOT = STAGE_SLOTS["comm"]
BACKWARD_SLOT = STAGE_SLOTS["backward"]


class CudaEventPool:
    """Reusable timing events; the background thread gives them back once read."""

    def __init__(self, limit: int = 8192) -> None:
        self._free: collections.deque[Any] = collections.deque()
        self.limit = limit
        self.created = 0

    def get(self) -> Any:
        try:
            return self._free.pop()
        except IndexError:
            if self.created >= self.limit:
                return None  # too many unresolved: the caller falls back to host timing
            self.created += 1
            return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def put(self, event: Any) -> None:
        self._free.append(event)


def marks_ready(marks: list[Any]) -> bool:
    return all(end.query() for _slot, _start, end, _sub in marks)


def resolve_marks(values: list[Any], base: int, marks: list[Any], pool: CudaEventPool) -> None:
    """Adds the GPU time of each mark to its slot (``values[base + slot]``), then frees the events."""
    for slot, start, end, subtract_from in marks:
        ns = int(start.elapsed_time(end) * 1_000_000)
        current = values[base + slot]
        values[base + slot] = ns if current is None else current + ns
        if subtract_from >= 0 and values[base + subtract_from] is not None:
            values[base + subtract_from] = max(0, values[base + subtract_from] - ns)
        pool.put(start)
        pool.put(end)


def drop_marks(marks: list[Any], pool: CudaEventPool) -> None:
    for _slot, start, end, _sub in marks:
        pool.put(start)
        pool.put(end)


class AllocatorStats:
    """Reads the caching allocator's counters for one device without building the flat dict."""

    def __init__(self, device_index: int) -> None:
        self.device = device_index
        self._nested: Callable[[int], Any] | None = getattr(torch._C, "_cuda_memoryStats", None)
        self._reset: Callable[[int], Any] | None = getattr(torch._C, "_cuda_resetPeakMemoryStats", None)
        self._last_retries: int | None = None
        self.last_ooms: int | None = None

    def read(self) -> tuple[int, int, int, int, int]:
        """(allocated, reserved, peak since the previous read, retries since then, total OOMs)."""
        if self._nested is not None:
            stats = self._nested(self.device)
            allocated = int(stats["allocated_bytes"]["all"]["current"])
            reserved = int(stats["reserved_bytes"]["all"]["current"])
            peak = int(stats["allocated_bytes"]["all"]["peak"])
            retries = int(stats.get("num_alloc_retries", 0))
            ooms = int(stats.get("num_ooms", 0))
        else:
            flat = torch.cuda.memory_stats(self.device)
            allocated = int(flat.get("allocated_bytes.all.current", 0))
            reserved = int(flat.get("reserved_bytes.all.current", 0))
            peak = int(flat.get("allocated_bytes.all.peak", 0))
            retries = int(flat.get("num_alloc_retries", 0))
            ooms = int(flat.get("num_ooms", 0))
        if self._reset is not None:
            self._reset(self.device)
        else:
            torch.cuda.reset_peak_memory_stats(self.device)
        delta = 0 if self._last_retries is None else max(0, retries - self._last_retries)
        self._last_retries = retries
        self.last_ooms = ooms
        return allocated, reserved, peak, delta, ooms


def cuda_in_use(timing: str) -> bool:
    if timing == "cpu":
        return False
    try:
        available = bool(torch.cuda.is_available())
    except Exception:
        available = False
    if timing == "cuda" and not available:
        raise RuntimeError("timing='cuda' but torch.cuda.is_available() is False")
    return available


def current_device_index(local_rank: int) -> int:
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return int(torch.cuda.current_device())
    count = torch.cuda.device_count()
    return local_rank if 0 <= local_rank < count else 0


def is_oom(exc: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__}
    info["cuda"] = getattr(torch.version, "cuda", None)
    try:
        cudnn = torch.backends.cudnn
        info["cudnn"] = cudnn.version() if cudnn.is_available() else None  # type: ignore[no-untyped-call]
    except Exception:
        info["cudnn"] = None
    try:
        if torch.cuda.is_available():
            info["device_count"] = torch.cuda.device_count()
            info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: S110 - metadata is best effort
        pass
    return info


def device_name(index: int) -> str:
    return str(torch.cuda.get_device_name(index))


# -- FLOPs -------------------------------------------------------------------------------------


def _call_model(model: Any, example: Any) -> Any:
    if isinstance(example, dict):
        return model(**example)
    if isinstance(example, (tuple, list)):
        return model(*example)
    return model(example)


def _default_loss(output: Any) -> Any:
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None and isinstance(output, (tuple, list)) and output:
        loss = output[0]
    if loss is None:
        loss = output
    if isinstance(loss, torch.Tensor):
        return loss.float().sum() if loss.dim() > 0 else loss
    return None


def count_step_flops(model: Any, example: Any, loss_fn: Callable[[Any], Any] | None = None) -> int:
    """FLOPs of one forward and backward of ``model`` on ``example`` (FlopCounterMode).

    Gradients and buffers (e.g. BatchNorm running stats) are restored afterwards, so counting does
    not change training. A DistributedDataParallel wrapper is looked through, so no collective runs.
    """
    from torch.utils.flop_counter import FlopCounterMode

    inner = getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model
    params = [p for p in inner.parameters()]
    saved_grads = [p.grad for p in params]
    buffers = [b for b in inner.buffers()]
    saved_buffers = [b.detach().clone() for b in buffers]
    try:
        for p in params:
            p.grad = None
        with FlopCounterMode(display=False) as counter:
            output = _call_model(inner, example)
            loss = loss_fn(output) if loss_fn is not None else _default_loss(output)
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                loss.backward()  # type: ignore[no-untyped-call]
        return int(counter.get_total_flops())
    finally:
        with torch.no_grad():
            for p, g in zip(params, saved_grads):
                p.grad = g
            for b, saved in zip(buffers, saved_buffers):
                b.copy_(saved)


# -- DDP -------------------------------------------------------------------------------------


class CommTracker:
    """Exposed gradient-sync wait of a DDP model, measured by a comm hook.

    Each bucket's hook runs when its gradients are ready; the last one marks the end of backward
    compute. The wait the step could not hide is from that moment to the completion of the last
    all-reduce. On CPU (gloo) both are host clocks; on CUDA both are events on the compute stream.
    """

    def __init__(self, process_group: Any, cuda: bool, pool: CudaEventPool | None) -> None:
        self.process_group = process_group
        self.cuda = cuda
        self.pool = pool
        self.last_ready_ns = 0
        self.last_done_ns = 0
        self.ready_event: Any = None
        self.done_event: Any = None

    def hook(self, state: Any, bucket: Any) -> Any:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.last_ready_ns = time.perf_counter_ns()
        if self.cuda:
            self.ready_event = self._record(self.ready_event)
        future = allreduce_hook(self.process_group, bucket)
        return future.then(self._done)

    def _done(self, future: Any) -> Any:
        now = time.perf_counter_ns()
        if now > self.last_done_ns:
            self.last_done_ns = now
        if self.cuda:
            # Runs on the stream that waits for the all-reduce, so the event marks its completion.
            self.done_event = self._record(self.done_event)
        return future.value()

    def _record(self, previous: Any) -> Any:
        if self.pool is None:
            return None
        event = self.pool.get()
        if event is None:
            return previous
        event.record()
        if previous is not None:
            self.pool.put(previous)
        return event

    def take_host(self, step_start_ns: int) -> int | None:
        """Exposed wait of the step that started at ``step_start_ns`` (host clocks), or None."""
        ready = self.last_ready_ns
        if ready < step_start_ns:
            return None
        return max(0, self.last_done_ns - ready)

    def take_events(self) -> tuple[Any, Any] | None:
        ready, done = self.ready_event, self.done_event
        if ready is None or done is None:
            return None
        self.ready_event = self.done_event = None
        return ready, done


def watch_ddp(model: Any, tracker_factory: Callable[[Any], CommTracker]) -> CommTracker | None:
    """Registers the comm hook on a DistributedDataParallel model; None for other models."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        return None
    tracker = tracker_factory(model.process_group)

    def hook(state: Any, bucket: Any) -> Any:
        return tracker.hook(state, bucket)

    # DDP checks the hook's annotations and accepts only dist.GradBucket / Future[Tensor]; under
    # postponed evaluation they are strings, so present none at all.
    hook.__annotations__ = {}
    model.register_comm_hook(state=model.process_group, hook=hook)
    return tracker

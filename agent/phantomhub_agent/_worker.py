"""The background sender: drains what the training thread recorded, batches it, delivers it.

One daemon thread per run and process, started lazily on first use and again in a forked child
(the parent's thread does not survive ``fork``). The training thread only appends to two deques,
``steps`` and ``items``. They are unbounded ``collections.deque`` objects: what bounds them is the
callers' length check before each append (the hot path's ``queue_max_steps`` and
``queue_max_items``, see ``_hotpath``; the node collector's ``QUEUE_MAX``): a record beyond the cap
is dropped and counted, never blocks. Only the markers (``MARK_*``: a phase begins, the user
numbers steps from here, the run ends) are appended unchecked. Everything else (durations, CUDA
event resolution, JSON, gzip, HTTP, the spool, system sampling) happens here.

``Worker`` owns the thread, the state the parts share (the outbox, the locks, the ``finish()``
deadline, this process's registration and what its answer said) and one pass (``tick``), and
composes the parts:

- ``_drain.Drain``: the hot path's records resolved into columns and events, cut into requests in
  the outbox (one request per interval on the batch wire, the default; one per kind for a server
  without the batch endpoint);
- ``_checkpoint.Checkpoints``: what is recorded but not cut yet, to the spool every
  ``checkpoint_interval_s`` against a SIGKILL, deleted once delivered or spooled;
- ``_delivery.Delivery``: the outbox POSTed in order, with retries, backoff and the spool;
  ``_replay.Replay``: the spooled requests sent once the server answers (this process's backlog
  first, in order, then what dead processes left); ``_handoff.Handoff``: one request per node;
- system samples and the counters, recorded here.

Step numbers stay unique across restarts of a run: the answer to the run's registration gives,
per rank, the last step an earlier process stored, and the steps this process numbered itself are
sent shifted after it. Until that answer is in (the first pass, normally) ended steps wait in the
buffer; if the registration had to be spooled, its steps are spooled marked for a shift, applied
when the registration is finally delivered (see ``_spool``). Steps the user numbered are never
shifted. A process whose registration is about to go out first replays what a dead predecessor of
its run and rank left here, so that its step base counts those steps.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
import traceback
import uuid
from typing import Any, Callable, ClassVar

from . import _batcher as b
from . import _node as node
from ._checkpoint import Checkpoints
from ._config import Settings
from ._delivery import Delivery
from ._drain import MARK_BOUNDARY as MARK_BOUNDARY
from ._drain import MARK_END as MARK_END
from ._drain import MARK_NUMBERED as MARK_NUMBERED
from ._drain import Drain
from ._handoff import Handoff
from ._log import OnceLogger
from ._replay import Replay
from ._spool import Spool, SpooledRequest
from ._tokenfile import TokenFile
from ._transport import Response, Transport

Marks = tuple[int, int, int]  # positions in the step, sample and event buffers (rows ever appended)


@dataclasses.dataclass
class Counters:
    """Cumulative, per process; sent to the server as a "counters" event."""

    dropped_steps: int = 0
    dropped_samples: int = 0
    dropped_events: int = 0
    spool_dropped_batches: int = 0
    spool_dropped_rows: int = 0
    rejected_batches: int = 0
    send_failures: int = 0
    spooled_batches: int = 0
    replayed_batches: int = 0
    sent_batches: int = 0
    # Checkpoint files written (what is recorded but not sent yet, on disk against a SIGKILL).
    checkpoints_written: int = 0
    # A peer's batches handed to local rank 0 (``_node``); local rank 0's node batches sent, and
    # the peers' batches they carried.
    handed_batches: int = 0
    node_batches: int = 0
    node_peer_batches: int = 0
    internal_errors: int = 0
    # CPU time of the sender thread itself: the agent reports its own overhead.
    sender_cpu_us: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class WorkerContext:
    run_id: str
    rank: int
    host: str
    token_fp: str
    clock_offset_ns: int
    gpu_devices: list[int] = dataclasses.field(default_factory=list)
    # Given by the launcher (LOCAL_RANK, LOCAL_WORLD_SIZE); 1: alone on its node, or not known.
    local_rank: int = 0
    local_world_size: int = 1


@dataclasses.dataclass
class Registration:
    """This process's registration of its run, and what the server's answer to it said."""

    created_ns: int | None = None  # the registration request's (it tells ours from a replayed one)
    # Shift of this process's auto-numbered steps (None: not known, the registration was spooled);
    # while the answer is awaited (``pending``), steps are held back.
    step_base: int | None = 0
    pending: bool = False
    # A registration is about to go out: replay a dead predecessor's files of this run and rank first.
    predecessors_pending: bool = False
    # The server takes packed columns; ... columns with nulls too, with a null mask (wire.packed_nulls);
    # ... the rank's counters as the batch's `counters` field (else a counters event); ... a node's
    # rank batches in one request (``_node``).
    packed: bool = False
    packed_nulls: bool = False
    batch_counters: bool = False
    node_batches: bool = False

    def terms_from(self, answer: Any) -> None:
        """What the server said it takes, in its answer to this process's registration."""
        self.packed = b.packed_from_run(answer)
        self.packed_nulls = b.packed_nulls_from_run(answer)
        self.batch_counters = b.batch_counters_from_run(answer)
        self.node_batches = b.node_batches_from_run(answer)


class Worker:
    # The spool's replay; the node collector's sender replaces it (``node._collector``).
    replay_class: ClassVar[type[Replay]] = Replay

    def __init__(
        self,
        settings: Settings,
        ctx: WorkerContext,
        *,
        transport: Transport | None = None,
        spool: Spool | None = None,
        cuda_resolver: Any = None,
        extra_counters: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.settings = settings
        self.ctx = ctx
        self.steps: collections.deque[Any] = collections.deque()
        self.items: collections.deque[Any] = collections.deque()
        self.counters = Counters()
        self.transport = transport or Transport(settings.server, settings.token, settings.request_timeout_s)
        # Where a new token is read when the server answers 401 (PHANTOMHUB_TOKEN_FILE), if set.
        self.token_file = TokenFile(settings.token_file) if settings.token_file is not None else None
        self.spool = spool or Spool(settings.spool_dir, settings.spool_max_bytes, rank=ctx.rank)
        self.cuda = cuda_resolver
        self.extra_counters = extra_counters
        # Told the answer to this process's registration (the run registry keeps the server's id).
        self.on_registered: Callable[[Any], None] | None = None
        self.errors: list[BaseException] = []
        self.once = OnceLogger()
        self.registration = Registration()
        self.node_role = node.node_role(ctx.local_rank, ctx.local_world_size) if settings.node_batches else None
        self.delivery = Delivery(self)
        self.replay = self.replay_class(self)
        self._init_state()

    def _init_state(self) -> None:
        self.outbox: collections.deque[SpooledRequest] = collections.deque()
        self.drain = Drain(self)
        self.checkpoints = Checkpoints(self)
        self.handoff = Handoff(self)
        self.buf_lock = threading.Lock()  # the drain's buffers: the sender's pass, flush/finish
        self.io_lock = threading.Lock()  # sending and the spool's files: the outbox, the replay
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self.final_requested = threading.Event()
        self._final_done = threading.Event()
        self.flush_requested = threading.Event()
        self._flush_done = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.deadline: float | None = None  # finish()'s or flush()'s, while one runs
        self.abandoned = False
        self._closed = False
        self._sampler: Any = None
        self._sampler_failed = False
        self._next_sample = 0.0
        self._next_counters = time.monotonic() + self.settings.counters_interval_s
        self._last_counters: dict[str, int] | None = None

    @property
    def healthy(self) -> bool:
        return self.delivery.healthy

    @property
    def halted(self) -> bool:
        return self.delivery.halted

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def poll_s(self) -> float:
        s = self.settings
        candidates = [0.5, s.flush_interval_s / 2]
        if s.system_interval_s > 0:
            candidates.append(s.system_interval_s)
        if s.checkpoint_interval_s > 0:
            candidates.append(s.checkpoint_interval_s / 2)
        return max(0.01, min(candidates))

    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and self._pid == os.getpid()

    def is_sender_thread(self) -> bool:
        return self._thread is threading.current_thread()

    def ensure_started(self) -> bool:
        """Starts the thread if it is not running in this process. False if it cannot start."""
        if self.alive():
            return True
        if self._closed:
            return False
        with self._start_lock:
            if self.alive():
                return True
            thread = threading.Thread(target=self._loop, name="phantomhub-agent", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # interpreter shutting down: finish() will work inline
                return False
            self._thread = thread
            self._pid = os.getpid()
        return True

    def after_fork_in_child(self) -> None:
        """The parent's data and thread stay with the parent; the child starts clean."""
        numbered = self.drain.auto_until is not None
        self.steps.clear()
        self.items.clear()
        self.transport.drop_connection()
        self.spool.after_fork()
        self.once.reset()
        self.delivery.after_fork()
        self.replay.after_fork()
        self._init_state()
        if numbered:
            self.drain.auto_until = 0
        if self.registration.pending:  # the parent awaits the answer; the child will never see it
            self.registration.pending = False
        self._sampler_failed = True  # the parent samples the node; a forked child would only repeat it
        self.node_role = None  # the parent is the node's rank; a forked child sends for itself

    def _loop(self) -> None:
        first = True
        while True:
            if not first:  # the first pass runs at once: metadata out, and an old spool replayed early
                self._wake.wait(self._wait_s())
            first = False
            self._wake.clear()
            if self.final_requested.is_set():
                try:
                    self._final_pass()
                finally:
                    self._final_done.set()
                return
            flush = self.flush_requested.is_set()
            cpu0 = time.thread_time_ns()
            try:
                self.tick(flush=flush)
            except Exception as exc:
                self.internal_error(exc)
            self.counters.sender_cpu_us += (time.thread_time_ns() - cpu0) // 1000
            if flush:
                self.flush_requested.clear()
                self._flush_done.set()

    def _wait_s(self) -> float:
        """Until the next pass: the poll interval, or less when a wall-clock cut comes sooner (the
        node's ranks cut within milliseconds of it, not within a poll)."""
        cut = self.drain.next_cut_ns
        if cut is None or not self.drain.cuts_aligned():
            return self.poll_s
        return min(self.poll_s, max(0.001, (cut - time.time_ns()) / 1e9 + 0.001))

    def wake(self) -> None:
        self._wake.set()

    def is_abandoned(self) -> bool:
        """finish() gave up on the sender (a method, not the attribute: it changes during a delivery)."""
        return self.abandoned

    def remaining(self) -> float | None:
        """Seconds left before the deadline of a finish() or flush() under way (None: none is)."""
        deadline = self.deadline
        if deadline is None:
            return None
        return deadline - time.monotonic()

    # -- one pass --------------------------------------------------------------------------------

    def tick(self, *, final: bool = False, flush: bool = False) -> None:
        now_mono = time.monotonic()
        checkpoint: tuple[list[SpooledRequest], Marks] | None = None
        with self.buf_lock:
            self.drain.drain(final=final, flush=final or flush)
            if self._sample_due(now_mono) and not final:
                self._sample()
            if final or now_mono >= self._next_counters:
                self._queue_counters(force=final)
            if self.checkpoints.due(now_mono) and not final:
                checkpoint = self.checkpoints.delta()
        if checkpoint is not None:  # the fsync outside the lock
            self.checkpoints.write(*checkpoint)
        registration = self.registration
        if registration.predecessors_pending:
            registration.predecessors_pending = False
            self.replay.replay_predecessors()
        self.delivery.deliver_outbox()
        if self.drain.steps_held and not registration.pending:  # the registration was answered just now
            with self.buf_lock:
                self.drain.cut(force=final or flush)
            self.delivery.deliver_outbox()
        if self.node_role is not None:
            self.handoff.node_pass(final=final)
        if not final or self.deadline is None or time.monotonic() < self.deadline:
            self.replay.replay(final=final)

    # -- the registration ------------------------------------------------------------------------

    def make_request(self, kind: str, path: str, payload: Any) -> SpooledRequest:
        request = self.drain.request(kind, path, b.encode_json(payload), 1)
        if kind == "run":  # this process's registration: its answer sets the step base
            registration = self.registration
            registration.created_ns = request.created_ns
            registration.step_base = None
            registration.pending = True
            registration.predecessors_pending = True
        return request

    def is_registration(self, request: SpooledRequest) -> bool:
        return request.kind == "run" and request.run_id == self.ctx.run_id and request.created_ns == self.registration.created_ns

    def notify_registered(self, response: Response | None) -> None:
        if self.on_registered is None or response is None:
            return
        try:
            self.on_registered(response.json())
        except Exception as exc:
            self.internal_error(exc)

    # -- system samples and counters ---------------------------------------------------------------

    def _sample_due(self, now_mono: float) -> bool:
        return self.settings.system_interval_s > 0 and not self._sampler_failed and now_mono >= self._next_sample

    def _sample(self) -> None:
        self._next_sample = time.monotonic() + self.settings.system_interval_s
        if self._sampler is None:
            from ._system import SystemSampler

            try:
                self._sampler = SystemSampler(self.ctx.gpu_devices)
            except Exception as exc:
                self._sampler_failed = True
                self.once.warning("sampler", "phantomhub: system sampling disabled: %s", exc)
            # The sampler has just primed its CPU counters: a sample now would span a few ms, and
            # counters that tick every 10 ms would read 0%, 50% or 100%. The first comes an
            # interval later.
            return
        now_ns = time.monotonic_ns()
        cap = self.settings.batch_max_rows * 4
        sample_cols = self.drain.sample_cols
        for row in self._sampler.sample(time.time_ns()):
            if len(sample_cols) >= cap:
                self.counters.dropped_samples += 1
                continue
            sample_cols.append(row, now_ns)

    def counters_snapshot(self) -> dict[str, int]:
        data = self.counters.as_dict()
        data["spool_dropped_batches"] += self.spool.dropped_batches
        data["spool_dropped_rows"] += self.spool.dropped_rows
        if self.extra_counters is not None:
            for key, value in self.extra_counters().items():
                data[key] = data.get(key, 0) + value
        return data

    def _queue_counters(self, *, force: bool) -> None:
        self._next_counters = time.monotonic() + self.settings.counters_interval_s
        data = self.counters_snapshot()
        if data == self._last_counters:
            return
        if self._last_counters is None and not force and not any(data.values()):
            return
        self._last_counters = data
        if self.registration.batch_counters and self.settings.wire == "batch":
            self.drain.counters_set(data)
            self.drain.cut(force=force)
            return
        event = {
            "id": uuid.uuid4().hex,
            "kind": "counters",
            "rank": self.ctx.rank,
            "t_ns": time.time_ns(),
            "data": data,
        }
        self.drain.event_add(event)
        self.drain.cut(force=force)

    # -- flush and finish ------------------------------------------------------------------------

    def flush(self, timeout_s: float) -> bool:
        """Pushes everything recorded so far (except the step still waiting for its duration)."""
        if self.alive():
            self._flush_done.clear()
            self.flush_requested.set()
            self._wake.set()
            return self._flush_done.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        self.deadline = deadline
        try:
            self.tick(flush=True)
        finally:
            self.deadline = None
        return True

    def finish(self, timeout_s: float) -> bool:
        """Final flush within ``timeout_s``; what cannot be sent by then is spooled. Never hangs."""
        if self._closed:
            return True
        deadline = time.monotonic() + max(0.0, timeout_s)
        self.deadline = deadline
        delivered = False
        if self.alive():
            self.final_requested.set()
            self._wake.set()
            delivered = self._final_done.wait(max(0.0, deadline - time.monotonic()) + 0.25)
        else:
            try:
                self._final_pass()
                delivered = True
            except Exception as exc:
                self.internal_error(exc)
        if not delivered:
            self._emergency_spool()
        self._closed = True
        self.transport.close()
        return delivered

    def _final_pass(self) -> None:
        try:
            while True:
                self.tick(final=True)
                remaining = self.remaining()
                if not self.drain.pending or remaining is None or remaining < 0.6:
                    break
                time.sleep(0.005)  # CUDA events still running: poll, never synchronize
            if self.drain.pending:
                with self.buf_lock:
                    self.drain.drain(final=True, flush=True)
                self.delivery.deliver_outbox()
        except Exception as exc:
            self.internal_error(exc)
            self._emergency_spool()

    def _emergency_spool(self) -> None:
        """The deadline passed with the sender stuck: spool whatever is left (duplicates are harmless)."""
        self.abandoned = True
        self.registration.pending = False  # the registration is spooled below, with everything else
        try:
            acquired = self.buf_lock.acquire(timeout=0.5)
            try:
                self.drain.drain(final=True, flush=True)
            finally:
                if acquired:
                    self.buf_lock.release()
            taken = self.drain.marks_taken()
            for request in list(self.outbox):
                self.delivery.spool(request)
            self.outbox.clear()
            self.checkpoints.release(taken)
        except Exception as exc:
            self.internal_error(exc)

    def internal_error(self, exc: BaseException) -> None:
        self.counters.internal_errors += 1
        self.once.error(
            f"internal-{type(exc).__name__}",
            "phantomhub: internal error (telemetry may be incomplete): %s\n%s",
            exc,
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        )
        if self.settings.debug:
            self.errors.append(exc)

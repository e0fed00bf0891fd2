"""The background sender: drains what the training thread recorded, batches it, delivers it.

One daemon thread per run and process, started lazily on first use and again in a forked child
(the parent's thread does not survive ``fork``). The training thread only appends to two bounded
deques; everything else (durations, CUDA event resolution, JSON, gzip, HTTP, the spool, system
sampling) happens here.

One request per interval (``wire="batch"``, the default): once any part is due, the rank's
steps, samples and events leave together in one ``POST /api/v1/runs/{id}/batch``; a server
without that endpoint (a 404 that is not "run not found") gets one request per kind from then
on, the batch in hand split into them (``unbatch``).

Delivery order is FIFO per process: while this process has spooled requests of its run, new ones
are appended to the spool too, and the replay drains it in order. So the run's metadata always
reaches the server before its steps, whatever failed in between.

Checkpoints: with a long flush interval (60 s by default) a SIGKILL would lose a minute of what
waits in memory. So every ``checkpoint_interval_s`` (10 s) the rows and events recorded since the
previous checkpoint, and not cut into a request yet, are written to the spool as one request of
their own (a delta, never the whole buffer again). The live process never sends them (they are not
backlog); it deletes them once the requests those rows went out in were delivered or spooled. If
it dies first, the orphan replay (the next agent on the machine, or ``sync``) sends them; what the
server has already is a duplicate it ignores. Steps wait for the next checkpoint while their base
is awaited (the registration's answer, normally the first pass); steps whose base is unknown
because the registration was spooled are checkpointed marked for a shift, like spooled ones. A
process whose registration is about to go out first replays what a dead predecessor of its run
and rank left here, so that its step base counts those steps. Offline, the batches themselves go
to the spool: they are cut at the checkpoint interval instead, and no checkpoints are written.

Step numbers stay unique across restarts of a run: the answer to the run's registration gives,
per rank, the last step an earlier process stored, and the steps this process numbered itself are
sent shifted after it. Until that answer is in (the first pass, normally) ended steps wait in the
buffer; if the registration had to be spooled, its steps are spooled marked for a shift, applied
when the registration is finally delivered (see ``_spool``). Steps the user numbered are never
shifted.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import os
import threading
import time
import traceback
import uuid
import zlib
from pathlib import Path
from typing import Any, Callable

from . import _batcher as b
from . import _node as node
from ._config import Settings
from ._log import OnceLogger, logger
from ._spool import CLAIM_MARK, Spool, SpooledRequest, SpoolEntry, read_entry, writer_of, written_ns
from ._transport import HALT, OK, RETRY, TOO_LARGE, NetworkError, Response, Transport, backoff_delay, classify
from ._transport import parse_retry_after as _parse_retry_after

EVENTS_PER_REQUEST = 500
REPLAY_BUDGET_S = 2.0
ORPHAN_SCAN_EVERY_S = 60.0

# Markers the training thread puts in the step deque, as (kind, perf_counter_ns).
MARK_BOUNDARY = "B"  # a phase began: the held step ends here
MARK_END = "E"  # the run ends: the held step ends at its own end
MARK_NUMBERED = "N"  # the user numbers steps from here on: later rows are never shifted

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


class Worker:
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
        self.spool = spool or Spool(settings.spool_dir, settings.spool_max_bytes, rank=ctx.rank)
        self.cuda = cuda_resolver
        self.extra_counters = extra_counters
        # Told the answer to this process's registration (the run registry keeps the server's id).
        self.on_registered: Callable[[Any], None] | None = None
        self.errors: list[BaseException] = []
        self.once = OnceLogger()
        self.halted = False
        self.healthy = True
        # The server said it takes packed columns (its answer to the run's registration).
        self._packed = False
        # ... columns with nulls too, with a null mask (wire.packed_nulls).
        self._packed_nulls = False
        # ... and the rank's counters as the batch's `counters` field (else a counters event).
        self._batch_counters = False
        # ... and a node's rank batches in one request (``_node``); this rank's part in it.
        self._node_batches = False
        self._node_role = node.node_role(ctx.local_rank, ctx.local_world_size) if settings.node_batches else None
        self._fail_streak = 0
        self._next_probe = 0.0
        self._skip_runs: set[str] = set()
        # Shift of this process's auto-numbered steps (None: not known, the registration was
        # spooled); while the registration's answer is awaited, steps are held back.
        self._step_base: int | None = 0
        self._base_pending = False
        self._registration_ns: int | None = None
        # A registration is about to go out: replay a dead predecessor's files of this run and rank first.
        self._predecessors_pending = False
        self._init_state()

    def _init_state(self) -> None:
        self._pending: collections.deque[Any] = collections.deque()
        self._resolver = b.DurationResolver()
        self._step_cols = b.StepBuffer(self.ctx.clock_offset_ns)
        self._sample_cols = b.ColumnBuffer(b.SAMPLE_COLUMNS)
        self._events: list[dict[str, Any]] = []
        self._events_oldest: int | None = None
        self._counters_field: dict[str, int] | None = None  # the counters for the next batch
        self._counters_oldest: int | None = None
        self._events_added = 0  # events ever added to / taken from ``_events`` (checkpoint positions)
        self._events_taken = 0
        self._next_checkpoint = time.monotonic() + self.settings.checkpoint_interval_s
        # Positions (steps, samples, events appended) the checkpoints written so far cover, and
        # the files not deleted yet with the positions each one covers up to.
        self._checkpointed: Marks = (0, 0, 0)
        self._checkpoints: list[tuple[Path, Marks]] = []
        self._ckpt_lock = threading.Lock()
        self._outbox: collections.deque[SpooledRequest] = collections.deque()
        self._buf_lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._final_requested = threading.Event()
        self._final_done = threading.Event()
        self._flush_requested = threading.Event()
        self._flush_done = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._deadline: float | None = None
        self._abandoned = False
        self._closed = False
        self._sampler: Any = None
        self._sampler_failed = False
        self._next_sample = 0.0
        self._next_counters = time.monotonic() + self.settings.counters_interval_s
        self._last_counters: dict[str, int] | None = None
        self._own_backlog = False
        self._next_orphan_scan = 0.0
        self._auto_until: int | None = None  # rows pushed before MARK_NUMBERED (None: not seen)
        self._pushed = 0
        self._emitted = 0
        self._steps_held = False
        # A peer's handed files not seen taken yet, with when they were written (monotonic).
        self._handed: list[tuple[Path, float]] = []
        self._node_off_until = 0.0  # a peer sends for itself until then (local rank 0 was silent)
        self._next_cut_ns: int | None = None  # the next wall-clock cut, while cuts are aligned

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
        numbered = self._auto_until is not None
        self.steps.clear()
        self.items.clear()
        self.transport.drop_connection()
        self.spool.after_fork()
        self.once.reset()
        self._init_state()
        if numbered:
            self._auto_until = 0
        if self._base_pending:  # the parent awaits the answer; the child will never see it
            self._base_pending = False
        self._sampler_failed = True  # the parent samples the node; a forked child would only repeat it
        self._node_role = None  # the parent is the node's rank; a forked child sends for itself

    def _loop(self) -> None:
        first = True
        while True:
            if not first:  # the first pass runs at once: metadata out, and an old spool replayed early
                self._wake.wait(self._wait_s())
            first = False
            self._wake.clear()
            if self._final_requested.is_set():
                try:
                    self._final_pass()
                finally:
                    self._final_done.set()
                return
            flush = self._flush_requested.is_set()
            cpu0 = time.thread_time_ns()
            try:
                self.tick(flush=flush)
            except Exception as exc:
                self._internal_error(exc)
            self.counters.sender_cpu_us += (time.thread_time_ns() - cpu0) // 1000
            if flush:
                self._flush_requested.clear()
                self._flush_done.set()

    def _wait_s(self) -> float:
        """Until the next pass: the poll interval, or less when a wall-clock cut comes sooner (the
        node's ranks cut within milliseconds of it, not within a poll)."""
        cut = self._next_cut_ns
        if cut is None or not self._cuts_aligned():
            return self.poll_s
        return min(self.poll_s, max(0.001, (cut - time.time_ns()) / 1e9 + 0.001))

    def wake(self) -> None:
        self._wake.set()

    # -- one pass --------------------------------------------------------------------------------

    def tick(self, *, final: bool = False, flush: bool = False) -> None:
        now_mono = time.monotonic()
        checkpoint: tuple[list[SpooledRequest], Marks] | None = None
        with self._buf_lock:
            self._drain(final=final, flush=final or flush)
            if self._sample_due(now_mono) and not final:
                self._sample()
            if final or now_mono >= self._next_counters:
                self._queue_counters(force=final)
            if self._checkpoint_due(now_mono) and not final:
                checkpoint = self._checkpoint_delta()
        if checkpoint is not None:  # the fsync outside the lock
            self._checkpoint_write(*checkpoint)
        if self._predecessors_pending:
            self._predecessors_pending = False
            self._replay_predecessors()
        self._deliver_outbox()
        if self._steps_held and not self._base_pending:  # the registration was answered just now
            with self._buf_lock:
                self._cut(force=final or flush)
            self._deliver_outbox()
        if self._node_role is not None:
            self._node_pass(final=final)
        if not final or self._deadline is None or time.monotonic() < self._deadline:
            self._replay(final=final)

    def _drain(self, *, final: bool, flush: bool) -> None:
        steps = self.steps
        pending = self._pending
        while steps:
            pending.append(steps.popleft())
        self._resolve_pending(final=final)
        items = self.items
        while items:
            kind, value = items.popleft()
            if kind == "event":
                self._event_add(value)
            else:  # a complete request (the run's metadata)
                self._outbox.append(value)
        self._cut(force=flush)

    def _resolve_pending(self, *, final: bool) -> None:
        pending = self._pending
        now_ns = time.monotonic_ns()
        while pending:
            item = pending[0]
            if len(item) == 2:
                pending.popleft()
                kind, t_pc = item
                if kind == MARK_NUMBERED:
                    if self._auto_until is None:
                        self._auto_until = self._pushed
                    continue
                row = self._resolver.boundary(t_pc) if kind == MARK_BOUNDARY else self._resolver.close()
                if row is not None:
                    self._emit(row, now_ns)
                continue
            marks = item[b.R_MARKS]
            if marks:
                if self.cuda is None:
                    item = (*item[: b.R_MARKS], None)
                elif self.cuda.ready(marks):
                    values = list(item)
                    self.cuda.resolve(values, b.R_DATA, marks)
                    values[b.R_MARKS] = None
                    item = tuple(values)
                elif final and self._deadline is not None and time.monotonic() >= self._deadline - 0.5:
                    self.cuda.drop(marks)  # never resolved in time: those stages stay null
                    item = (*item[: b.R_MARKS], None)
                else:
                    break  # rows stay in order: wait for this step's events
            pending.popleft()
            row = self._resolver.push(item)
            self._pushed += 1
            if row is not None:
                self._emit(row, now_ns)

    def _emit(self, row: b.Ended, now_ns: int) -> None:
        # Rows leave the resolver in the order they were pushed: the k-th emitted is the k-th pushed.
        auto = self._auto_until is None or self._emitted < self._auto_until
        self._emitted += 1
        self._step_cols.append(row, now_ns, auto)

    def _cut(self, *, force: bool) -> None:
        if self.settings.wire == "batch":
            self._cut_batches(force=force)
            return
        s = self.settings
        now_ns = time.monotonic_ns()
        max_age = self._max_age_ns()
        extra = {"rank": self.ctx.rank, "host": self.ctx.host}
        run_path = f"/api/v1/runs/{self.ctx.run_id}"
        self._steps_held = False
        while len(self._step_cols) and (force or self._step_cols.due(now_ns, s.batch_max_rows, max_age)):
            if self._base_pending:
                self._steps_held = True  # cut again once the registration is answered
                break
            auto = self._step_cols.head_is_auto
            cols = self._step_cols.take(s.batch_max_rows)
            base = self._step_base
            if auto and base:
                cols = b.shift_steps(cols, base)
            cols = b.compact_columns(cols, b.REQUIRED_STEP_COLUMNS)
            rebase = auto and base is None
            packed = self._packed and not rebase
            steps = b.fit_columns("steps", cols, extra, s.batch_max_bytes, packed=packed, nulls=self._packed_nulls)
            for _payload, body, rows in steps:
                self._outbox.append(self._request("steps", run_path + "/steps", body, rows, rebase=rebase))
        while len(self._sample_cols) and (force or self._sample_cols.due(now_ns, s.batch_max_rows, max_age)):
            cols = b.compact_columns(self._sample_cols.take(s.batch_max_rows), b.REQUIRED_SAMPLE_COLUMNS)
            samples = b.fit_columns("samples", cols, extra, s.batch_max_bytes, packed=self._packed, nulls=self._packed_nulls)
            for _payload, body, rows in samples:
                self._outbox.append(self._request("samples", run_path + "/samples", body, rows))
        events_due = self._events_oldest is not None and now_ns - self._events_oldest >= max_age
        if self._events and (force or events_due or len(self._events) >= EVENTS_PER_REQUEST):
            events = self._events_take(len(self._events))
            for lo in range(0, len(events), EVENTS_PER_REQUEST):
                chunk = events[lo : lo + EVENTS_PER_REQUEST]
                body = b.encode_json({"events": chunk})
                self._outbox.append(self._request("events", run_path + "/events", body, len(chunk)))

    def _max_age_ns(self) -> int:
        s = self.settings
        interval = s.flush_interval_s
        if s.mode == "offline" and s.checkpoint_interval_s > 0:
            interval = min(interval, s.checkpoint_interval_s)  # its batches go to the spool: they are the checkpoints
        return int(interval * 1e9)

    def _parts_due(self, now_ns: int, force: bool) -> bool:
        s = self.settings
        max_age = self._max_age_ns()
        counters = self._counters_field is not None
        pending = bool(len(self._step_cols) or len(self._sample_cols) or self._events or counters)
        if force:
            return pending
        if self._cuts_aligned():
            # The node's ranks cut on the same wall-clock boundaries (``_node``); size limits still cut early.
            wall_ns = time.time_ns()
            if self._next_cut_ns is None:
                self._next_cut_ns = self._boundary_after(wall_ns)
            full = len(self._step_cols) >= s.batch_max_rows or len(self._sample_cols) >= s.batch_max_rows
            if full or len(self._events) >= EVENTS_PER_REQUEST:
                return pending
            if wall_ns < self._next_cut_ns:
                return False
            self._next_cut_ns = self._boundary_after(wall_ns)  # this boundary is taken, whatever is pending
            return pending
        if self._step_cols.due(now_ns, s.batch_max_rows, max_age) or self._sample_cols.due(now_ns, s.batch_max_rows, max_age):
            return True
        if counters and self._counters_oldest is not None and now_ns - self._counters_oldest >= max_age:
            return True
        events_due = self._events_oldest is not None and now_ns - self._events_oldest >= max_age
        return bool(self._events) and (events_due or len(self._events) >= EVENTS_PER_REQUEST)

    def _cut_batches(self, *, force: bool) -> None:
        """One request per interval: once any part is due, everything pending rides along.

        Steps stay behind while the registration's answer (their base) is awaited; the samples
        and events go meanwhile, as they do on the separate wire.
        """
        s = self.settings
        now_ns = time.monotonic_ns()
        extra = {"rank": self.ctx.rank, "host": self.ctx.host}
        path = f"/api/v1/runs/{self.ctx.run_id}/batch"
        self._steps_held = False
        while self._parts_due(now_ns, force):
            parts: dict[str, Any] = {}
            rebase = False
            if len(self._step_cols) and self._base_pending:
                self._steps_held = True  # cut again once the registration is answered
            elif len(self._step_cols):
                auto = self._step_cols.head_is_auto
                cols = self._step_cols.take(s.batch_max_rows)
                base = self._step_base
                if auto and base:
                    cols = b.shift_steps(cols, base)
                parts["steps"] = b.compact_columns(cols, b.REQUIRED_STEP_COLUMNS)
                rebase = auto and base is None
            if len(self._sample_cols):
                parts["samples"] = b.compact_columns(self._sample_cols.take(s.batch_max_rows), b.REQUIRED_SAMPLE_COLUMNS)
            if self._events:
                parts["events"] = self._events_take(EVENTS_PER_REQUEST)
            if self._counters_field is not None:
                parts["counters"], self._counters_field, self._counters_oldest = self._counters_field, None, None
            if not parts:
                return  # only held steps are pending
            batches = b.fit_batch(parts, extra, s.batch_max_bytes, rebase=rebase, packed=self._packed, nulls=self._packed_nulls)
            for body, rows, part_rebase in batches:
                self._outbox.append(self._request("batch", path, body, rows, rebase=part_rebase))

    def _cuts_aligned(self) -> bool:
        return self._node_role is not None and self._node_batches and self.settings.mode == "online"

    def _boundary_after(self, now_ns: int) -> int:
        # Local rank 0 cuts a little after the peers' boundary (the first after now, as theirs).
        interval = self.settings.flush_interval_s
        offset = node.gather_s(interval) if self._node_role == node.LEADER else 0.0
        return node.boundary_after(now_ns, interval, node.run_phase_s(self.ctx.run_id, interval)) + int(offset * 1e9)

    def _request(self, kind: str, path: str, body: bytes, rows: int, *, rebase: bool = False) -> SpooledRequest:
        gzipped = len(body) >= self.settings.gzip_min_bytes
        return SpooledRequest(
            path=path,
            body=b.gzip_bytes(body) if gzipped else body,
            gzipped=gzipped,
            kind=kind,
            run_id=self.ctx.run_id,
            rows=rows,
            token_fp=self.ctx.token_fp,
            server=self.settings.server,
            created_ns=time.time_ns(),
            rebase=rebase,
        )

    def make_request(self, kind: str, path: str, payload: Any) -> SpooledRequest:
        request = self._request(kind, path, b.encode_json(payload), 1)
        if kind == "run":  # this process's registration: its answer sets the step base
            self._registration_ns = request.created_ns
            self._step_base = None
            self._base_pending = True
            self._predecessors_pending = True
        return request

    def _is_registration(self, request: SpooledRequest) -> bool:
        return request.kind == "run" and request.run_id == self.ctx.run_id and request.created_ns == self._registration_ns

    def _registered(self, request: SpooledRequest, response: Response | None) -> None:
        """A registration was delivered: the step base of its process comes with the answer."""
        answer = response.json() if response is not None else None
        base = b.step_base_from_run(answer, self.ctx.rank)
        if self._is_registration(request):
            self._step_base = base
            self._base_pending = False
            self._wire_from(answer)
            self._notify_registered(response)

    def _wire_from(self, answer: Any) -> None:
        """What the server said it takes, in its answer to this process's registration."""
        self._packed = b.packed_from_run(answer)
        self._packed_nulls = b.packed_nulls_from_run(answer)
        self._batch_counters = b.batch_counters_from_run(answer)
        self._node_batches = b.node_batches_from_run(answer)

    def _notify_registered(self, response: Response | None) -> None:
        if self.on_registered is None or response is None:
            return
        try:
            self.on_registered(response.json())
        except Exception as exc:
            self._internal_error(exc)

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
        for row in self._sampler.sample(time.time_ns()):
            if len(self._sample_cols) >= cap:
                self.counters.dropped_samples += 1
                continue
            self._sample_cols.append(row, now_ns)

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
        if self._batch_counters and self.settings.wire == "batch":
            self._counters_field = data  # the latest replaces one not sent yet: they are cumulative
            if self._counters_oldest is None:
                self._counters_oldest = time.monotonic_ns()
            self._cut(force=force)
            return
        event = {
            "id": uuid.uuid4().hex,
            "kind": "counters",
            "rank": self.ctx.rank,
            "t_ns": time.time_ns(),
            "data": data,
        }
        self._event_add(event)
        self._cut(force=force)

    def _event_add(self, event: dict[str, Any]) -> None:
        if self._events_oldest is None:
            self._events_oldest = time.monotonic_ns()
        self._events.append(event)
        self._events_added += 1

    def _events_take(self, n: int) -> list[dict[str, Any]]:
        taken = self._events[:n]
        del self._events[:n]
        self._events_taken += len(taken)
        if not self._events:
            self._events_oldest = None
        return taken

    # -- checkpoints -------------------------------------------------------------------------------

    def _checkpoint_due(self, now_mono: float) -> bool:
        s = self.settings
        # Not shorter than the flush interval: the batches themselves come as often, nothing to gain.
        useful = 0 < s.checkpoint_interval_s < s.flush_interval_s and s.mode == "online"
        return useful and now_mono >= self._next_checkpoint

    def _marks_taken(self) -> Marks:
        return self._step_cols.taken, self._sample_cols.taken, self._events_taken

    def _checkpoint_delta(self) -> tuple[list[SpooledRequest], Marks]:
        """The requests that carry what was recorded since the previous checkpoint and is not cut
        yet (call with the buffer lock), and the positions they cover up to."""
        now, interval = time.monotonic(), self.settings.checkpoint_interval_s
        # On schedule, not an interval after this pass: a row waits at most an interval and a poll.
        self._next_checkpoint = max(self._next_checkpoint + interval, now + interval / 2)
        step_mark, sample_mark, event_mark = self._checkpointed
        pieces: list[tuple[dict[str, Any], bool]] = []
        parts: dict[str, Any] = {}
        if not self._base_pending:  # otherwise the steps wait for the next checkpoint
            auto, explicit = self._step_cols.since(step_mark)
            step_mark = self._step_cols.appended
            base = self._step_base
            if b.column_rows(auto) and base is None:  # the spool shifts them once the base is known
                pieces.append(({"steps": b.compact_columns(auto, b.REQUIRED_STEP_COLUMNS)}, True))
                auto = {name: [] for name in auto}
            steps = b.concat_columns(b.shift_steps(auto, base or 0), explicit)
            if b.column_rows(steps):
                parts["steps"] = b.compact_columns(steps, b.REQUIRED_STEP_COLUMNS)
        samples = self._sample_cols.since(sample_mark)
        sample_mark = self._sample_cols.appended
        if b.column_rows(samples):
            parts["samples"] = b.compact_columns(samples, b.REQUIRED_SAMPLE_COLUMNS)
        events = self._events[max(event_mark, self._events_taken) - self._events_taken :]
        event_mark = self._events_added
        if events:
            parts["events"] = events
        if parts:
            pieces.append((parts, False))
        marks = (step_mark, sample_mark, event_mark)
        self._checkpointed = marks
        extra = {"rank": self.ctx.rank, "host": self.ctx.host}
        path = f"/api/v1/runs/{self.ctx.run_id}/batch"
        requests = []
        for piece, rebase in pieces:
            for body, rows, part_rebase in b.fit_batch(
                piece, extra, self.settings.batch_max_bytes, rebase=rebase, packed=self._packed, nulls=self._packed_nulls
            ):
                request = self._request("batch", path, body, rows, rebase=part_rebase)
                requests.extend(unbatch(request) if self.settings.wire == "separate" else [request])
        return requests, marks

    def _checkpoint_write(self, requests: list[SpooledRequest], marks: Marks) -> None:
        for request in requests:
            try:
                written = self.spool.write(request, checkpoint=True)
            except OSError as exc:
                self.once.error("checkpoint-write", "phantomhub: cannot write a checkpoint to the spool (%s)", exc)
                continue
            if written is None:
                continue  # the spool is full: the rows are still in memory, as without checkpoints
            self.counters.checkpoints_written += 1
            with self._ckpt_lock:
                self._checkpoints.append((written, marks))

    def _checkpoints_release(self, taken: Marks) -> None:
        """Deletes the checkpoints whose rows were all cut (up to ``taken``) and sent or spooled."""
        with self._ckpt_lock:
            done = [path for path, marks in self._checkpoints if all(m <= t for m, t in zip(marks, taken))]
            if not done:
                return
            self._checkpoints = [(path, marks) for path, marks in self._checkpoints if path not in done]
        for path in done:
            self.spool.discard(path)

    # -- delivery --------------------------------------------------------------------------------

    def _deliver_outbox(self) -> None:
        with self._io_lock:
            taken = self._marks_taken()  # every row taken so far is in the outbox, or left it
            while self._outbox and not self._is_abandoned():
                request = self._outbox[0]
                if self._node_part(request) and self._node_role == node.PEER:
                    self._hand(request)
                elif self._node_part(request):
                    self._deliver_node(request, min_age_s=0.0)
                else:
                    self._deliver(request)
                if self._base_pending and self._is_registration(request):
                    self._base_pending = False  # spooled, or refused: the base stays unknown
                if self._is_abandoned():
                    return  # finish() spooled the outbox itself after its deadline
                self._outbox.popleft()
            if self._checkpoints:
                self._checkpoints_release(taken)

    # -- one request per node (``_node``) ---------------------------------------------------------

    def _direct(self) -> bool:
        """finish() or flush() is under way: every rank sends for itself."""
        return self._deadline is not None or self._flush_requested.is_set() or self._final_requested.is_set()

    def _node_part(self, request: SpooledRequest) -> bool:
        """A batch of this rank's that goes through the node's sender (handed, or sent with the peers')."""
        if self._node_role is None or not self._node_batches or request.kind != "batch" or request.rebase:
            return False
        if request.run_id != self.ctx.run_id or self.settings.mode != "online" or self.halted:
            return False
        if self._own_backlog or not self.healthy:
            return False  # FIFO behind the spooled ones, or the server is down: the usual path
        if self._node_role == node.PEER:
            return not self._direct() and time.monotonic() >= self._node_off_until
        return True

    def _hand(self, request: SpooledRequest) -> None:
        """A peer's batch, to the spool for local rank 0 to send with the node's."""
        try:
            written = self.spool.write(request, handed=True)
        except OSError as exc:
            self.once.warning("hand-write", "phantomhub: cannot hand a batch to local rank 0 (%s); sending it", exc)
            written = None
        if written is None:
            self._deliver(request)
            return
        self.counters.handed_batches += 1
        self._handed.append((written, time.monotonic()))

    def _deliver_node(self, own: SpooledRequest | None, *, min_age_s: float) -> None:
        """Local rank 0: its own batch (if any) and the peers' handed ones, in one request."""
        taken = self._handed_take(min_age_s, own_rank=own is not None)
        if not taken:
            if own is not None:
                self._deliver(own)
            return
        bodies = ([node.raw_body(own)] if own is not None else []) + [raw for _, raw, _ in taken]
        rows = (own.rows if own is not None else 0) + sum(rows for _, _, rows in taken)
        request = node.node_request(bodies, run_id=self.ctx.run_id, token_fp=self.ctx.token_fp, server=self.settings.server,
                                    rows=rows, gzip_min_bytes=self.settings.gzip_min_bytes)  # fmt: skip
        remaining = self._remaining()
        timeout = self.settings.request_timeout_s if remaining is None else min(self.settings.request_timeout_s, remaining)
        outcome, response = self._send(request, timeout)
        if outcome == OK:
            self._mark_healthy()
            self.counters.sent_batches += 1
            self.counters.node_batches += 1
            self.counters.node_peer_batches += len(taken)
            for entry, _, _ in taken:
                self.spool.remove(entry)
            return
        if outcome == RETRY:  # the peers' batches wait for the next attempt; this rank's retries as usual
            for entry, _, _ in taken:
                self.spool.release(entry)
            if own is not None:
                self._deliver(own)
            else:
                self._mark_unhealthy(_retry_after(response))
            return
        # Refused whole (a server without the endpoint, 413, one bad part): every part on its own.
        if outcome == HALT and batch_endpoint_missing(response):
            self._node_batches = False
            logger.info("phantomhub: server %s has no node batch endpoint; each rank sends its own", self.settings.server)
        if own is not None:
            self._deliver(own)
        for k, (entry, _, _) in enumerate(taken):
            if not self._replay_one(entry, own=False):
                for rest, _, _ in taken[k + 1 :]:
                    self.spool.release(rest)
                return

    def _handed_take(self, min_age_s: float, *, own_rank: bool) -> list[tuple[SpoolEntry, bytes, int]]:
        """Claims the run's handed batches at least ``min_age_s`` old that fit one node batch, one
        per rank (a rank's next one waits for the next node batch): (file, JSON body, step rows)."""
        now_ns = time.time_ns()
        taken: list[tuple[SpoolEntry, bytes, int]] = []
        ranks = {self.ctx.rank} if own_rank else set()
        size = 0
        for entry in self.spool.handed(self.ctx.run_id):
            if len(taken) + len(ranks) >= node.MAX_ENTRIES or now_ns - written_ns(entry.name) < min_age_s * 1e9:
                break  # oldest first: the rest are younger
            writer = writer_of(entry.name)
            if writer is None or writer[1] in ranks:
                continue
            claimed = self.spool.claim(entry)
            if claimed is None:
                continue  # its writer took it back meanwhile
            try:
                request = read_entry(claimed)
                raw = node.raw_body(request)
            except (OSError, ValueError, KeyError, EOFError, zlib.error) as exc:
                self.once.warning("corrupt-spool", "phantomhub: unreadable spool file %s (%s); removed", claimed.path, exc)
                self.spool.remove(claimed)
                continue
            ours = node.handed_is_ours(request, run_id=self.ctx.run_id, token_fp=self.ctx.token_fp, server=self.settings.server)
            if not ours or (taken and size + len(raw) > node.MAX_RAW_BYTES):
                self.spool.release(claimed)  # its writer sends it after the hand-off timeout
                continue
            ranks.add(writer[1])
            size += len(raw)
            taken.append((claimed, raw, request.rows))
        return taken

    def _node_pass(self, *, final: bool) -> None:
        if self._node_role == node.PEER:
            self._handed_check(final=final)
        elif self._node_batches and self.healthy and self.settings.mode == "online" and not self.halted:
            with self._io_lock:  # late handed batches; at finish every one left
                late = node.late_s(self.settings.flush_interval_s)
                self._deliver_node(None, min_age_s=0.0 if final or self._direct() else late)

    def _handed_check(self, *, final: bool) -> None:
        """A peer forgets the handed batches local rank 0 delivered, and sends itself those it left
        longer than the hand-off timeout (at finish, all of them: nobody may be left to take them)."""
        if not self._handed:
            return
        now, timeout = time.monotonic(), node.handoff_timeout_s(self.settings.flush_interval_s)
        try:
            names = os.listdir(self.spool.root / self.ctx.run_id)
        except OSError:
            names = []
        present = set(names)
        with self._io_lock:
            keep: list[tuple[Path, float]] = []
            for k, (path, at) in enumerate(self._handed):
                if path.name not in present:
                    if any(name.startswith(path.name + CLAIM_MARK) for name in names):
                        keep.append((path, at))  # local rank 0 is sending it (or gave it back: still ours to watch)
                    continue
                if not final and now - at < timeout:
                    keep.append((path, at))
                    continue
                if not final and now >= self._node_off_until:
                    self._node_off_until = now + node.SILENT_BACKOFF_S
                    self.once.warning("node-silent", "phantomhub: local rank 0 left this rank's batches unsent; sending them")
                entry = self.spool.claim(SpoolEntry(path=path, run_id=self.ctx.run_id, name=path.name, owner_pid=self.spool.pid))
                if entry is None:
                    keep.append((path, at))  # local rank 0 took it just now
                    continue
                if not self._replay_one(entry, own=False):  # given back: the server is down, try later
                    keep.extend(self._handed[k:])
                    break
            self._handed = keep

    def _is_abandoned(self) -> bool:
        return self._abandoned

    def _remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return self._deadline - time.monotonic()

    def _deliver(self, request: SpooledRequest) -> None:
        s = self.settings
        if s.mode == "offline" or self.halted or self._own_backlog:
            self._spool(request)
            return
        if not self.healthy and time.monotonic() < self._next_probe:
            self._spool(request)
            return
        attempt = 0
        while True:
            remaining = self._remaining()
            if remaining is not None and remaining < 0.05:
                self._spool(request)
                return
            timeout = s.request_timeout_s if remaining is None else min(s.request_timeout_s, remaining)
            outcome, response = self._send(request, timeout)
            if outcome == OK:
                self._mark_healthy()
                self.counters.sent_batches += 1
                if request.kind == "run":
                    self._registered(request, response)
                return
            if outcome == RETRY:
                retry_after = _retry_after(response)
                delay = backoff_delay(
                    attempt,
                    base_s=s.backoff_base_s,
                    max_s=s.backoff_max_s,
                    retry_after_s=retry_after,
                    retry_after_max_s=s.retry_after_max_s,
                )
                attempt += 1
                if attempt > s.max_retries or not self._sleep(delay):
                    self._spool(request)
                    self._mark_unhealthy(retry_after)
                    return
                continue
            if outcome == TOO_LARGE:
                self._split_and_deliver(request, response)
                return
            if outcome == HALT and self._batch_unknown(request, response):
                for part in unbatch(request):
                    self._deliver(part)
                return
            if outcome == HALT:
                self._halt(request, response)
                self._spool(request)
                return
            self._reject(request, response)
            return

    def _batch_unknown(self, request: SpooledRequest, response: Response | None) -> bool:
        """A server older than the batch endpoint: the separate endpoints from now on."""
        if request.kind != "batch" or not batch_endpoint_missing(response):
            return False
        if self.settings.wire == "batch":
            self.settings.wire = "separate"
            logger.info("phantomhub: server %s has no batch endpoint; sending one request per kind", self.settings.server)
        return True

    def _send(self, request: SpooledRequest, timeout: float) -> tuple[str, Response | None]:
        try:
            response = self.transport.request("POST", request.path, request.body, gzipped=request.gzipped, timeout_s=timeout)
        except NetworkError as exc:
            self.counters.send_failures += 1
            self.once.warning(
                "network",
                "phantomhub: server %s unreachable (%s); spooling to %s",
                self.settings.server,
                exc,
                self.spool.root,
            )
            return RETRY, None
        outcome = classify(response.status)
        if outcome == RETRY:
            self.counters.send_failures += 1
            self.once.warning(
                f"status-{response.status}",
                "phantomhub: server answered %d (%s); will retry",
                response.status,
                response.error_text(),
            )
        return outcome, response

    def _sleep(self, delay: float) -> bool:
        """Waits ``delay`` seconds; False if a finish() deadline falls before the wait would end."""
        until = time.monotonic() + delay
        while True:
            now = time.monotonic()
            if now >= until:
                return True
            if self._deadline is not None and self._deadline < until:
                return False
            if self._thread is threading.current_thread() and not self._final_requested.is_set():
                # finish() sets its deadline, then this event: wake up to re-check the deadline
                self._final_requested.wait(until - now)
            else:
                time.sleep(until - now)

    def _mark_healthy(self) -> None:
        if not self.healthy:
            logger.info("phantomhub: server %s reachable again", self.settings.server)
        self.healthy = True
        self._fail_streak = 0

    def _mark_unhealthy(self, retry_after: float | None) -> None:
        s = self.settings
        self.healthy = False
        delay = backoff_delay(
            self._fail_streak,
            base_s=s.backoff_base_s,
            max_s=s.backoff_max_s,
            retry_after_s=retry_after,
            retry_after_max_s=s.retry_after_max_s,
        )
        self._fail_streak += 1
        self._next_probe = time.monotonic() + delay

    def _halt(self, request: SpooledRequest, response: Response | None) -> None:
        self.halted = True
        status = response.status if response is not None else 0
        text = response.error_text() if response is not None else ""
        self.once.error(
            "halt",
            "phantomhub: server refused %s with %d (%s); keeping telemetry in %s — fix the token or run and "
            "upload it with `phantomhub-agent sync`",
            request.path,
            status,
            text,
            self.spool.root,
        )

    def _reject(self, request: SpooledRequest, response: Response | None) -> None:
        self.counters.rejected_batches += 1
        status = response.status if response is not None else 0
        text = response.error_text() if response is not None else ""
        self.once.error(
            f"reject-{request.kind}-{status}",
            "phantomhub: server rejected a %s batch with %d (%s); dropped, not retried",
            request.kind,
            status,
            text,
        )
        if self.settings.debug:
            self.errors.append(RuntimeError(f"{request.kind} batch rejected with {status}: {text}"))

    def _split_and_deliver(self, request: SpooledRequest, response: Response | None) -> None:
        halves = split_request(request)
        if halves is None:
            self._reject(request, response)
            return
        for half in halves:
            self._deliver(half)

    def _spool(self, request: SpooledRequest) -> None:
        try:
            written = self.spool.write(request)
        except OSError as exc:
            self.counters.spool_dropped_batches += 1
            if request.kind in ("steps", "batch"):  # a batch's rows are its steps
                self.counters.dropped_steps += request.rows
            self.once.error("spool-write", "phantomhub: cannot write the spool (%s); telemetry dropped", exc)
            return
        if written is not None:
            self.counters.spooled_batches += 1
            if request.run_id == self.ctx.run_id:
                self._own_backlog = True

    # -- replay ----------------------------------------------------------------------------------

    def _replay(self, *, final: bool) -> None:
        if self.settings.mode == "offline" or self.halted:
            return
        if not self.healthy and time.monotonic() < self._next_probe and not final:
            return  # at finish, one more probe regardless: the server may be back
        started = time.monotonic()
        budget = REPLAY_BUDGET_S
        with self._io_lock:
            if self._own_backlog:
                entries = self.spool.own(self.ctx.run_id)
                for entry in entries:
                    if self._out_of_time(started, budget):
                        return
                    if not self._replay_one(entry, own=True):
                        return
                self._own_backlog = bool(entries) and self.spool.has_own(self.ctx.run_id)
                if self._own_backlog:
                    return
            if time.monotonic() < self._next_orphan_scan:
                return
            if final:
                # Leftovers of earlier processes may go out at finish too, within what the deadline spares.
                remaining = self._remaining()
                if remaining is None or remaining < 1.0:
                    return
                budget = min(budget, remaining - 0.5)
            self._next_orphan_scan = time.monotonic() + ORPHAN_SCAN_EVERY_S
            for entry in self.spool.orphans():
                if entry.run_id in self._skip_runs:
                    continue
                if self._out_of_time(started, budget):
                    self._next_orphan_scan = 0.0
                    return
                claimed = self.spool.claim(entry)
                if claimed is None:
                    continue
                if not self._replay_one(claimed, own=False):
                    return

    def _replay_predecessors(self) -> None:
        """What a dead earlier process of this run and rank left on this machine (its last
        checkpoint, typically), sent before this process's registration: the answer's step base
        then counts those steps, and this process numbers its own after them."""
        if self.settings.mode == "offline" or self.halted:
            return
        started = time.monotonic()
        with self._io_lock:
            for entry in self.spool.orphans():
                writer = writer_of(entry.name)
                if entry.run_id != self.ctx.run_id or writer is None or writer[1] != self.ctx.rank:
                    continue
                if entry.run_id in self._skip_runs or self._out_of_time(started, REPLAY_BUDGET_S):
                    return
                claimed = self.spool.claim(entry)
                if claimed is not None and not self._replay_one(claimed, own=False):
                    return

    def _replayed_registration(self, entry: Any, request: SpooledRequest, response: Response | None) -> None:
        """Shifts the steps its process spooled after it, before the registration file goes."""
        writer = writer_of(entry.name)
        rank = writer[1] if writer is not None else self.ctx.rank
        answer = response.json() if response is not None else None
        base = b.step_base_from_run(answer, rank)
        self.spool.rebase_after(entry, base)
        if self._is_registration(request):
            self._step_base = base
            self._wire_from(answer)
            self._notify_registered(response)

    def _out_of_time(self, started: float, budget: float) -> bool:
        remaining = self._remaining()
        return time.monotonic() - started > budget or (remaining is not None and remaining < 0.1)

    def _replay_one(self, entry: Any, *, own: bool) -> bool:
        """Sends one spooled file. False stops the replay (server unhealthy or time is up)."""
        try:
            request = read_entry(entry)
        except (OSError, ValueError, KeyError) as exc:
            self.once.warning("corrupt-spool", "phantomhub: unreadable spool file %s (%s); removed", entry.path, exc)
            self.spool.remove(entry)
            return True
        if not own and request.token_fp != self.ctx.token_fp:
            self.spool.release(entry)
            self._skip_runs.add(entry.run_id)
            return True
        remaining = self._remaining()
        timeout = self.settings.request_timeout_s if remaining is None else min(self.settings.request_timeout_s, remaining)
        outcome, response = self._send(request, timeout)
        if outcome == OK:
            if request.kind == "run":
                self._replayed_registration(entry, request, response)
            self.spool.remove(entry)
            self.counters.replayed_batches += 1
            self._mark_healthy()
            return True
        if outcome == RETRY:
            if not own:
                self.spool.release(entry)
            self._mark_unhealthy(_retry_after(response))
            return False
        if outcome == HALT and self._batch_unknown(request, response):
            for part in unbatch(request):
                if own:
                    self._spool(part)
                else:
                    self._deliver(part)
            self.spool.remove(entry)
            return True
        if outcome == HALT:
            if own:
                self._halt(request, response)
                return False
            self.spool.release(entry)
            self._skip_runs.add(entry.run_id)
            return True
        if outcome == TOO_LARGE:
            halves = split_request(request)
            if halves is not None:
                for half in halves:
                    if own:
                        self._spool(half)
                    else:
                        self._deliver(half)
                self.spool.remove(entry)
                return True
        self._reject(request, response)
        self.spool.remove(entry)
        return True

    # -- flush and finish ------------------------------------------------------------------------

    def flush(self, timeout_s: float) -> bool:
        """Pushes everything recorded so far (except the step still waiting for its duration)."""
        if self.alive():
            self._flush_done.clear()
            self._flush_requested.set()
            self._wake.set()
            return self._flush_done.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        self._deadline = deadline
        try:
            self.tick(flush=True)
        finally:
            self._deadline = None
        return True

    def finish(self, timeout_s: float) -> bool:
        """Final flush within ``timeout_s``; what cannot be sent by then is spooled. Never hangs."""
        if self._closed:
            return True
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._deadline = deadline
        delivered = False
        if self.alive():
            self._final_requested.set()
            self._wake.set()
            delivered = self._final_done.wait(max(0.0, deadline - time.monotonic()) + 0.25)
        else:
            try:
                self._final_pass()
                delivered = True
            except Exception as exc:
                self._internal_error(exc)
        if not delivered:
            self._emergency_spool()
        self._closed = True
        self.transport.close()
        return delivered

    def _final_pass(self) -> None:
        try:
            while True:
                self.tick(final=True)
                remaining = self._remaining()
                if not self._pending or remaining is None or remaining < 0.6:
                    break
                time.sleep(0.005)  # CUDA events still running: poll, never synchronize
            if self._pending:
                with self._buf_lock:
                    self._drain(final=True, flush=True)
                self._deliver_outbox()
        except Exception as exc:
            self._internal_error(exc)
            self._emergency_spool()

    def _emergency_spool(self) -> None:
        """The deadline passed with the sender stuck: spool whatever is left (duplicates are harmless)."""
        self._abandoned = True
        self._base_pending = False  # the registration is spooled below, with everything else
        try:
            acquired = self._buf_lock.acquire(timeout=0.5)
            try:
                self._drain(final=True, flush=True)
            finally:
                if acquired:
                    self._buf_lock.release()
            taken = self._marks_taken()
            for request in list(self._outbox):
                self._spool(request)
            self._outbox.clear()
            self._checkpoints_release(taken)
        except Exception as exc:
            self._internal_error(exc)

    def _internal_error(self, exc: BaseException) -> None:
        self.counters.internal_errors += 1
        self.once.error(
            f"internal-{type(exc).__name__}",
            "phantomhub: internal error (telemetry may be incomplete): %s\n%s",
            exc,
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        )
        if self.settings.debug:
            self.errors.append(exc)


def _retry_after(response: Response | None) -> float | None:
    if response is None:
        return None
    return _parse_retry_after(response.headers.get("retry-after"))


def batch_endpoint_missing(response: Response | None) -> bool:
    """A 404 that is not "run not found": the server has no POST /api/v1/runs/{id}/batch."""
    if response is None or response.status != 404:
        return False
    data = response.json()
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return not (isinstance(message, str) and message.startswith("run not found"))


def unbatch(request: SpooledRequest) -> list[SpooledRequest]:
    """A combined batch as the separate requests an older server takes (/steps, /samples, /events)."""
    raw = gzip.decompress(request.body) if request.gzipped else request.body
    payload = b.unpack_payload(json.loads(raw.decode("utf-8")))  # an older server: arrays only
    extra = {key: value for key, value in payload.items() if key not in b.BATCH_PARTS}
    base_path = request.path[: -len("/batch")]
    out = []
    if "counters" in payload:  # an older server takes them as a counters event
        event = {"id": uuid.uuid4().hex, "kind": "counters", "rank": extra.get("rank", 0), "t_ns": request.created_ns,
                 "data": payload.pop("counters")}  # fmt: skip
        payload["events"] = [*payload.get("events", []), event]
    for name in b.BATCH_PARTS:
        if name not in payload:
            continue
        body = b.encode_json({"events": payload[name]} if name == "events" else {**extra, name: payload[name]})
        rows = len(payload[name]) if name == "events" else b.column_rows(payload[name])
        gzipped = request.gzipped and len(body) >= 1024
        out.append(
            dataclasses.replace(
                request,
                path=f"{base_path}/{name}",
                body=b.gzip_bytes(body) if gzipped else body,
                gzipped=gzipped,
                kind=name,
                rows=rows,
                rebase=request.rebase and name == "steps",
            )
        )
    return out


def split_batch(request: SpooledRequest, payload: dict[str, Any]) -> list[SpooledRequest] | None:
    """A combined batch the server found too large: its parts apart, or one part halved."""
    parts = [name for name in b.BATCH_PARTS if name in payload]
    extra = {key: value for key, value in payload.items() if key not in b.BATCH_PARTS}
    pieces: list[tuple[dict[str, Any], int, bool]] = []
    if len(parts) > 1:
        for name in parts:
            rows = b.column_rows(payload[name]) if name == "steps" else 0
            pieces.append(({**extra, name: payload[name]}, rows, request.rebase and name == "steps"))
    elif parts and parts[0] == "events" and len(payload["events"]) > 1:
        events = payload["events"]
        half = (len(events) + 1) // 2
        pieces = [({**extra, "events": events[:half]}, 0, False), ({**extra, "events": events[half:]}, 0, False)]
    elif parts and parts[0] not in ("events", "counters") and b.column_rows(payload[parts[0]]) > 1:
        name = parts[0]
        for cols in b.halve_columns(payload[name]):
            pieces.append(({**extra, name: cols}, b.column_rows(cols) if name == "steps" else 0, request.rebase))
    else:
        return None
    out = []
    for part, rows, rebase in pieces:
        raw = b.encode_json(part)
        body = b.gzip_bytes(raw) if request.gzipped else raw
        out.append(dataclasses.replace(request, body=body, rows=rows, rebase=rebase))
    return out


def split_request(request: SpooledRequest) -> list[SpooledRequest] | None:
    """Halves a columnar batch (steps or samples) for a server that answered 413."""
    if request.kind == "batch":
        raw = gzip.decompress(request.body) if request.gzipped else request.body
        return split_batch(request, b.unpack_payload(json.loads(raw.decode("utf-8"))))
    if request.kind not in ("steps", "samples", "events") or request.rows <= 1:
        return None
    body = gzip.decompress(request.body) if request.gzipped else request.body
    payload = b.unpack_payload(json.loads(body.decode("utf-8")))
    out = []
    if request.kind == "events":
        events = payload["events"]
        half = (len(events) + 1) // 2
        parts = [({"events": events[:half]}, half), ({"events": events[half:]}, len(events) - half)]
    else:
        first, second = b.halve_columns(payload[request.kind])
        parts = []
        for cols in (first, second):
            part = dict(payload)
            part[request.kind] = cols
            parts.append((part, b.column_rows(cols)))
    for part, rows in parts:
        raw = b.encode_json(part)
        out.append(
            dataclasses.replace(
                request,
                body=b.gzip_bytes(raw) if request.gzipped else raw,
                rows=rows,
            )
        )
    return out

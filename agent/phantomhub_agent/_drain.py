"""The sender's side of the hot path: what the training thread recorded, into requests.

The training thread appends raw step tuples and markers to ``Worker.steps``, and events and
complete requests (the run's metadata) to ``Worker.items`` (``_hotpath``). Each pass of the sender
thread, under the worker's buffer lock, ``Drain``:

- moves the step records to ``pending`` and resolves them in order: a step's CUDA events once they
  have completed (never synchronized; dropped at ``finish()`` if the deadline is near), then its
  duration, which ends at the next step's start or at a marker (``_batcher.DurationResolver``);
- appends the ended steps to the step columns, marked auto-numbered or numbered by the user, and
  the events to their list; a complete request goes straight to the outbox;
- cuts what is due into requests (``cut``) and appends them to the worker's outbox, which
  ``_delivery`` sends. A part is due when its oldest row is a flush interval old (offline: a
  checkpoint interval, since its batches go to the spool), or when it holds a request's worth of
  rows. On the batch wire, once any part is due everything pending rides in one request; on the
  separate wire each kind has its own. On a node that sends one request per node (``_node``), the
  ranks cut on the same wall-clock boundaries instead.

Auto-numbered steps are shifted by the step base of the registration's answer. While that answer
is awaited the steps stay in their columns (``steps_held``: cut again once it is in); when the
registration was spooled (base unknown) they go marked ``rebase`` for the spool to shift later.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

from . import _batcher as b
from . import _node as node
from ._spool import SpooledRequest

if TYPE_CHECKING:
    from ._worker import Marks, Worker

EVENTS_PER_REQUEST = 500

# Markers the training thread puts in the step deque, as (kind, perf_counter_ns).
MARK_BOUNDARY = "B"  # a phase began: the held step ends here
MARK_END = "E"  # the run ends: the held step ends at its own end
MARK_NUMBERED = "N"  # the user numbers steps from here on: later rows are never shifted


class Drain:
    """The columns and events recorded but not cut into a request yet (one per process: a forked
    child starts a new one)."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.pending: collections.deque[Any] = collections.deque()
        self.resolver = b.DurationResolver()
        self.step_cols = b.StepBuffer(worker.ctx.clock_offset_ns)
        self.sample_cols = b.ColumnBuffer(b.SAMPLE_COLUMNS)
        self.events: list[dict[str, Any]] = []
        self.events_oldest: int | None = None
        self.counters_field: dict[str, int] | None = None  # the counters for the next batch
        self.counters_oldest: int | None = None
        self.events_added = 0  # events ever added to / taken from ``events`` (checkpoint positions)
        self.events_taken = 0
        self.auto_until: int | None = None  # rows pushed before MARK_NUMBERED (None: not seen)
        self.pushed = 0
        self.emitted = 0
        self.steps_held = False
        self.next_cut_ns: int | None = None  # the next wall-clock cut, while cuts are aligned

    def drain(self, *, final: bool, flush: bool) -> None:
        w = self.w
        steps = w.steps
        pending = self.pending
        while steps:
            pending.append(steps.popleft())
        self.resolve_pending(final=final)
        items = w.items
        while items:
            kind, value = items.popleft()
            if kind == "event":
                self.event_add(value)
            else:  # a complete request (the run's metadata)
                w.outbox.append(value)
        self.cut(force=flush)

    def resolve_pending(self, *, final: bool) -> None:
        pending = self.pending
        cuda = self.w.cuda
        now_ns = time.monotonic_ns()
        while pending:
            item = pending[0]
            if len(item) == 2:
                pending.popleft()
                kind, t_pc = item
                if kind == MARK_NUMBERED:
                    if self.auto_until is None:
                        self.auto_until = self.pushed
                    continue
                row = self.resolver.boundary(t_pc) if kind == MARK_BOUNDARY else self.resolver.close()
                if row is not None:
                    self._emit(row, now_ns)
                continue
            marks = item[b.R_MARKS]
            if marks:
                deadline = self.w.deadline
                if cuda is None:
                    item = (*item[: b.R_MARKS], None)
                elif cuda.ready(marks):
                    values = list(item)
                    cuda.resolve(values, b.R_DATA, marks)
                    values[b.R_MARKS] = None
                    item = tuple(values)
                elif final and deadline is not None and time.monotonic() >= deadline - 0.5:
                    cuda.drop(marks)  # never resolved in time: those stages stay null
                    item = (*item[: b.R_MARKS], None)
                else:
                    break  # rows stay in order: wait for this step's events
            pending.popleft()
            row = self.resolver.push(item)
            self.pushed += 1
            if row is not None:
                self._emit(row, now_ns)

    def _emit(self, row: b.Ended, now_ns: int) -> None:
        # Rows leave the resolver in the order they were pushed: the k-th emitted is the k-th pushed.
        auto = self.auto_until is None or self.emitted < self.auto_until
        self.emitted += 1
        self.step_cols.append(row, now_ns, auto)

    def marks_taken(self) -> Marks:
        """Positions (steps, samples, events) of the rows cut into requests so far."""
        return self.step_cols.taken, self.sample_cols.taken, self.events_taken

    # -- cutting requests ----------------------------------------------------------------------------

    def cut(self, *, force: bool) -> None:
        w = self.w
        if w.settings.wire == "batch":
            self._cut_batches(force=force)
            return
        s, reg = w.settings, w.registration
        now_ns = time.monotonic_ns()
        max_age = self.max_age_ns()
        extra = {"rank": w.ctx.rank, "host": w.ctx.host}
        run_path = f"/api/v1/runs/{w.ctx.run_id}"
        self.steps_held = False
        while len(self.step_cols) and (force or self.step_cols.due(now_ns, s.batch_max_rows, max_age)):
            if reg.pending:
                self.steps_held = True  # cut again once the registration is answered
                break
            auto = self.step_cols.head_is_auto
            cols = self.step_cols.take(s.batch_max_rows)
            base = reg.step_base
            if auto and base:
                cols = b.shift_steps(cols, base)
            cols = b.compact_columns(cols, b.REQUIRED_STEP_COLUMNS)
            rebase = auto and base is None
            packed = reg.packed and not rebase
            steps = b.fit_columns("steps", cols, extra, s.batch_max_bytes, packed=packed, nulls=reg.packed_nulls)
            for _payload, body, rows in steps:
                w.outbox.append(self.request("steps", run_path + "/steps", body, rows, rebase=rebase))
        while len(self.sample_cols) and (force or self.sample_cols.due(now_ns, s.batch_max_rows, max_age)):
            cols = b.compact_columns(self.sample_cols.take(s.batch_max_rows), b.REQUIRED_SAMPLE_COLUMNS)
            samples = b.fit_columns("samples", cols, extra, s.batch_max_bytes, packed=reg.packed, nulls=reg.packed_nulls)
            for _payload, body, rows in samples:
                w.outbox.append(self.request("samples", run_path + "/samples", body, rows))
        events_due = self.events_oldest is not None and now_ns - self.events_oldest >= max_age
        if self.events and (force or events_due or len(self.events) >= EVENTS_PER_REQUEST):
            events = self.events_take(len(self.events))
            for lo in range(0, len(events), EVENTS_PER_REQUEST):
                chunk = events[lo : lo + EVENTS_PER_REQUEST]
                body = b.encode_json({"events": chunk})
                w.outbox.append(self.request("events", run_path + "/events", body, len(chunk)))

    def max_age_ns(self) -> int:
        s = self.w.settings
        interval = s.flush_interval_s
        if s.mode == "offline" and s.checkpoint_interval_s > 0:
            interval = min(interval, s.checkpoint_interval_s)  # its batches go to the spool: they are the checkpoints
        return int(interval * 1e9)

    def _parts_due(self, now_ns: int, force: bool) -> bool:
        s = self.w.settings
        max_age = self.max_age_ns()
        counters = self.counters_field is not None
        pending = bool(len(self.step_cols) or len(self.sample_cols) or self.events or counters)
        if force:
            return pending
        if self.cuts_aligned():
            # The node's ranks cut on the same wall-clock boundaries (``_node``); size limits still cut early.
            wall_ns = time.time_ns()
            if self.next_cut_ns is None:
                self.next_cut_ns = self._boundary_after(wall_ns)
            full = len(self.step_cols) >= s.batch_max_rows or len(self.sample_cols) >= s.batch_max_rows
            if full or len(self.events) >= EVENTS_PER_REQUEST:
                return pending
            if wall_ns < self.next_cut_ns:
                return False
            self.next_cut_ns = self._boundary_after(wall_ns)  # this boundary is taken, whatever is pending
            return pending
        if self.step_cols.due(now_ns, s.batch_max_rows, max_age) or self.sample_cols.due(now_ns, s.batch_max_rows, max_age):
            return True
        if counters and self.counters_oldest is not None and now_ns - self.counters_oldest >= max_age:
            return True
        events_due = self.events_oldest is not None and now_ns - self.events_oldest >= max_age
        return bool(self.events) and (events_due or len(self.events) >= EVENTS_PER_REQUEST)

    def _cut_batches(self, *, force: bool) -> None:
        """One request per interval: once any part is due, everything pending rides along.

        Steps stay behind while the registration's answer (their base) is awaited; the samples
        and events go meanwhile, as they do on the separate wire.
        """
        w = self.w
        s, reg = w.settings, w.registration
        now_ns = time.monotonic_ns()
        extra = {"rank": w.ctx.rank, "host": w.ctx.host}
        path = f"/api/v1/runs/{w.ctx.run_id}/batch"
        self.steps_held = False
        while self._parts_due(now_ns, force):
            parts: dict[str, Any] = {}
            rebase = False
            if len(self.step_cols) and reg.pending:
                self.steps_held = True  # cut again once the registration is answered
            elif len(self.step_cols):
                auto = self.step_cols.head_is_auto
                cols = self.step_cols.take(s.batch_max_rows)
                base = reg.step_base
                if auto and base:
                    cols = b.shift_steps(cols, base)
                parts["steps"] = b.compact_columns(cols, b.REQUIRED_STEP_COLUMNS)
                rebase = auto and base is None
            if len(self.sample_cols):
                parts["samples"] = b.compact_columns(self.sample_cols.take(s.batch_max_rows), b.REQUIRED_SAMPLE_COLUMNS)
            if self.events:
                parts["events"] = self.events_take(EVENTS_PER_REQUEST)
            if self.counters_field is not None:
                parts["counters"], self.counters_field, self.counters_oldest = self.counters_field, None, None
            if not parts:
                return  # only held steps are pending
            batches = b.fit_batch(parts, extra, s.batch_max_bytes, rebase=rebase, packed=reg.packed, nulls=reg.packed_nulls)
            for body, rows, part_rebase in batches:
                w.outbox.append(self.request("batch", path, body, rows, rebase=part_rebase))

    def cuts_aligned(self) -> bool:
        w = self.w
        return w.node_role is not None and w.registration.node_batches and w.settings.mode == "online"

    def _boundary_after(self, now_ns: int) -> int:
        # Local rank 0 cuts a little after the peers' boundary (the first after now, as theirs).
        w = self.w
        interval = w.settings.flush_interval_s
        offset = node.gather_s(interval) if w.node_role == node.LEADER else 0.0
        return node.boundary_after(now_ns, interval, node.run_phase_s(w.ctx.run_id, interval)) + int(offset * 1e9)

    def request(self, kind: str, path: str, body: bytes, rows: int, *, rebase: bool = False) -> SpooledRequest:
        w = self.w
        gzipped = len(body) >= w.settings.gzip_min_bytes
        return SpooledRequest(
            path=path,
            body=b.gzip_bytes(body) if gzipped else body,
            gzipped=gzipped,
            kind=kind,
            run_id=w.ctx.run_id,
            rows=rows,
            token_fp=w.ctx.token_fp,
            server=w.settings.server,
            created_ns=time.time_ns(),
            rebase=rebase,
        )

    # -- events and counters -----------------------------------------------------------------------

    def event_add(self, event: dict[str, Any]) -> None:
        if self.events_oldest is None:
            self.events_oldest = time.monotonic_ns()
        self.events.append(event)
        self.events_added += 1

    def events_take(self, n: int) -> list[dict[str, Any]]:
        taken = self.events[:n]
        del self.events[:n]
        self.events_taken += len(taken)
        if not self.events:
            self.events_oldest = None
        return taken

    def counters_set(self, data: dict[str, int]) -> None:
        """The counters for the next batch's ``counters`` field."""
        self.counters_field = data  # the latest replaces one not sent yet: they are cumulative
        if self.counters_oldest is None:
            self.counters_oldest = time.monotonic_ns()

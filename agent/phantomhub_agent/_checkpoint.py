"""Checkpoints: what waits in memory for its request, on disk against a SIGKILL.

With a long flush interval (60 s by default) a SIGKILL would lose a minute of what waits in
memory. So every ``checkpoint_interval_s`` (10 s) the rows and events recorded since the previous
checkpoint, and not cut into a request yet, are written to the spool as one request of their own
(a delta, never the whole buffer again). The live process never sends them (they are not
backlog); it deletes them once the requests those rows went out in were delivered or spooled
(``release``, after each delivery of the outbox). If it dies first, the orphan replay (the next
agent on the machine, or ``sync``) sends them; what the server has already is a duplicate it
ignores.

Steps wait for the next checkpoint while their base is awaited (the registration's answer,
normally the first pass); steps whose base is unknown because the registration was spooled are
checkpointed marked for a shift, like spooled ones. Offline, the batches themselves go to the
spool: they are cut at the checkpoint interval instead, and no checkpoints are written.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _batcher as b
from ._split import unbatch
from ._spool import SpooledRequest

if TYPE_CHECKING:
    from ._worker import Marks, Worker


class Checkpoints:
    """The checkpoint files of this process not deleted yet (one per process: a forked child
    starts a new one)."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.next_at = time.monotonic() + worker.settings.checkpoint_interval_s
        # Positions (steps, samples, events appended) the checkpoints written so far cover, and
        # the files not deleted yet with the positions each one covers up to.
        self.covered: Marks = (0, 0, 0)
        self.files: list[tuple[Path, Marks]] = []
        self.lock = threading.Lock()

    def due(self, now_mono: float) -> bool:
        s = self.w.settings
        # Not shorter than the flush interval: the batches themselves come as often, nothing to gain.
        useful = 0 < s.checkpoint_interval_s < s.flush_interval_s and s.mode == "online"
        return useful and now_mono >= self.next_at

    def delta(self) -> tuple[list[SpooledRequest], Marks]:
        """The requests that carry what was recorded since the previous checkpoint and is not cut
        yet (call with the buffer lock), and the positions they cover up to."""
        w = self.w
        drain, reg = w.drain, w.registration
        now, interval = time.monotonic(), w.settings.checkpoint_interval_s
        # On schedule, not an interval after this pass: a row waits at most an interval and a poll.
        self.next_at = max(self.next_at + interval, now + interval / 2)
        step_mark, sample_mark, event_mark = self.covered
        pieces: list[tuple[dict[str, Any], bool]] = []
        parts: dict[str, Any] = {}
        if not reg.pending:  # otherwise the steps wait for the next checkpoint
            auto, explicit = drain.step_cols.since(step_mark)
            step_mark = drain.step_cols.appended
            base = reg.step_base
            if b.column_rows(auto) and base is None:  # the spool shifts them once the base is known
                pieces.append(({"steps": b.compact_columns(auto, b.REQUIRED_STEP_COLUMNS)}, True))
                auto = {name: [] for name in auto}
            steps = b.concat_columns(b.shift_steps(auto, base or 0), explicit)
            if b.column_rows(steps):
                parts["steps"] = b.compact_columns(steps, b.REQUIRED_STEP_COLUMNS)
        samples = drain.sample_cols.since(sample_mark)
        sample_mark = drain.sample_cols.appended
        if b.column_rows(samples):
            parts["samples"] = b.compact_columns(samples, b.REQUIRED_SAMPLE_COLUMNS)
        events = drain.events[max(event_mark, drain.events_taken) - drain.events_taken :]
        event_mark = drain.events_added
        if events:
            parts["events"] = events
        if parts:
            pieces.append((parts, False))
        marks = (step_mark, sample_mark, event_mark)
        self.covered = marks
        extra = {"rank": w.ctx.rank, "host": w.ctx.host}
        path = f"/api/v1/runs/{w.ctx.run_id}/batch"
        requests = []
        for piece, rebase in pieces:
            for body, rows, part_rebase in b.fit_batch(
                piece, extra, w.settings.batch_max_bytes, rebase=rebase, packed=reg.packed, nulls=reg.packed_nulls
            ):
                request = drain.request("batch", path, body, rows, rebase=part_rebase)
                requests.extend(unbatch(request) if w.settings.wire == "separate" else [request])
        return requests, marks

    def write(self, requests: list[SpooledRequest], marks: Marks) -> None:
        w = self.w
        for request in requests:
            try:
                written = w.spool.write(request, checkpoint=True)
            except OSError as exc:
                w.once.error("checkpoint-write", "phantomhub: cannot write a checkpoint to the spool (%s)", exc)
                continue
            if written is None:
                continue  # the spool is full: the rows are still in memory, as without checkpoints
            w.counters.checkpoints_written += 1
            with self.lock:
                self.files.append((written, marks))

    def release(self, taken: Marks) -> None:
        """Deletes the checkpoints whose rows were all cut (up to ``taken``) and sent or spooled."""
        with self.lock:
            done = [path for path, marks in self.files if all(m <= t for m, t in zip(marks, taken))]
            if not done:
                return
            self.files = [(path, marks) for path, marks in self.files if path not in done]
        for path in done:
            self.w.spool.discard(path)

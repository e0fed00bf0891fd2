"""The replay: spooled requests sent once the server answers again.

Each pass, after the outbox, the sender replays within ``REPLAY_BUDGET_S``: first this process's
own backlog of its run, in order (new requests queue behind it meanwhile, see ``_delivery``), then,
at most every ``ORPHAN_SCAN_EVERY_S``, the orphans: files of processes that died, claimed one at a
time so that two agents on a machine never send the same file (``_spool``). An orphan signed with
another token is left to its own agent (the run is skipped from then on). A process whose
registration is about to go out first replays what a dead predecessor of its run and rank left
(its last checkpoint, typically), so that the answer's step base counts those steps.

A replayed registration carries the step base of its process: the steps that process spooled
marked for a shift are shifted by it (``Spool.rebase_after``) before the registration's file goes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import _batcher as b
from ._delivery import retry_after
from ._split import split_request, unbatch
from ._spool import SpooledRequest, read_entry, writer_of
from ._transport import HALT, OK, RETRY, TOO_LARGE, Response

if TYPE_CHECKING:
    from ._worker import Worker

REPLAY_BUDGET_S = 2.0
ORPHAN_SCAN_EVERY_S = 60.0


class Replay:
    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.skip_runs: set[str] = set()  # orphans' runs signed with another token: not ours to send
        self.next_orphan_scan = 0.0

    def after_fork(self) -> None:
        self.next_orphan_scan = 0.0

    def replay(self, *, final: bool) -> None:
        w, d = self.w, self.w.delivery
        if d.halted:
            with w.io_lock:
                d.resume_on_new_token(throttled=not final)
        if w.settings.mode == "offline" or d.halted:
            return
        if not d.healthy and time.monotonic() < d.next_probe and not final:
            return  # at finish, one more probe regardless: the server may be back
        started = time.monotonic()
        budget = REPLAY_BUDGET_S
        with w.io_lock:
            if d.own_backlog:
                entries = w.spool.own(w.ctx.run_id)
                for entry in entries:
                    if self._out_of_time(started, budget):
                        return
                    if not self.replay_one(entry, own=True):
                        return
                d.own_backlog = bool(entries) and w.spool.has_own(w.ctx.run_id)
                if d.own_backlog:
                    return
            if time.monotonic() < self.next_orphan_scan:
                return
            if final:
                # Leftovers of earlier processes may go out at finish too, within what the deadline spares.
                remaining = w.remaining()
                if remaining is None or remaining < 1.0:
                    return
                budget = min(budget, remaining - 0.5)
            self.next_orphan_scan = time.monotonic() + ORPHAN_SCAN_EVERY_S
            for entry in w.spool.orphans():
                if entry.run_id in self.skip_runs:
                    continue
                if self._out_of_time(started, budget):
                    self.next_orphan_scan = 0.0
                    return
                claimed = w.spool.claim(entry)
                if claimed is None:
                    continue
                if not self.replay_one(claimed, own=False):
                    return

    def replay_predecessors(self) -> None:
        """What a dead earlier process of this run and rank left on this machine (its last
        checkpoint, typically), sent before this process's registration: the answer's step base
        then counts those steps, and this process numbers its own after them."""
        w = self.w
        if w.settings.mode == "offline" or w.delivery.halted:
            return
        started = time.monotonic()
        with w.io_lock:
            for entry in w.spool.orphans():
                writer = writer_of(entry.name)
                if entry.run_id != w.ctx.run_id or writer is None or writer[1] != w.ctx.rank:
                    continue
                if entry.run_id in self.skip_runs or self._out_of_time(started, REPLAY_BUDGET_S):
                    return
                claimed = w.spool.claim(entry)
                if claimed is not None and not self.replay_one(claimed, own=False):
                    return

    def _replayed_registration(self, entry: Any, request: SpooledRequest, response: Response | None) -> None:
        """Shifts the steps its process spooled after it, before the registration file goes."""
        w = self.w
        writer = writer_of(entry.name)
        rank = writer[1] if writer is not None else w.ctx.rank
        answer = response.json() if response is not None else None
        base = b.step_base_from_run(answer, rank)
        w.spool.rebase_after(entry, base)
        if w.is_registration(request):
            w.registration.step_base = base
            w.registration.terms_from(answer)
            w.notify_registered(response)

    def _out_of_time(self, started: float, budget: float) -> bool:
        remaining = self.w.remaining()
        return time.monotonic() - started > budget or (remaining is not None and remaining < 0.1)

    def replay_one(self, entry: Any, *, own: bool) -> bool:
        """Sends one spooled file. False stops the replay (server unhealthy or time is up)."""
        w, d = self.w, self.w.delivery
        try:
            request = read_entry(entry)
        except (OSError, ValueError, KeyError) as exc:
            w.once.warning("corrupt-spool", "phantomhub: unreadable spool file %s (%s); removed", entry.path, exc)
            w.spool.remove(entry)
            return True
        if not own and request.token_fp != w.ctx.token_fp:
            w.spool.release(entry)
            self.skip_runs.add(entry.run_id)
            return True
        outcome, response = d.send(request, d.timeout_s())
        if outcome == OK:
            if request.kind == "run":
                self._replayed_registration(entry, request, response)
            w.spool.remove(entry)
            w.counters.replayed_batches += 1
            d.mark_healthy()
            return True
        if outcome == RETRY:
            if not own:
                w.spool.release(entry)
            d.mark_unhealthy(retry_after(response))
            return False
        requeue = d.spool if own else d.deliver  # this process's own entries go back to its spool
        if outcome == HALT and d.batch_unknown(request, response):
            for part in unbatch(request):
                requeue(part)
            w.spool.remove(entry)
            return True
        if outcome == HALT:
            if own:
                d.halt(request, response)
                return False
            w.spool.release(entry)
            self.skip_runs.add(entry.run_id)
            return True
        if outcome == TOO_LARGE:
            halves = split_request(request)
            if halves is not None:
                for half in halves:
                    requeue(half)
                w.spool.remove(entry)
                return True
        d.reject(request, response)
        w.spool.remove(entry)
        return True

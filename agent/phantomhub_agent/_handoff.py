"""One request per node, the sender's side: a peer hands its batches over, local rank 0 sends the
node's together (the protocol and its reasons: ``_node``).

A batch of this rank's goes this way (``node_part``) only while the server takes node batches, the
rank knows its local rank, is online, not halted, healthy and without a backlog of its own, the
batch carries no steps marked for a shift, and (a peer) no ``finish()`` or ``flush()`` is under
way and local rank 0 was not found silent lately. Everything else takes the usual path
(``_delivery``).
"""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from . import _node as node
from ._delivery import retry_after
from ._log import logger
from ._split import batch_endpoint_missing
from ._spool import CLAIM_MARK, SpooledRequest, SpoolEntry, read_entry, writer_of, written_ns
from ._transport import HALT, OK, RETRY

if TYPE_CHECKING:
    from ._worker import Worker


class Handoff:
    def __init__(self, worker: Worker) -> None:
        self.w = worker
        # A peer's handed files not seen taken yet, with when they were written (monotonic).
        self.handed: list[tuple[Path, float]] = []
        self.node_off_until = 0.0  # a peer sends for itself until then (local rank 0 was silent)

    def after_fork(self) -> None:
        self.handed = []
        self.node_off_until = 0.0

    def direct(self) -> bool:
        """finish() or flush() is under way: every rank sends for itself."""
        w = self.w
        return w.deadline is not None or w.flush_requested.is_set() or w.final_requested.is_set()

    def node_part(self, request: SpooledRequest) -> bool:
        """A batch of this rank's that goes through the node's sender (handed, or sent with the peers')."""
        w, d = self.w, self.w.delivery
        if w.node_role is None or not w.registration.node_batches or request.kind != "batch" or request.rebase:
            return False
        if request.run_id != w.ctx.run_id or w.settings.mode != "online" or d.halted:
            return False
        if d.own_backlog or not d.healthy:
            return False  # FIFO behind the spooled ones, or the server is down: the usual path
        if w.node_role == node.PEER:
            return not self.direct() and time.monotonic() >= self.node_off_until
        return True

    def hand(self, request: SpooledRequest) -> None:
        """A peer's batch, to the spool for local rank 0 to send with the node's."""
        w = self.w
        try:
            written = w.spool.write(request, handed=True)
        except OSError as exc:
            w.once.warning("hand-write", "phantomhub: cannot hand a batch to local rank 0 (%s); sending it", exc)
            written = None
        if written is None:
            w.delivery.deliver(request)
            return
        w.counters.handed_batches += 1
        self.handed.append((written, time.monotonic()))

    def deliver_node(self, own: SpooledRequest | None, *, min_age_s: float) -> None:
        """Local rank 0: its own batch (if any) and the peers' handed ones, in one request."""
        w, d = self.w, self.w.delivery
        taken = self._handed_take(min_age_s, own_rank=own is not None)
        if not taken:
            if own is not None:
                d.deliver(own)
            return
        bodies = ([node.raw_body(own)] if own is not None else []) + [raw for _, raw, _ in taken]
        rows = (own.rows if own is not None else 0) + sum(rows for _, _, rows in taken)
        request = node.node_request(bodies, run_id=w.ctx.run_id, token_fp=w.ctx.token_fp, server=w.settings.server,
                                    rows=rows, gzip_min_bytes=w.settings.gzip_min_bytes)  # fmt: skip
        outcome, response = d.send(request, d.timeout_s())
        if outcome == OK:
            d.mark_healthy()
            w.counters.sent_batches += 1
            w.counters.node_batches += 1
            w.counters.node_peer_batches += len(taken)
            for entry, _, _ in taken:
                w.spool.remove(entry)
            return
        if outcome == RETRY:  # the peers' batches wait for the next attempt; this rank's retries as usual
            for entry, _, _ in taken:
                w.spool.release(entry)
            if own is not None:
                d.deliver(own)
            else:
                d.mark_unhealthy(retry_after(response))
            return
        # Refused whole (a server without the endpoint, 413, one bad part): every part on its own.
        if outcome == HALT and batch_endpoint_missing(response):
            w.registration.node_batches = False
            logger.info("phantomhub: server %s has no node batch endpoint; each rank sends its own", w.settings.server)
        if own is not None:
            d.deliver(own)
        for k, (entry, _, _) in enumerate(taken):
            if not w.replay.replay_one(entry, own=False):
                for rest, _, _ in taken[k + 1 :]:
                    w.spool.release(rest)
                return

    def _handed_take(self, min_age_s: float, *, own_rank: bool) -> list[tuple[SpoolEntry, bytes, int]]:
        """Claims the run's handed batches at least ``min_age_s`` old that fit one node batch, one
        per rank (a rank's next one waits for the next node batch): (file, JSON body, step rows)."""
        w = self.w
        now_ns = time.time_ns()
        taken: list[tuple[SpoolEntry, bytes, int]] = []
        ranks = {w.ctx.rank} if own_rank else set()
        size = 0
        for entry in w.spool.handed(w.ctx.run_id):
            if len(taken) + len(ranks) >= node.MAX_ENTRIES or now_ns - written_ns(entry.name) < min_age_s * 1e9:
                break  # oldest first: the rest are younger
            writer = writer_of(entry.name)
            if writer is None or writer[1] in ranks:
                continue
            claimed = w.spool.claim(entry)
            if claimed is None:
                continue  # its writer took it back meanwhile
            try:
                request = read_entry(claimed)
                raw = node.raw_body(request)
            except (OSError, ValueError, KeyError, EOFError, zlib.error) as exc:
                w.once.warning("corrupt-spool", "phantomhub: unreadable spool file %s (%s); removed", claimed.path, exc)
                w.spool.remove(claimed)
                continue
            ours = node.handed_is_ours(request, run_id=w.ctx.run_id, token_fp=w.ctx.token_fp, server=w.settings.server)
            if not ours or (taken and size + len(raw) > node.MAX_RAW_BYTES):
                w.spool.release(claimed)  # its writer sends it after the hand-off timeout
                continue
            ranks.add(writer[1])
            size += len(raw)
            taken.append((claimed, raw, request.rows))
        return taken

    def node_pass(self, *, final: bool) -> None:
        w, d = self.w, self.w.delivery
        if w.node_role == node.PEER:
            self._handed_check(final=final)
        elif w.registration.node_batches and d.healthy and w.settings.mode == "online" and not d.halted:
            with w.io_lock:  # late handed batches; at finish every one left
                late = node.late_s(w.settings.flush_interval_s)
                self.deliver_node(None, min_age_s=0.0 if final or self.direct() else late)

    def _handed_check(self, *, final: bool) -> None:
        """A peer forgets the handed batches local rank 0 delivered, and sends itself those it left
        longer than the hand-off timeout (at finish, all of them: nobody may be left to take them)."""
        if not self.handed:
            return
        w = self.w
        now, timeout = time.monotonic(), node.handoff_timeout_s(w.settings.flush_interval_s)
        try:
            names = os.listdir(w.spool.root / w.ctx.run_id)
        except OSError:
            names = []
        present = set(names)
        with w.io_lock:
            keep: list[tuple[Path, float]] = []
            for k, (path, at) in enumerate(self.handed):
                if path.name not in present:
                    if any(name.startswith(path.name + CLAIM_MARK) for name in names):
                        keep.append((path, at))  # local rank 0 is sending it (or gave it back: still ours to watch)
                    continue
                if not final and now - at < timeout:
                    keep.append((path, at))
                    continue
                if not final and now >= self.node_off_until:
                    self.node_off_until = now + node.SILENT_BACKOFF_S
                    w.once.warning("node-silent", "phantomhub: local rank 0 left this rank's batches unsent; sending them")
                entry = w.spool.claim(SpoolEntry(path=path, run_id=w.ctx.run_id, name=path.name, owner_pid=w.spool.pid))
                if entry is None:
                    keep.append((path, at))  # local rank 0 took it just now
                    continue
                if not w.replay.replay_one(entry, own=False):  # given back: the server is down, try later
                    keep.extend(self.handed[k:])
                    break
            self.handed = keep

"""Delivery: the outbox's requests to the server, or to the spool.

Each pass the sender delivers the outbox (``_drain`` fills it) in order, under the worker's I/O
lock. A request is POSTed (``_transport``) and classified by its answer:

- 2xx: delivered. The answer to this process's registration brings the step base and what the
  server takes (packed columns, the counters field, node batches).
- 5xx, 429, network errors: retried up to ``max_retries`` with capped, jittered backoff that
  honours Retry-After (never past a ``finish()`` deadline), then spooled; the server counts as
  unhealthy until the backoff of the failure streak has passed, and meanwhile new requests go
  straight to the spool.
- 413: split in halves (``_split``) and each delivered.
- 401, 403, 404: halted. The request and everything after it is spooled, for
  ``phantomhub-agent sync``. A batch's 404 that is not "run not found" (a server without the batch
  endpoint) switches to the separate endpoints instead, the batch in hand split (``unbatch``).
  A 401 with a token file (PHANTOMHUB_TOKEN_FILE, ``_tokenfile``): a new token in the file is
  taken and the request sent again at once; with none yet, delivery halts until the file holds
  one (read every second), then resumes and the spool goes out in order, without a restart.
- any other 4xx: rejected, dropped and counted, not retried. Except a registration's 400 naming
  its ``job`` field (a server older than jobs): it is sent again at once without the field.

Delivery order is FIFO per process: while this process has spooled requests of its run
(``own_backlog``), new ones are appended to the spool too, and the replay (``_replay``) drains it
in order. So the run's metadata always reaches the server before its steps, whatever failed in
between. A peer's batches on a node that sends one request per node take the hand-off instead
(``_handoff``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
from typing import TYPE_CHECKING

from . import _batcher as b
from . import _node as node
from ._log import logger
from ._split import batch_endpoint_missing, split_request, unbatch
from ._spool import SpooledRequest
from ._transport import HALT, OK, RETRY, TOO_LARGE, NetworkError, Response, backoff_delay, classify, parse_retry_after

if TYPE_CHECKING:
    from ._worker import Worker


def job_refused(response: Response) -> bool:
    """A 400 naming the registration's ``job`` field: a server that does not take jobs yet."""
    data = response.json()
    error = data.get("error") if isinstance(data, dict) else None
    fields = error.get("fields") if isinstance(error, dict) else None
    return isinstance(fields, dict) and any(name == "job" or str(name).startswith("job.") for name in fields)


def without_job(request: SpooledRequest) -> SpooledRequest | None:
    """The registration without its ``job`` field (None when it has none, or is unreadable)."""
    try:
        raw = gzip.decompress(request.body) if request.gzipped else request.body
        payload = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(payload, dict) or "job" not in payload:
        return None
    del payload["job"]
    return dataclasses.replace(request, body=b.encode_json(payload), gzipped=False)


def retry_after(response: Response | None) -> float | None:
    if response is None:
        return None
    return parse_retry_after(response.headers.get("retry-after"))


class Delivery:
    """The server's health as this process sees it, and the requests' way to it."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.healthy = True
        self.halted = False
        # Halted by a 401 with a token file: a new token in the file resumes delivery.
        self.awaiting_token = False
        self.fail_streak = 0
        self.next_probe = 0.0
        # This process has spooled requests of its run: new ones queue behind them in the spool.
        self.own_backlog = False

    def after_fork(self) -> None:
        self.own_backlog = False

    def token_renewed(self, *, throttled: bool = False) -> bool:
        """Takes a new token from the token file, if it holds one; True when it did."""
        source = self.w.token_file
        if source is None:
            return False
        token = source.newer(self.w.transport.token, throttled=throttled)
        if token is None:
            return False
        self.w.transport.token = token
        logger.info("phantomhub: using the new token in %s", source.path)
        return True

    def resume_on_new_token(self, *, throttled: bool = True) -> None:
        """Ends a halt for a refused token once the token file holds a new one: the spooled
        requests then go out in order (the replay), and new ones follow them. The file is read
        at most once a second, but at once at finish (the last chance to send)."""
        if self.halted and self.awaiting_token and self.token_renewed(throttled=throttled):
            self.halted = self.awaiting_token = False
            self.w.once.forget("halt")
            logger.info("phantomhub: the server may take the new token; sending what was kept in %s", self.w.spool.root)

    def deliver_outbox(self) -> None:
        w = self.w
        outbox = w.outbox
        with w.io_lock:
            self.resume_on_new_token()
            taken = w.drain.marks_taken()  # every row taken so far is in the outbox, or left it
            while outbox and not w.is_abandoned():
                request = outbox[0]
                if w.handoff.node_part(request) and w.node_role == node.PEER:
                    w.handoff.hand(request)
                elif w.handoff.node_part(request):
                    w.handoff.deliver_node(request, min_age_s=0.0)
                else:
                    self.deliver(request)
                if w.registration.pending and w.is_registration(request):
                    w.registration.pending = False  # spooled, or refused: the base stays unknown
                if w.is_abandoned():
                    return  # finish() spooled the outbox itself after its deadline
                outbox.popleft()
            if w.checkpoints.files:
                w.checkpoints.release(taken)

    def deliver(self, request: SpooledRequest) -> None:
        w = self.w
        s = w.settings
        if s.mode == "offline" or self.halted or self.own_backlog:
            self.spool(request)
            return
        if not self.healthy and time.monotonic() < self.next_probe:
            self.spool(request)
            return
        attempt = 0
        while True:
            remaining = w.remaining()
            if remaining is not None and remaining < 0.05:
                self.spool(request)
                return
            timeout = s.request_timeout_s if remaining is None else min(s.request_timeout_s, remaining)
            outcome, response = self.send(request, timeout)
            if outcome == OK:
                self.mark_healthy()
                w.counters.sent_batches += 1
                if request.kind == "run":
                    self._registered(request, response)
                return
            if outcome == RETRY:
                after = retry_after(response)
                delay = backoff_delay(
                    attempt,
                    base_s=s.backoff_base_s,
                    max_s=s.backoff_max_s,
                    retry_after_s=after,
                    retry_after_max_s=s.retry_after_max_s,
                )
                attempt += 1
                if attempt > s.max_retries or not self._sleep(delay):
                    self.spool(request)
                    self.mark_unhealthy(after)
                    return
                continue
            if outcome == TOO_LARGE:
                self._split_and_deliver(request, response)
                return
            if outcome == HALT and self.batch_unknown(request, response):
                for part in unbatch(request):
                    self.deliver(part)
                return
            if outcome == HALT:
                self.halt(request, response)
                self.spool(request)
                return
            self.reject(request, response)
            return

    def _registered(self, request: SpooledRequest, response: Response | None) -> None:
        """A registration was delivered: the step base of its process comes with the answer."""
        w = self.w
        answer = response.json() if response is not None else None
        base = b.step_base_from_run(answer, w.ctx.rank)
        if w.is_registration(request):
            w.registration.step_base = base
            w.registration.pending = False
            w.registration.terms_from(answer)
            w.notify_registered(response)

    def batch_unknown(self, request: SpooledRequest, response: Response | None) -> bool:
        """A server older than the batch endpoint: the separate endpoints from now on."""
        if request.kind != "batch" or not batch_endpoint_missing(response):
            return False
        s = self.w.settings
        if s.wire == "batch":
            s.wire = "separate"
            logger.info("phantomhub: server %s has no batch endpoint; sending one request per kind", s.server)
        return True

    def send(self, request: SpooledRequest, timeout: float) -> tuple[str, Response | None]:
        w = self.w
        try:
            response = w.transport.request("POST", request.path, request.body, gzipped=request.gzipped, timeout_s=timeout)
        except NetworkError as exc:
            w.counters.send_failures += 1
            w.once.warning(
                "network",
                "phantomhub: server %s unreachable (%s); spooling to %s",
                w.settings.server,
                exc,
                w.spool.root,
            )
            return RETRY, None
        if response.status == 400 and request.kind == "run" and job_refused(response):
            stripped = without_job(request)
            if stripped is not None:  # a server older than jobs: the run without its job link
                w.once.warning(
                    "no-jobs",
                    "phantomhub: server %s does not know jobs; the run is registered without its job",
                    w.settings.server,
                )
                return self.send(stripped, timeout)
        if response.status == 401 and self.token_renewed():  # rotated: the file has the new token
            return self.send(request, timeout)
        outcome = classify(response.status)
        if outcome == RETRY:
            w.counters.send_failures += 1
            w.once.warning(
                f"status-{response.status}",
                "phantomhub: server answered %d (%s); will retry",
                response.status,
                response.error_text(),
            )
        return outcome, response

    def timeout_s(self) -> float:
        """A request's timeout: the configured one, or less where a finish() deadline comes sooner."""
        w = self.w
        remaining = w.remaining()
        return w.settings.request_timeout_s if remaining is None else min(w.settings.request_timeout_s, remaining)

    def _sleep(self, delay: float) -> bool:
        """Waits ``delay`` seconds; False if a finish() deadline falls before the wait would end."""
        w = self.w
        until = time.monotonic() + delay
        while True:
            now = time.monotonic()
            if now >= until:
                return True
            deadline = w.deadline
            if deadline is not None and deadline < until:
                return False
            if w.is_sender_thread() and not w.final_requested.is_set():
                # finish() sets its deadline, then this event: wake up to re-check the deadline
                w.final_requested.wait(until - now)
            else:
                time.sleep(until - now)

    def mark_healthy(self) -> None:
        if not self.healthy:
            logger.info("phantomhub: server %s reachable again", self.w.settings.server)
        self.healthy = True
        self.fail_streak = 0

    def mark_unhealthy(self, retry_after_s: float | None) -> None:
        s = self.w.settings
        self.healthy = False
        delay = backoff_delay(
            self.fail_streak,
            base_s=s.backoff_base_s,
            max_s=s.backoff_max_s,
            retry_after_s=retry_after_s,
            retry_after_max_s=s.retry_after_max_s,
        )
        self.fail_streak += 1
        self.next_probe = time.monotonic() + delay

    def halt(self, request: SpooledRequest, response: Response | None) -> None:
        w = self.w
        self.halted = True
        status = response.status if response is not None else 0
        text = response.error_text() if response is not None else ""
        if status == 401 and w.token_file is not None:
            self.awaiting_token = True
            w.once.error(
                "halt",
                "phantomhub: server refused the token (%s); keeping telemetry in %s until %s holds a new one",
                text,
                w.spool.root,
                w.token_file.path,
            )
            return
        w.once.error(
            "halt",
            "phantomhub: server refused %s with %d (%s); keeping telemetry in %s — fix the token or run and "
            "upload it with `phantomhub-agent sync`",
            request.path,
            status,
            text,
            w.spool.root,
        )

    def reject(self, request: SpooledRequest, response: Response | None) -> None:
        w = self.w
        w.counters.rejected_batches += 1
        status = response.status if response is not None else 0
        text = response.error_text() if response is not None else ""
        w.once.error(
            f"reject-{request.kind}-{status}",
            "phantomhub: server rejected a %s batch with %d (%s); dropped, not retried",
            request.kind,
            status,
            text,
        )
        if w.settings.debug:
            w.errors.append(RuntimeError(f"{request.kind} batch rejected with {status}: {text}"))

    def _split_and_deliver(self, request: SpooledRequest, response: Response | None) -> None:
        halves = split_request(request)
        if halves is None:
            self.reject(request, response)
            return
        for half in halves:
            self.deliver(half)

    def spool(self, request: SpooledRequest) -> None:
        w = self.w
        try:
            written = w.spool.write(request)
        except OSError as exc:
            w.counters.spool_dropped_batches += 1
            if request.kind in ("steps", "batch"):  # a batch's rows are its steps
                w.counters.dropped_steps += request.rows
            w.once.error("spool-write", "phantomhub: cannot write the spool (%s); telemetry dropped", exc)
            return
        if written is not None:
            w.counters.spooled_batches += 1
            if request.run_id == w.ctx.run_id:
                self.own_backlog = True

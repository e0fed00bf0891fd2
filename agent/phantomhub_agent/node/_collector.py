"""The node collector's loop: every interval, read the GPUs, name their holders, send one request.

Delivery is the training agent's own (``_worker.Worker``, its ``_delivery`` and ``_replay``, over
``_transport`` and ``_spool``): retries of 5xx/429/network with capped backoff honoring
Retry-After, the disk spool while the server is unreachable (replayed in order once it answers
again, and adopted by the next collector process after a crash), no retry of other 4xx, drop
counters. The node has no run to
send counter events to: every request carries the sender's counters as they stand when it is
built (``counters``: sent, spooled, replayed, dropped, ...), the server keeps the latest on the
node, and they are logged too (once a minute when they changed, and at exit).

``POST /api/v1/nodes/samples`` is idempotent on (node, GPU, sample time): a request replayed
from the spool, or sent twice because an answer was lost, changes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol

from .._batcher import encode_json, gzip_bytes
from .._config import Settings
from .._log import OnceLogger, logger
from .._replay import Replay
from .._spool import SpooledRequest, read_entry, token_fingerprint
from .._version import __version__
from .._worker import Worker, WorkerContext
from ._owners import Owner, OwnerResolver
from ._sources import GpuReading

PATH = "/api/v1/nodes/samples"
# A spooled request older than this is dropped at replay, not sent: the server refuses samples
# older than a node's newest by more than its replay window (PHANTOMHUB_FLEET_REPLAY_WINDOW_S,
# whose default is this), so a longer outage loses what lies beyond it either way. 72 h: a
# weekend's outage replays whole.
REPLAY_WINDOW_S = 72 * 3600
# Requests waiting for the sender thread (one per interval: hours of them); beyond, dropped and counted.
QUEUE_MAX = 1000
GZIP_MIN_BYTES = 1024


class Source(Protocol):
    name: str

    @property
    def hostname(self) -> str | None: ...

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


def payload_build(
    *,
    node: dict[str, Any],
    interval_s: float,
    t_ns: int,
    readings: list[GpuReading],
    owner_of: Callable[[int], Owner | None],
    counters: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One request's body: the node, its GPUs at ``t_ns`` (columnar), their holders and the
    sender's counters. ``sm_active`` (DCGM profiling) is a column only when the source has it."""
    gpus: dict[str, list[Any]] = {
        "t_ns": [],
        "gpu_index": [],
        "gpu_uuid": [],
        "util_pct": [],
        "mem_used_bytes": [],
        "mem_total_bytes": [],
        "power_w": [],
        "sm_clock_mhz": [],
        "sm_active": [],
    }
    procs: dict[str, list[Any]] = {"t_ns": [], "gpu_index": [], "pid": [], "mem_used_bytes": [], "owner": []}
    owners: list[Owner] = []
    owner_index: dict[str, int] = {}
    for gpu in readings:
        gpus["t_ns"].append(t_ns)
        gpus["gpu_index"].append(gpu.index)
        gpus["gpu_uuid"].append(gpu.uuid)
        gpus["util_pct"].append(gpu.util_pct)
        gpus["mem_used_bytes"].append(gpu.mem_used_bytes)
        gpus["mem_total_bytes"].append(gpu.mem_total_bytes)
        gpus["power_w"].append(gpu.power_w)
        gpus["sm_clock_mhz"].append(gpu.sm_clock_mhz)
        gpus["sm_active"].append(gpu.sm_active)
        for holder in gpu.holders:
            owner = holder.owner if holder.owner is not None else owner_of(holder.pid)
            index = None  # the process exited between NVML's answer and its /proc lookup
            if owner is not None:
                key = json.dumps(owner, sort_keys=True)
                index = owner_index.get(key)
                if index is None:
                    index = owner_index[key] = len(owners)
                    owners.append(owner)
            procs["t_ns"].append(t_ns)
            procs["gpu_index"].append(gpu.index)
            procs["pid"].append(holder.pid)
            procs["mem_used_bytes"].append(holder.mem_used_bytes)
            procs["owner"].append(index)
    if all(v is None for v in gpus["sm_active"]):
        del gpus["sm_active"]  # NVML has no such field: no column of nulls on every request
    models = [g.model for g in readings if g.model]
    described = dict(node)
    described.setdefault("gpu_model", models[0] if models else None)
    described["gpu_count"] = len(readings)
    body: dict[str, Any] = {
        "node": described,
        "interval_s": max(1, round(interval_s)),  # whole seconds, as the server keeps it
        "gpus": gpus,
        "processes": procs,
        "owners": owners,
    }
    if counters is not None:
        body["counters"] = counters
    return body


class _NodeReplay(Replay):
    def replay_one(self, entry: Any, *, own: bool) -> bool:
        """A spooled node request older than the replay window is dropped and counted, not sent:
        the server would refuse it (400 naming its samples' times)."""
        w = self.w
        try:
            request = read_entry(entry)
        except (OSError, ValueError, KeyError):
            return super().replay_one(entry, own=own)  # which removes what it cannot read
        mine = own or request.token_fp == w.ctx.token_fp
        age_ns = time.time_ns() - request.created_ns
        if request.kind == "node" and mine and request.created_ns > 0 and age_ns > REPLAY_WINDOW_S * 1_000_000_000:
            w.spool.remove(entry)
            w.counters.spool_dropped_batches += 1
            w.once.warning(
                "replay-window",
                "phantomhub: spooled node requests older than %d h dropped: the server keeps replays within that window",
                REPLAY_WINDOW_S // 3600,
            )
            return True
        return super().replay_one(entry, own=own)


class _NodeWorker(Worker):
    """The training agent's sender, for requests without a run."""

    replay_class = _NodeReplay

    def _queue_counters(self, *, force: bool) -> None:
        # Counter events belong to a run; the node's counters ride on every request instead.
        self._next_counters = float("inf")


def _spool_name(hostname: str) -> str:
    return "node-" + (re.sub(r"[^A-Za-z0-9._-]", "_", hostname)[:100] or "unknown")


class NodeSender:
    """Queues one request per interval for the sender thread, which delivers or spools it."""

    def __init__(self, settings: Settings, hostname: str) -> None:
        self.settings = settings
        self.dropped_requests = 0
        self.source_errors = 0
        self.sampler_cpu_us = 0
        self.worker = _NodeWorker(
            settings,
            WorkerContext(
                run_id=_spool_name(hostname),
                rank=0,
                host=hostname,
                token_fp=token_fingerprint(settings.token),
                clock_offset_ns=0,
            ),
            extra_counters=self._extra_counters,
        )

    def _extra_counters(self) -> dict[str, int]:
        return {
            "dropped_samples": self.dropped_requests,
            "source_errors": self.source_errors,
            "sampler_cpu_us": self.sampler_cpu_us,
        }

    def counters(self) -> dict[str, int]:
        return self.worker.counters_snapshot()

    def send(self, payload: dict[str, Any]) -> None:
        body = encode_json(payload)
        gzipped = len(body) >= GZIP_MIN_BYTES
        request = SpooledRequest(
            path=PATH,
            body=gzip_bytes(body) if gzipped else body,
            gzipped=gzipped,
            kind="node",
            run_id=self.worker.ctx.run_id,
            rows=len(payload["gpus"]["t_ns"]),
            token_fp=self.worker.ctx.token_fp,
            server=self.settings.server,
            created_ns=time.time_ns(),
        )
        if len(self.worker.items) >= QUEUE_MAX:
            self.dropped_requests += 1
            return
        self.worker.items.append(("request", request))
        if self.worker.ensure_started():
            self.worker.wake()

    def finish(self, timeout_s: float) -> bool:
        return self.worker.finish(timeout_s)


@dataclasses.dataclass
class Collector:
    source: Source
    resolver: OwnerResolver
    node: dict[str, Any]
    interval_s: float
    sender: NodeSender | None = None
    out: IO[str] | None = None  # --print: each payload as a JSON line
    debug: bool = False
    samples: int = 0
    once_log: OnceLogger = dataclasses.field(default_factory=OnceLogger)
    counters_log_s: float = 60.0
    _counters_logged: dict[str, int] | None = None
    _counters_log_at: float = 0.0

    def log_counters(self, *, force: bool = False) -> None:
        if self.sender is None or (not force and time.monotonic() < self._counters_log_at):
            return
        self._counters_log_at = time.monotonic() + self.counters_log_s
        counters = self.sender.counters()
        if force or counters != self._counters_logged:
            self._counters_logged = counters
            logger.info("phantomhub node: %d samples; counters %s", self.samples, json.dumps(counters, sort_keys=True))

    def sample(self) -> dict[str, Any] | None:
        """One interval: read, resolve, send. Never raises (debug mode aside)."""
        cpu0 = time.thread_time_ns()
        try:
            return self._sample()
        finally:
            if self.sender is not None:
                self.sender.sampler_cpu_us += (time.thread_time_ns() - cpu0) // 1000

    def _sample(self) -> dict[str, Any] | None:
        t_ns = time.time_ns()
        try:
            readings = self.source.read()
        except Exception as exc:
            if self.sender is not None:
                self.sender.source_errors += 1
            self.once_log.error(
                f"source-{type(exc).__name__}", "phantomhub node: cannot read the GPUs (%s): %s", self.source.name, exc
            )
            if self.debug:
                raise
            return None
        try:
            payload = payload_build(
                node=self.node,
                interval_s=self.interval_s,
                t_ns=t_ns,
                readings=readings,
                owner_of=self.resolver.owner,
                counters=self.sender.counters() if self.sender is not None else None,
            )
            self.samples += 1
            if self.out is not None:
                self.out.write(json.dumps(payload, sort_keys=True) + "\n")
                self.out.flush()
            if self.sender is not None:
                self.sender.send(payload)
            return payload
        except Exception as exc:
            if self.sender is not None:
                self.sender.worker.counters.internal_errors += 1
            self.once_log.error(f"internal-{type(exc).__name__}", "phantomhub node: internal error: %r", exc)
            if self.debug:
                raise
            return None

    def run(self, *, once: bool, stop: threading.Event, finish_timeout_s: float) -> int:
        """Samples every interval on a fixed schedule until ``stop`` (SIGTERM) or after one sample.

        Then the sender flushes within ``finish_timeout_s``; what it cannot deliver by then is
        spooled for the next start. Exit status: 0, or 1 when ``once`` could not deliver.
        """
        next_at = time.monotonic()
        while not stop.is_set():
            self.sample()
            self.log_counters()
            if once:
                break
            next_at += self.interval_s
            now = time.monotonic()
            if next_at < now:  # a slow source or a suspended process: skip, never burst
                next_at = now + self.interval_s
            if stop.wait(next_at - now):
                break
        self.source.close()
        if self.sender is None:
            return 0
        delivered = self.sender.finish(finish_timeout_s)
        self.log_counters(force=True)
        counters = self.sender.counters()
        if once:
            return 0 if delivered and counters["sent_batches"] >= 1 else 1
        return 0


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM and SIGINT end the loop; the sender then flushes within its deadline."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def default_spool_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/phantomhub/node-spool")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "phantomhub" / "node-spool"


def collector_version() -> str:
    return __version__

"""One request per node: a run's local ranks hand their batches to local rank 0, which sends them
together in one ``POST /api/v1/runs/{id}/batches``.

What a rank costs the server is mostly per request, not per row (docs/performance.md, "Fleet"), so
an 8-GPU node that sends one request a minute instead of eight costs it about an eighth. The
hand-off goes through the spool directory the node's ranks share already, so it keeps the spool's
guarantees (a file exists whole or not at all, survives SIGKILL, is claimed by one process at a
time) and needs no socket, port or shared memory:

- A rank whose ``LOCAL_RANK`` is not 0 (a *peer*) writes each interval's batch to the spool as a
  handed file (``_spool.KIND_HANDED``) instead of sending it. For the peer that counts as spooled:
  its checkpoints of those rows are released, as after a delivery.
- Local rank 0 (the *node's sender*) claims the handed files of its run, puts their bodies beside
  its own batch in one request, and deletes them once the server answered 2xx. If the server is
  unreachable it gives them back (they wait for its next attempt); if it refuses the node batch (an
  older server without the endpoint, 413, any other 4xx) each part goes on its own, as a spooled
  file would.
- The ranks cut their intervals on the same wall-clock boundaries (multiples of the flush
  interval, shifted by a phase drawn from the run id so that a fleet's nodes do not all send in
  the same second; local rank 0 ``gather_s`` after them), so the peers' files are there when local rank 0
  cuts, and one request a node and interval is the usual case. A handed file that arrives late
  goes out once it is ``late_s`` old, in a node batch of its own.
- A peer that finds one of its handed files still there ``handoff_timeout_s`` after writing it
  (local rank 0 is gone, hung, or uses another spool directory) sends it itself and sends its
  batches directly for ``SILENT_BACKOFF_S``. One whose writer died is an orphan that any agent on
  the machine, or ``phantomhub-agent sync``, replays. A batch sent twice is a duplicate the server
  ignores; a batch is deleted only after a 2xx, so none is lost.
- At ``finish()`` and ``flush()`` every rank sends for itself: nobody may be left to take the files.
"""

from __future__ import annotations

import gzip
import hashlib
import time

from ._batcher import gzip_bytes
from ._spool import SpooledRequest

# At the usual 60 s interval; a short interval (a test, a debugging session) scales them down.
GATHER_S = 2.0
LATE_S = 10.0
HANDOFF_TIMEOUT_S = 30.0
SILENT_BACKOFF_S = 300.0
# The server's limit on entries of one node batch; what one node batch carries at most before
# gzip (the server takes 8 MiB as sent, 64 MiB inflated).
MAX_ENTRIES = 256
MAX_RAW_BYTES = 6 * 1024 * 1024

LEADER = "leader"
PEER = "peer"


def node_role(local_rank: int, local_world_size: int) -> str | None:
    """``LEADER`` for local rank 0 of a node with several local ranks, ``PEER`` for the others,
    None when the rank is alone on its node (or its launcher did not say)."""
    if local_world_size <= 1:
        return None
    return LEADER if local_rank == 0 else PEER


def gather_s(interval_s: float) -> float:
    """How long after the peers' cut local rank 0 cuts (a quarter of a short interval)."""
    return min(GATHER_S, interval_s / 4)


def late_s(interval_s: float) -> float:
    """How old a handed batch gets before local rank 0 sends it without waiting for its own cut."""
    return min(LATE_S, interval_s / 2)


def handoff_timeout_s(interval_s: float) -> float:
    """How long a peer leaves a handed batch to local rank 0 before sending it itself."""
    return min(HANDOFF_TIMEOUT_S, max(2.0, 3 * interval_s))


def run_phase_s(run_id: str, interval_s: float) -> float:
    """Where in the interval a run's ranks cut: the same for all of them (it depends on the run
    alone), spread evenly over a fleet's runs so that their nodes do not all send at once."""
    return int(hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:8], 16) / 2**32 * interval_s


def boundary_after(now_ns: int, interval_s: float, phase_s: float = 0.0) -> int:
    """The first wall-clock cut after ``now_ns``: the next multiple of the interval, plus the phase."""
    interval = max(1, int(interval_s * 1e9))
    phase = int(phase_s * 1e9) % interval
    return (now_ns - phase) // interval * interval + interval + phase


def raw_body(request: SpooledRequest) -> bytes:
    """A batch request's JSON object, as the server would read it."""
    return gzip.decompress(request.body) if request.gzipped else request.body


def handed_is_ours(request: SpooledRequest, *, run_id: str, token_fp: str, server: str) -> bool:
    """A handed file this node sender may put in its run's node batch."""
    return (
        request.kind == "batch"
        and not request.rebase
        and request.run_id == run_id
        and request.path == f"/api/v1/runs/{run_id}/batch"
        and request.token_fp == token_fp
        and request.server == server
    )


def node_request(
    bodies: list[bytes], *, run_id: str, token_fp: str, server: str, rows: int, gzip_min_bytes: int
) -> SpooledRequest:
    """One ``/batches`` request of the rank batches' JSON objects, in order."""
    raw = b'{"batches":[' + b",".join(bodies) + b"]}"
    gzipped = len(raw) >= gzip_min_bytes
    return SpooledRequest(
        path=f"/api/v1/runs/{run_id}/batches",
        body=gzip_bytes(raw) if gzipped else raw,
        gzipped=gzipped,
        kind="batches",
        run_id=run_id,
        rows=rows,
        token_fp=token_fp,
        server=server,
        created_ns=time.time_ns(),
    )

"""The server's own liveness, so that its downtime is never read as its collectors stopping.

While the server is down, node collectors and agents keep measuring and spool what they cannot
send; when it is back they replay in order. Before, the first evaluation after a restart found
every node's latest sample older than four intervals and resolved its idle-GPU alerts ("node
stopped reporting"); the replay arrived seconds later and the same alerts fired again: two
extra webhooks per GPU per restart.

Every evaluation beats (one row, `ServerBeat`), on the server's clock. A beat more than `GAP_S`
after the one before starts a new up-time: `up_since`. Then:

- a node that has sent no sample taken after `up_since` is not judged for
  `hold_s(interval)` = four of its intervals (the fleet's "reporting now" window) plus the
  collector's longest retry backoff: the time its replay may take to begin. Its subjects are
  left as they are (neither resolved nor fired); once a newer sample arrives, or the hold ends
  without one (the node really stopped), it is judged as always;
- a running run not heard from since `up_since` is not judged for `RUN_HOLD_S` (its agent's
  flush interval plus the backoff): its silent-run alert neither fires nor resolves meanwhile.

A database with no beat yet has seen no gap (a new install evaluates at once).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from phantomhub.alerts.models import ServerBeat
from phantomhub.periodic import every_s


def _cadence_s() -> float:
    """How often the evaluator runs: beat's PHANTOMHUB_ALERT_INTERVAL_S (20 s), or the embedded
    sweeper's pass without a broker (phantomhub/periodic.py)."""
    return every_s("alerts-evaluate", settings)


# A gap of three passes (at least 15 s) is the server down, not a slow pass; a slow pass read as
# a restart only holds nodes' resolves for one hold_s.
GAP_S = max(15.0, 3 * _cadence_s())
# The collector's (and agent's) longest wait between retries (phantomhub_agent Settings.backoff_max_s):
# after an outage its first try may come this late.
COLLECTOR_BACKOFF_S = 30.0
STALE_INTERVALS = 4  # phantomhub.fleet.selectors.STALE_INTERVALS: "now" is four intervals
# A run's agent sends each rank's batch every 60 s (flush_interval_s) and retries as the collector
# does: a run not heard from since the restart is left unjudged this long.
RUN_HOLD_S = 60.0 + COLLECTOR_BACKOFF_S


def server_beat(*, at: datetime) -> datetime | None:
    """Record that the evaluator runs at `at` (the server's clock); returns when the current
    up-time began after a gap (None: no gap seen)."""
    with transaction.atomic():
        row = ServerBeat.objects.select_for_update().filter(pk=1).first()
        if row is None:
            ServerBeat.objects.get_or_create(pk=1, defaults={"beat_at": at})
            return None
        if (at - row.beat_at).total_seconds() > GAP_S:
            row.up_since = at
        row.beat_at = max(row.beat_at, at)
        row.save(update_fields=["beat_at", "up_since"])
        return row.up_since


def hold_s(interval_s: int) -> float:
    """How long after a restart a node that has not caught up is left unjudged."""
    return STALE_INTERVALS * interval_s + COLLECTOR_BACKOFF_S

"""Reading back what the live server stored of a run's events (there is no read API for events):
a query in the server's own process environment (``manage.py shell``), printed as JSON."""

from __future__ import annotations

import json
from typing import Any

from .conftest import LiveServer

_EVENTS = """
import json
from phantomhub.telemetry.models import RunEvent
rows = RunEvent.objects.filter(run__client_id={run_id!r}).order_by("t_ns", "event_id")
print(json.dumps([
    {{"kind": e.kind, "rank": e.rank, "name": e.name, "t_start_ns": e.t_start_ns, "dur_ns": e.dur_ns,
      "status": e.status, "data": e.data}}
    for e in rows
]))
"""


def stored_events(live: LiveServer, run_id: str, kind: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
    out = live.manage("shell", "-c", _EVENTS.format(run_id=run_id))
    events = json.loads(out.strip().splitlines()[-1])
    return [e for e in events if (kind is None or e["kind"] == kind) and (name is None or e["name"] == name)]

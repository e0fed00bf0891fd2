"""Waste listens to ingest and pricing (docs/architecture.md, "Signals"); connected in apps.py."""

from __future__ import annotations

import uuid
from typing import Any

from phantomhub.waste import scheduling


def run_changed(sender: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
    # Looked up at call time, so a test may stand in for analysis_request. A run joining a job is
    # announced for the job's other attempts too (telemetry/services.py): their analyses are
    # asked for here, and the joining attempt's own pass marks them stale in the database
    # (services._job_neighbours_update), so a lost message cannot leave them priced with the old
    # neighbours. No query here: this runs on the commit of every ingest batch.
    scheduling.analysis_request(run_id)


def prices_changed(sender: Any, *, gpu: str, **kwargs: Any) -> None:
    # Prices feed every dollar figure: analyses of runs on this GPU are recomputed by the sweep.
    scheduling.analyses_invalidate(gpu_key=gpu)

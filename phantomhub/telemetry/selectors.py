"""Reads for telemetry: a run by id for a principal, and step rows read back columnar."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Q

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError
from phantomhub.telemetry.columns import STEP_COLUMNS
from phantomhub.telemetry.models import Run, Step


def run_get_visible(*, principal: Any, run_id: uuid.UUID) -> Run:
    """The run, if the principal may see it; otherwise 404 (never reveal another project's run)."""
    run = Run.objects.select_related("project", "project__team").filter(pk=run_id).first()
    if run is None or not projects_visible(principal).filter(pk=run.project_id).exists():
        raise ApiError("not_found", "run not found", status_code=404)
    return run


def steps_read(*, run: Run, rank: int | None, after_rank: int, after_step: int, limit: int) -> dict[str, Any]:
    """Up to `limit` steps ordered by (rank, step), strictly after the cursor, columnar."""
    names = [c.name for c in STEP_COLUMNS]
    rows = Step.objects.filter(run=run)
    if rank is not None:
        rows = rows.filter(rank=rank, step__gt=after_step)
    else:
        rows = rows.filter(Q(rank__gt=after_rank) | Q(rank=after_rank, step__gt=after_step))
    page = list(rows.order_by("rank", "step").values_list("rank", *names)[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    columns: dict[str, list[Any]] = {"rank": [row[0] for row in page]}
    for i, name in enumerate(names, start=1):
        columns[name] = [row[i] for row in page]
    last = page[-1] if page else None
    return {
        "run_id": str(run.pk),
        "count": len(page),
        "steps": columns,
        "next": {"after_rank": last[0], "after_step": last[1]} if more and last else None,
        "next_after_step": last[1] if more and last else None,
    }

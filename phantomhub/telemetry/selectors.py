"""Reads for telemetry: a run by id for a principal, and step rows read back columnar."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import connection
from django.db.models import Q, QuerySet

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError
from phantomhub.telemetry.columns import STEP_COLUMNS
from phantomhub.telemetry.models import Run, Step


def run_find(runs: QuerySet[Run], run_id: uuid.UUID) -> Run | None:
    """The run of `runs` (already narrowed to the caller's projects) that `run_id` names: its id,
    else the id its client registered it by, when one run has it. Runs of other projects are
    never looked at, so they answer exactly as a missing run does."""
    by_id = runs.filter(pk=run_id).first()
    if by_id is not None:
        return by_id
    by_client_id = list(runs.filter(client_id=run_id)[:2])
    return by_client_id[0] if len(by_client_id) == 1 else None


def run_get_visible(*, principal: Any, run_id: uuid.UUID) -> Run:
    """The run, if the principal may see it; otherwise 404 (never reveal another project's run)."""
    runs = Run.objects.select_related("project", "project__team").filter(project__in=projects_visible(principal))
    run = run_find(runs, run_id)
    if run is None:
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


# Columns read for analysis, in order. Nulls are read as -1 (ints) / NaN (flops) so the binary
# COPY rows have a fixed width and numpy can view the whole result without a Python loop.
ANALYSIS_COLUMNS = [c.name for c in STEP_COLUMNS]


def _copy_dtype() -> np.dtype[Any]:
    fields: list[tuple[str, str]] = [("nf", ">i2")]
    for name in ANALYSIS_COLUMNS:
        fields += [(f"l_{name}", ">i4"), (name, ">f8" if name == "flops" else ">i8")]
    return np.dtype(fields)


def steps_arrays(*, run_id: uuid.UUID, rank: int, after_step: int = -1) -> dict[str, npt.NDArray[Any]]:
    """One rank's steps after `after_step`, ordered by step, as numpy columns (nulls: -1 / NaN)."""
    return steps_arrays_after(run_id=run_id, after={rank: after_step})[rank]


def steps_arrays_after(*, run_id: uuid.UUID, after: dict[int, int]) -> dict[int, dict[str, npt.NDArray[Any]]]:
    """Several ranks' steps in one read: for each rank of ``after``, its rows after its own step,
    ordered by step (nulls: -1 / NaN). One query however many ranks (a 1,024-rank run's
    incremental analysis must not cost 1,024 round trips)."""
    if not after:
        return {}
    ranks = sorted(after)
    floor = min(after.values())
    select = ", ".join("COALESCE(flops, 'NaN'::float8)" if c == "flops" else f"COALESCE({c}, -1)" for c in ANALYSIS_COLUMNS)
    if connection.vendor == "postgresql":
        sql = (
            f"COPY (SELECT rank, {select} FROM telemetry_step WHERE run_id = %s AND rank = ANY(%s) AND step > %s "
            "ORDER BY rank, step) TO STDOUT (FORMAT BINARY)"
        )
        connection.ensure_connection()
        raw = connection.connection
        assert raw is not None
        buf = bytearray()
        with raw.cursor() as cur, cur.copy(sql, (run_id, ranks, floor)) as copy:
            for chunk in copy:
                buf += chunk
        dtype = np.dtype([("nf", ">i2"), ("l_rank", ">i4"), ("rank", ">i4"), *_copy_dtype().descr[1:]])
        rows = np.frombuffer(bytes(buf[19:-2]), dtype=dtype)
        rank_col = rows["rank"].astype(np.int64)
        columns = {name: rows[name].astype(np.float64 if name == "flops" else np.int64) for name in ANALYSIS_COLUMNS}
    else:
        placeholders = ", ".join(["%s"] * len(ranks))
        select = select.replace("'NaN'::float8", "NULL")
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT rank, {select} FROM telemetry_step WHERE run_id = %s AND rank IN ({placeholders}) AND step > %s "
                "ORDER BY rank, step",
                [run_id.hex, *ranks, floor],
            )
            fetched = cursor.fetchall()
        rank_col = np.array([row[0] for row in fetched], dtype=np.int64)
        columns = {}
        for i, name in enumerate(ANALYSIS_COLUMNS, start=1):
            values = [row[i] for row in fetched]
            if name == "flops":
                columns[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
            else:
                columns[name] = np.array(values, dtype=np.int64)
    out: dict[int, dict[str, npt.NDArray[Any]]] = {}
    bounds = np.searchsorted(rank_col, [*ranks, ranks[-1] + 1])
    for i, rank in enumerate(ranks):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        keep = columns["step"][lo:hi] > after[rank]
        out[rank] = {name: values[lo:hi][keep] for name, values in columns.items()}
    return out

"""Reads for telemetry: a run by id for a principal, and raw rows read back columnar.

Raw rows are read from PostgreSQL while they are hot, and from the run's Parquet archive once
retention has pruned them (archive.py); callers cannot tell the two apart. Every read names one
run, and on PostgreSQL its week too, so the planner touches only that run's partition.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db.models import QuerySet

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError
from phantomhub.telemetry.archive import archive_read
from phantomhub.telemetry.columns import STEP_COLUMNS
from phantomhub.telemetry.hot import ANALYSIS_COLUMNS, SAMPLE_READ_COLUMNS, hot_rows, merge_rows
from phantomhub.telemetry.models import Run, RunArchive
from phantomhub.telemetry.storage import SAMPLES, STEPS


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
    return _steps_read_arrays(run, rank, after_rank, after_step, limit)


def _steps_read_arrays(run: Run, rank: int | None, after_rank: int, after_step: int, limit: int) -> dict[str, Any]:
    """steps_read from the ranks' arrays: hot chunks, and the archive once pruned."""
    from phantomhub.telemetry.models import RunRank

    ranks = (
        [rank]
        if rank is not None
        else sorted(RunRank.objects.filter(run=run, rank__gte=after_rank).values_list("rank", flat=True))
    )
    columns: dict[str, list[Any]] = {"rank": []}
    names = [c.name for c in STEP_COLUMNS]
    for name in names:
        columns[name] = []
    left, more, last = limit, False, None
    pruned = None if _pruned(run.pk) is not None else False
    # A few ranks a read, so a page of a 1,024-rank run reads the ranks it returns, not the run.
    for group in (ranks[i : i + 8] for i in range(0, len(ranks), 8)):
        after = {r: (after_step if r in (rank, after_rank) else -1) for r in group}
        fetched = steps_arrays_after(run_id=run.pk, after=after, pruned=pruned)
        for r in group:
            arrays = fetched.get(r)
            if arrays is None or not len(arrays["step"]):
                continue
            if left == 0:
                more = True
                break
            take = min(left, len(arrays["step"]))
            more = more or take < len(arrays["step"])
            columns["rank"] += [r] * take
            for name in names:
                values = arrays[name][:take].tolist()
                if name == "flops":
                    columns[name] += [None if v != v else v for v in values]
                elif name in ("step", "t_start_ns"):
                    columns[name] += values
                else:
                    columns[name] += [None if v < 0 else v for v in values]
            left -= take
            last = (r, columns["step"][-1])
            if more:
                break
        if more:
            break
    return {
        "run_id": str(run.pk),
        "count": len(columns["rank"]),
        "steps": columns,
        "next": {"after_rank": last[0], "after_step": last[1]} if more and last else None,
        "next_after_step": last[1] if more and last else None,
    }


def _pruned(run_id: uuid.UUID) -> RunArchive | None:
    """The run's archive when its raw rows have left PostgreSQL, else None."""
    return RunArchive.objects.filter(run_id=run_id, pruned_at__isnull=False).first()


def _hot_steps(run_id: uuid.UUID, ranks: list[int], floor: int) -> dict[str, npt.NDArray[Any]]:
    return hot_rows(kind=STEPS, run_id=run_id, names=["rank", *ANALYSIS_COLUMNS], ranks=ranks, after=floor)


def steps_arrays(*, run_id: uuid.UUID, rank: int, after_step: int = -1) -> dict[str, npt.NDArray[Any]]:
    """One rank's steps after `after_step`, ordered by step, as numpy columns (nulls: -1 / NaN)."""
    return steps_arrays_after(run_id=run_id, after={rank: after_step})[rank]


def steps_arrays_after(
    *, run_id: uuid.UUID, after: dict[int, int], pruned: bool | None = None
) -> dict[int, dict[str, npt.NDArray[Any]]]:
    """Several ranks' steps in one read: for each rank of ``after``, its rows after its own step,
    ordered by step (nulls: -1 / NaN); ``steps_rows_after`` split by rank."""
    if not after:
        return {}
    ranks, bounds, rows = steps_rows_after(run_id=run_id, after=after, pruned=pruned)
    edges = bounds.tolist()
    return {rank: {name: values[edges[i] : edges[i + 1]] for name, values in rows.items()} for i, rank in enumerate(ranks)}


def steps_rows_after(
    *, run_id: uuid.UUID, after: dict[int, int], pruned: bool | None = None
) -> tuple[list[int], npt.NDArray[np.int64], dict[str, npt.NDArray[Any]]]:
    """Several ranks' steps in one read, for each rank of ``after`` its rows after its own step:
    the ranks in order, their bounds (rank ``ranks[i]``'s rows are ``bounds[i]:bounds[i + 1]``)
    and the rows as numpy columns ordered by (rank, step) (nulls: -1 / NaN). One query however
    many ranks (a 1,024-rank run's incremental analysis must not cost 1,024 round trips), and the
    rows stay in one set of columns (the analysis works on them as they are). A run pruned from
    PostgreSQL is read from its archive, plus any row stored after the pruning. ``pruned=False``:
    the caller has just read that the run has no pruned archive (saves looking it up)."""
    ranks = sorted(after)
    if not ranks:
        return [], np.zeros(1, dtype=np.int64), {}
    floor = min(after.values())
    rows = _hot_steps(run_id, ranks, floor)
    archive = None if pruned is False else _pruned(run_id)
    if archive is not None:
        archived = archive_read(archive=archive, kind="steps", names=["rank", *ANALYSIS_COLUMNS], ranks=ranks, after=floor)
        rows = merge_rows(archived, rows, ["rank", "step"])
    rank_col = rows.pop("rank")
    ordered = np.array(ranks, dtype=np.int64)
    at = np.searchsorted(ordered, rank_col).clip(max=len(ranks) - 1)
    keep = (ordered[at] == rank_col) & (rows["step"] > np.array([after[r] for r in ranks], dtype=np.int64)[at])
    if not keep.all():
        rows = {name: values[keep] for name, values in rows.items()}
        rank_col = rank_col[keep]
    bounds = np.searchsorted(rank_col, [*ranks, ranks[-1] + 1]).astype(np.int64)
    return ranks, bounds, rows


def samples_arrays(*, run_id: uuid.UUID, since_ns: int = 0, pruned: bool | None = None) -> dict[str, npt.NDArray[Any]]:
    """A run's system samples after `since_ns`, ordered by (rank, device, t_ns), as numpy columns
    (nulls: -1 / NaN), from PostgreSQL or, once pruned, from the archive (``pruned`` as for
    steps_arrays_after)."""
    rows = hot_rows(kind=SAMPLES, run_id=run_id, names=SAMPLE_READ_COLUMNS, after=since_ns)
    archive = None if pruned is False else _pruned(run_id)
    if archive is not None:
        archived = archive_read(archive=archive, kind="samples", names=SAMPLE_READ_COLUMNS, after_t_ns=since_ns)
        rows = merge_rows(archived, rows, ["rank", "device", "t_ns"])
    return rows

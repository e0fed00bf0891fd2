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
import psycopg
from django.db import connection
from django.db.models import Q, QuerySet
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError
from phantomhub.telemetry.columns import SAMPLE_COLUMNS, STEP_COLUMNS
from phantomhub.telemetry.models import Run, RunArchive, Step
from phantomhub.telemetry.partitions import LEGACY_WEEK, run_week


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
    if _pruned(run.pk) is not None:
        return _steps_read_arrays(run, rank, after_rank, after_step, limit)
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


def _steps_read_arrays(run: Run, rank: int | None, after_rank: int, after_step: int, limit: int) -> dict[str, Any]:
    """steps_read for a run whose rows left PostgreSQL: the same page, from the archive."""
    from phantomhub.telemetry.models import RunRank

    ranks = (
        [rank]
        if rank is not None
        else sorted(RunRank.objects.filter(run=run, rank__gte=after_rank).values_list("rank", flat=True))
    )
    fetched = steps_arrays_after(run_id=run.pk, after={r: (after_step if r in (rank, after_rank) else -1) for r in ranks})
    columns: dict[str, list[Any]] = {"rank": []}
    names = [c.name for c in STEP_COLUMNS]
    for name in names:
        columns[name] = []
    left, more, last = limit, False, None
    for r in ranks:
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
    return {
        "run_id": str(run.pk),
        "count": len(columns["rank"]),
        "steps": columns,
        "next": {"after_rank": last[0], "after_step": last[1]} if more and last else None,
        "next_after_step": last[1] if more and last else None,
    }


# Columns read for analysis, in order. Nulls are read as -1 (ints) / NaN (floats) so the binary
# COPY rows have a fixed width and numpy can view the whole result without a Python loop. Every
# stored value is non-negative (columns.py), so -1 stands for null without ambiguity.
ANALYSIS_COLUMNS = [c.name for c in STEP_COLUMNS]
SAMPLE_READ_COLUMNS = ["rank", "device", *(c.name for c in SAMPLE_COLUMNS if c.name != "device")]
_FLOAT_COLUMNS = {"flops", *(c.name for c in SAMPLE_COLUMNS if c.kind == "float")}
_INT4_COLUMNS = {"rank", "device"}


def _pruned(run_id: uuid.UUID) -> RunArchive | None:
    """The run's archive when its raw rows have left PostgreSQL, else None."""
    return RunArchive.objects.filter(run_id=run_id, pruned_at__isnull=False).first()


def _select_exprs(names: list[str], vendor: str) -> list[str]:
    nan = "'NaN'::float8" if vendor == "postgresql" else "NULL"
    return [
        f"COALESCE({c}, {nan})" if c in _FLOAT_COLUMNS else (c if c in _INT4_COLUMNS else f"COALESCE({c}, -1)") for c in names
    ]


def _select_list(names: list[str], vendor: str) -> str:
    return ", ".join(_select_exprs(names, vendor))


def _week_filter(run_id: uuid.UUID) -> tuple[str, list[Any]]:
    """The partitions that may hold the run's rows: its week's (or the default partition when
    that week has none) and the legacy one (rows written without a week)."""
    return "run_week = ANY(%s)", [[LEGACY_WEEK, run_week(run_id)]]


# Rows a PostgreSQL read fetches per statement (its arrays are one result row: bounded memory).
ARRAY_FETCH_ROWS = 100_000
_ARRAY_OIDS = (1007, 1016, 1022)  # int4[], int8[], float8[]


class _RawArray(Loader):
    """A binary array result left as bytes: numpy reads it (``_array_values``), not Python."""

    format = Format.BINARY

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


def _array_values(raw: bytes | None, kind: str) -> npt.NDArray[Any]:
    """The elements of a one-dimensional binary PostgreSQL array without nulls (every column is
    COALESCEd): a 20-byte header, then a 4-byte length before each fixed-width element."""
    native = np.float64 if kind == ">f8" else np.int64
    if raw is None or int.from_bytes(raw[:4], "big") == 0:  # array_agg of no rows, or an empty array
        return np.zeros(0, dtype=native)
    n = int.from_bytes(raw[12:16], "big")
    return np.frombuffer(raw, dtype=np.dtype([("n", ">i4"), ("v", kind)]), count=n, offset=20)["v"].astype(native)


def hot_rows(
    *, table: str, run_id: uuid.UUID, names: list[str], where: str = "", params: list[Any] | None = None, order: str
) -> dict[str, npt.NDArray[Any]]:
    """Columns `names` of one run's rows in PostgreSQL (or SQLite) as numpy arrays, nulls as -1 / NaN.

    `where` is extra SQL on the table's columns (with %s placeholders in `params`); rows come in
    `order`, a unique key whose columns are among `names`. PostgreSQL: each column comes back as
    one binary array (``array_agg`` over the ordered rows) that numpy views: no Python object, and
    no Python call, per row (a binary COPY costs a few Python calls per row in psycopg, about
    2 µs; analysis passes read thousands). Reads come in pages of ARRAY_FETCH_ROWS rows (keyset
    on `order`), except when `where` filters with ``= ANY(...)``: PostgreSQL then cannot walk
    the key's index in order and sorts every matching row, so each page would sort them all
    again; such a read is one statement (one sort, as a COPY would do)."""
    extra = f" AND {where}" if where else ""
    if connection.vendor == "postgresql":
        return _hot_rows_pg(table, run_id, names, extra, params or [], order)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_select_list(names, 'sqlite')} FROM {table} WHERE run_id = %s{extra} ORDER BY {order}",
            [run_id.hex, *(params or [])],
        )
        fetched = cursor.fetchall()
    out: dict[str, npt.NDArray[Any]] = {}
    for i, name in enumerate(names):
        values = [row[i] for row in fetched]
        if name in _FLOAT_COLUMNS:
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        else:
            out[name] = np.array(values, dtype=np.int64)
    return out


def _hot_rows_pg(
    table: str, run_id: uuid.UUID, names: list[str], extra: str, params: list[Any], order: str
) -> dict[str, npt.NDArray[Any]]:
    key = [k.strip() for k in order.split(",")]
    by_key = ", ".join(f"{table}.{k}" for k in key)  # the table's columns (an index order), not the aliases
    weeks, week_params = _week_filter(run_id)
    aliased = ", ".join(f"{expr} AS {name}" for expr, name in zip(_select_exprs(names, "postgresql"), names, strict=True))
    aggregates = ", ".join(f"array_agg({name})" for name in names)
    kinds = [">f8" if n in _FLOAT_COLUMNS else (">i4" if n in _INT4_COLUMNS else ">i8") for n in names]
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    # A server-side-binding cursor of Django's connection (its own are client-side, text-only).
    cursor = psycopg.Cursor(raw)
    for oid in _ARRAY_OIDS:
        cursor.adapters.register_loader(oid, _RawArray)
    paged = "ANY(" not in extra.upper().replace(" ", "")
    limit = f" LIMIT {ARRAY_FETCH_ROWS}" if paged else ""
    chunks: list[dict[str, npt.NDArray[Any]]] = []
    after = ""
    after_params: list[Any] = []
    with cursor:
        while True:
            # array_agg keeps its input's order in practice, not by contract: checked below.
            cursor.execute(
                f"SELECT {aggregates} FROM (SELECT {aliased} FROM {table} WHERE run_id = %s AND {weeks}{extra}{after} "
                f"ORDER BY {by_key}{limit}) AS rows",
                [run_id, *week_params, *params, *after_params],
                binary=True,
            )
            row = cursor.fetchone()
            assert row is not None
            chunk = {name: _array_values(value, kind) for name, value, kind in zip(names, row, kinds)}
            chunks.append(chunk)
            n = len(chunk[names[0]])
            if not paged or n < ARRAY_FETCH_ROWS:
                break
            after = f" AND ({by_key}) > ({', '.join(['%s'] * len(key))})"
            after_params = [int(chunk[k][-1]) for k in key]
    rows = chunks[0] if len(chunks) == 1 else {name: np.concatenate([c[name] for c in chunks]) for name in names}
    return _in_key_order(rows, key)


def _in_key_order(rows: dict[str, npt.NDArray[Any]], key: list[str]) -> dict[str, npt.NDArray[Any]]:
    """The rows sorted by `key` (a no-op check when they already are, as they come)."""
    n = len(rows[key[0]])
    if n < 2:
        return rows
    keys = np.stack([rows[k] for k in key])
    diff = keys[:, 1:] - keys[:, :-1]
    # Lexicographically rising: the first key column that differs rises.
    first_nonzero = np.argmax(diff != 0, axis=0)
    rising = diff[first_nonzero, np.arange(n - 1)] > 0
    if rising.all():
        return rows
    order = np.lexsort([rows[k] for k in reversed(key)])
    return {name: values[order] for name, values in rows.items()}


def _hot_steps(run_id: uuid.UUID, ranks: list[int], floor: int) -> dict[str, npt.NDArray[Any]]:
    params: list[Any]
    if connection.vendor == "postgresql" and floor < 0 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        # Every row of a range of ranks (a full analysis): read in the key's index order, in pages.
        where, params = "rank BETWEEN %s AND %s", [ranks[0], ranks[-1]]
    elif connection.vendor == "postgresql":
        # A few ranks or only their newest rows: one descent of the index per rank (then sorted).
        where, params = "rank = ANY(%s) AND step > %s", [ranks, floor]
    else:
        where, params = f"rank IN ({', '.join(['%s'] * len(ranks))}) AND step > %s", [*ranks, floor]
    return hot_rows(
        table="telemetry_step", run_id=run_id, names=["rank", *ANALYSIS_COLUMNS], where=where, params=params, order="rank, step"
    )


def merge_rows(
    first: dict[str, npt.NDArray[Any]], second: dict[str, npt.NDArray[Any]], key: list[str]
) -> dict[str, npt.NDArray[Any]]:
    """Rows of both, ordered by `key`, a key present in both kept once (from `first`)."""
    if not len(second[key[0]]):
        return first
    if not len(first[key[0]]):
        return second
    both = {name: np.concatenate([first[name], second[name]]) for name in first}
    order = np.lexsort([both[k] for k in reversed(key)])  # stable: `first` wins ties
    both = {name: values[order] for name, values in both.items()}
    keys = np.stack([both[k] for k in key])
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (keys[:, 1:] != keys[:, :-1]).any(axis=0)
    return {name: values[keep] for name, values in both.items()}


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
        from phantomhub.telemetry.archive import archive_read

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
    rows = hot_rows(
        table="telemetry_systemsample",
        run_id=run_id,
        names=SAMPLE_READ_COLUMNS,
        where="t_ns > %s",
        params=[since_ns],
        order="rank, device, t_ns",
    )
    archive = None if pruned is False else _pruned(run_id)
    if archive is not None:
        from phantomhub.telemetry.archive import archive_read

        archived = archive_read(archive=archive, kind="samples", names=SAMPLE_READ_COLUMNS, after_t_ns=since_ns)
        rows = merge_rows(archived, rows, ["rank", "device", "t_ns"])
    return rows

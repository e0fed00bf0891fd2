"""A run's rows still in the database, as numpy columns: what the readers (selectors.py), the
archiver (archive.py) and the exports (exports.py) share."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import numpy.typing as npt

from phantomhub.telemetry.columns import SAMPLE_COLUMNS, STEP_COLUMNS
from phantomhub.telemetry.storage import Kind, stored_rows

# Columns read for analysis, in order. Nulls are read as -1 (ints) / NaN (floats), as the
# chunks store them (storage.py): every stored value is non-negative (columns.py), so -1 stands
# for null without ambiguity.
ANALYSIS_COLUMNS = [c.name for c in STEP_COLUMNS]
SAMPLE_READ_COLUMNS = ["rank", "device", *(c.name for c in SAMPLE_COLUMNS if c.name != "device")]


def hot_rows(
    *,
    kind: Kind,
    run_id: uuid.UUID,
    names: list[str],
    ranks: list[int] | None = None,
    except_ranks: list[int] | None = None,
    after: int | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """Columns `names` ("rank" among them when wanted) of one run's rows still in the database
    (of `ranks`, or every rank but `except_ranks`; with the kind's span column above `after`),
    ordered by rank and the kind's key, as numpy arrays, nulls as -1 / NaN. Only chunks that
    reach past `after` are read (an index range per rank), then one ``frombuffer`` over them."""
    fields = [name for name in names if name != "rank"]
    fields += [k for k in kind.key if k not in fields]  # the key sorts the rows; the span is one of it
    rows = stored_rows(
        kind, run_id, ranks, names=fields, except_ranks=except_ranks, key_hi_min=None if after is None else after + 1,
        with_rank=True,
    )  # fmt: skip
    if after is not None:
        keep = rows[kind.span] > after
        if not keep.all():
            rows = {name: values[keep] for name, values in rows.items()}
    key = ["rank", *kind.key]
    rows = _in_key_order(rows, key)
    return {name: rows[name] for name in names}


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

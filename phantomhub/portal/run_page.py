"""Reads for the run page (api.RunPageApi): the run with its analysis in one statement and, on
PostgreSQL, the analysis's chart windows as the stored JSON text.

The windows are ~90% of a stored result (310 of 337 kB for an 8-rank run of 3,000 steps, bench/
portal.py) and the page passes them through unchanged as its `series`: parsing them into Python
objects and dumping them again was most of the page's CPU. The database splits them off (jsonb
operators), the rest of the result is parsed as before, and the answer's `series` is the stored
text, spliced in after the rest is rendered: the same JSON values, last in the object.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.selectors import run_find
from phantomhub.waste.models import RunAnalysis

# Never on the page: the analysis's incremental state (large; analysis_row leaves it out too).
_UNREAD = ("analysis__state", "analysis__rank_rows", "analysis__rank_last_step")


def run_for_page(*, principal: Any, run_id: uuid.UUID) -> tuple[Run, str | None]:
    """run_get_visible's run (the same visibility, the same id or client id) with its project,
    team and analysis, and the analysis's windows as JSON text where the database split them off
    (PostgreSQL; None otherwise: then `result` holds them, as stored)."""
    if connection.vendor == "postgresql":
        return _run_split_pg(principal, run_id)
    return _run_whole(principal, run_id), None


def _runs(principal: Any, *unread: str) -> Any:
    runs = Run.objects.select_related("project", "project__team", "analysis").filter(project__in=projects_visible(principal))
    return runs.defer(*_UNREAD, *unread)


def _run_whole(principal: Any, run_id: uuid.UUID) -> Run:
    """The run with its analysis whole, as stored (SQLite; PostgreSQL runs it too)."""
    run = run_find(_runs(principal), run_id)
    if run is None:
        raise ApiError("not_found", "run not found", status_code=404)
    return run


def _run_split_pg(principal: Any, run_id: uuid.UUID) -> tuple[Run, str | None]:
    """The run, its analysis without `result`, then `result` read apart with the windows split off
    (jsonb operators). tests/test_sql_pairs.py pins it to _run_whole."""
    run = run_find(_runs(principal, "analysis__result"), run_id)
    if run is None:
        raise ApiError("not_found", "run not found", status_code=404)
    stored: RunAnalysis | None = getattr(run, "analysis", None)
    if stored is None:
        return run, None
    table = connection.ops.quote_name(RunAnalysis._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT analysed_seq, analysed_at, (result - 'windows')::text, (result -> 'windows')::text "
            f"FROM {table} WHERE run_id = %s",
            [stored.pk],
        )
        found = cursor.fetchone()
    # Two statements see two snapshots: an analysis written between them would pair one analysis's
    # figures with another's result. Then (or with no windows to pass through) the analysis is read
    # again whole, in one statement, as analysis_row reads it.
    if found is None or found[:2] != (stored.analysed_seq, stored.analysed_at) or found[2] is None or found[3] in (None, "null"):
        fresh = RunAnalysis.objects.defer(*(name.removeprefix("analysis__") for name in _UNREAD)).filter(pk=stored.pk).first()
        if fresh is None:  # the run was deleted meanwhile
            raise ApiError("not_found", "run not found", status_code=404)
        run.analysis = fresh
        return run, None
    # As JSONField.from_db_value parses it, with the field's decoder.
    stored.result = json.loads(found[2], cls=getattr(RunAnalysis._meta.get_field("result"), "decoder", None))
    return run, found[3]


def response_with(body: dict[str, Any], key: str, json_text: str) -> HttpResponse:
    """`body` rendered as the API renders it, with `key` set to the JSON value `json_text`."""
    assert body and key not in body
    rendered = JSONRenderer().render(body)
    content = rendered[:-1] + b',"' + key.encode() + b'":' + json_text.encode() + b"}"
    return HttpResponse(content, content_type="application/json")

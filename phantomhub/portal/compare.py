"""Comparing two to four runs side by side (GET /api/v1/portal/compare?runs=a,b,c).

For each run: its step-time decomposition (waste/baseline.py, from the stored analysis), its cost
by category, MFU, memory and stragglers; across the runs: the keys of ``config`` and
``environment`` whose values differ, nested keys flattened with dots (``optimizer.lr``).
Runs are looked up as the run page does (their id, or the id their agent registered them by),
among the runs the caller may see; an unknown run and another team's run answer alike.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.selectors import projects_visible
from phantomhub.errors import ApiError, invalid
from phantomhub.portal.selectors import lost_usd, run_row
from phantomhub.schema import ErrorSerializer
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.selectors import run_find
from phantomhub.waste.baseline import PARTS, composition_from_result
from phantomhub.waste.core.model import CATEGORIES
from phantomhub.waste.models import RunAnalysis
from phantomhub.waste.selectors import analysis_failure, analysis_row

MIN_RUNS, MAX_RUNS = 2, 4
MISSING: dict[str, Any] = {"present": False, "value": None}


def runs_param(raw: str | None) -> list[uuid.UUID]:
    """``runs=a,b,c``: two to four distinct run ids; 400 naming ``runs`` otherwise."""
    parts = [p.strip() for p in (raw or "").split(",") if p.strip()]
    if not parts:
        raise invalid("runs", f"required: {MIN_RUNS} to {MAX_RUNS} run ids, separated by commas")
    ids: list[uuid.UUID] = []
    for part in parts:
        try:
            run_id = uuid.UUID(part)
        except ValueError:
            raise invalid("runs", f"'{part[:64]}' is not a run id") from None
        if run_id in ids:
            raise invalid("runs", f"names run {run_id} twice")
        ids.append(run_id)
    if not MIN_RUNS <= len(ids) <= MAX_RUNS:
        raise invalid("runs", f"compares {MIN_RUNS} to {MAX_RUNS} runs, not {len(ids)}")
    return ids


def runs_visible(*, principal: Any, ids: Sequence[uuid.UUID]) -> list[Run]:
    """The runs, in the order asked; 404 naming ``runs`` for one the caller cannot see."""
    visible = Run.objects.select_related("project", "project__team").filter(project__in=projects_visible(principal))
    out: list[Run] = []
    for run_id in ids:
        run = run_find(visible, run_id)
        if run is None:
            raise ApiError("not_found", f"run {run_id} not found", fields={"runs": f"run {run_id} not found"}, status_code=404)
        if any(r.pk == run.pk for r in out):
            raise invalid("runs", f"names run {run.pk} twice (by its id and by its client id)")
        out.append(run)
    return out


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys; lists and scalars are values, as is an empty
    mapping below the top."""
    if isinstance(data, Mapping) and (data or not prefix):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _same(values: list[dict[str, Any]]) -> bool:
    first = values[0]
    return all(
        v["present"] == first["present"] and json.dumps(v["value"], sort_keys=True) == json.dumps(first["value"], sort_keys=True)
        for v in values[1:]
    )


def key_diff(documents: Sequence[Any]) -> dict[str, Any]:
    """The flattened keys whose values differ between the documents (a key one of them lacks
    differs), sorted by key, and how many keys are the same in all."""
    flat = [flatten(d if isinstance(d, Mapping) else {}) for d in documents]
    keys = sorted(set().union(*flat))
    differences, same = [], 0
    for key in keys:
        values = [{"present": True, "value": f[key]} if key in f else dict(MISSING) for f in flat]
        if _same(values):
            same += 1
        else:
            differences.append({"key": key, "values": values})
    return {"differences": differences, "same": same}


def _composition(result: Mapping[str, Any]) -> dict[str, Any] | None:
    comp = composition_from_result(result)
    if comp is None:
        return None
    return {
        "step_ms": comp.step_ms,
        "parts_ms": dict(comp.parts_ms),
        "shares": {p: comp.share(p) for p in PARTS},
        "mfu_step_time": comp.mfu_step_time,
    }


def _side(run: Run) -> dict[str, Any]:
    row = analysis_row(run=run)
    head = run_row(run, row) | {"world_size": run.world_size, "nodes": run.nodes, "dtype": run.dtype}
    if row is None:
        failed = analysis_failure(run=run) is not None
        return {"run": head, "analysis_status": "failed" if failed else "pending", "analysis": None}
    return {"run": head, "analysis_status": "analysed", "analysis": _analysed(row)}


def _analysed(row: RunAnalysis) -> dict[str, Any]:
    result = row.result
    cats = {fig["category"]: fig for fig in result.get("categories", [])}
    stragglers = [
        {"rank": s["rank"], "host": s["host"], "slow_step_share": s["slow_step_share"],
         "blamed_steps": s["blamed_steps"], "caused_wait_usd": s["caused_wait_usd"]}
        for s in result.get("stragglers", [])
    ]  # fmt: skip
    return {
        "cost_usd": float(row.cost_usd),
        "waste_usd": float(row.waste_usd),
        "recoverable_usd": float(row.recoverable_usd),
        "lost_usd": lost_usd(row),
        "gpu_hours": row.gpu_hours,
        "categories": {
            c: {"usd": cats[c]["usd_cents"] / 100, "share": cats[c]["share"], "gpu_seconds": cats[c]["gpu_seconds"]}
            for c in CATEGORIES
            if c in cats
        },
        "composition": _composition(result),
        "mfu": result.get("mfu"),
        "mfu_step_time": result.get("mfu_step_time"),
        "target_mfu": result.get("target_mfu"),
        "tokens_per_s": result.get("tokens_per_s"),
        "memory": result.get("memory"),
        "stragglers": stragglers,
        "straggler_wait_usd": sum(s["caused_wait_usd"] for s in stragglers),
        "ranks_reporting": result.get("ranks_reporting"),
        "steps": result.get("steps"),
        "complete": row.complete,
    }


def runs_compare(*, principal: Any, ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    runs = runs_visible(principal=principal, ids=ids)
    return {
        "runs": [_side(run) for run in runs],
        "parts": list(PARTS),
        "config": key_diff([run.config for run in runs]),
        "environment": key_diff([run.environment for run in runs]),
    }


class CompareApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("runs", str, required=True, description="2 to 4 run ids, separated by commas")],
        responses={200: OpenApiTypes.OBJECT, 400: ErrorSerializer, 404: ErrorSerializer},
        summary="Two to four runs side by side: step time, dollars by category, MFU, memory, stragglers, config diff",
        operation_id="portal_compare",
    )
    def get(self, request: Request) -> Response:
        ids = runs_param(request.query_params.get("runs"))
        return Response(runs_compare(principal=request.user, ids=ids))

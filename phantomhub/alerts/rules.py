"""What each rule kind reads and the thresholds it takes (validated here, named by field)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phantomhub.alerts.models import RuleKind
from phantomhub.errors import ApiError

FOR_S_MAX = 7 * 86_400.0
WINDOW_S_MIN, WINDOW_S_MAX = 5.0, 6 * 3600.0


@dataclass(frozen=True)
class Param:
    name: str
    lo: float
    hi: float
    lo_open: bool = False  # the bound itself is refused (a drop of 0%)
    choices: tuple[str, ...] = ()
    help: str = ""


PARAMS: Mapping[str, tuple[Param, ...]] = {
    RuleKind.WASTE_RATE: (
        Param("usd_per_hour", 0, 1e9, lo_open=True, help="fires when waste $/h is above this"),
        Param("share", 0, 1, lo_open=True, help="fires when the waste share of the run's time is above this (0..1)"),
    ),
    RuleKind.EFFICIENCY_DROP: (
        Param("metric", 0, 0, choices=("mfu", "tokens_per_s"), help="mfu or tokens_per_s"),
        Param("drop_pct", 0, 100, lo_open=True, help="fires when the figure is this many % below the baseline"),
    ),
    RuleKind.STRAGGLER: (Param("usd_per_hour", 0, 1e9, lo_open=True, help="others' wait caused by one rank, $/h"),),
    RuleKind.SILENT_RUN: (),
    RuleKind.IDLE_GPU: (),
    RuleKind.FORECAST_OVER_BUDGET: (
        Param("over_pct", 0, 1000, help="fires when the month-end forecast is more than this % over the budget (default 0)"),
    ),
}
REQUIRED: Mapping[str, tuple[str, ...]] = {
    RuleKind.EFFICIENCY_DROP: ("metric", "drop_pct"),
    RuleKind.STRAGGLER: ("usd_per_hour",),
}


def _bad(name: str, message: str) -> ApiError:
    return ApiError("invalid", f"params.{name}: {message}", fields={f"params.{name}": message})


def params_clean(kind: str, params: Any) -> dict[str, Any]:
    """The rule's thresholds, checked against its kind: unknown names, bounds, missing ones."""
    if not isinstance(params, Mapping):
        raise ApiError("invalid", "params: must be an object", fields={"params": "must be an object"})
    spec = {p.name: p for p in PARAMS.get(kind, ())}
    out: dict[str, Any] = {}
    for name, value in params.items():
        param = spec.get(str(name))
        if param is None:
            allowed = ", ".join(spec) or "none"
            raise _bad(str(name), f"not a threshold of a {kind} rule (it takes: {allowed})")
        if value is None:
            continue
        if param.choices:
            if value not in param.choices:
                raise _bad(param.name, f"must be one of {', '.join(param.choices)}")
            out[param.name] = value
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(param.name, "must be a number")
        number = float(value)
        if number != number or number < param.lo or number > param.hi or (param.lo_open and number == param.lo):
            low = "above" if param.lo_open else "at least"
            raise _bad(param.name, f"must be {low} {param.lo:g} and at most {param.hi:g}")
        out[param.name] = number
    for name in REQUIRED.get(kind, ()):
        if name not in out:
            raise _bad(name, "required")
    if kind == RuleKind.WASTE_RATE and not out:
        raise _bad("usd_per_hour", "give usd_per_hour, share, or both")
    return out

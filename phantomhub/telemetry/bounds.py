"""Bounds on what a run may hold, checked at ingest so that nothing stored can stall analysis,
bloat a page or overflow a reader.

Pure Python (no Django): the serializers call these checks and turn a BoundsError into a 400
naming the field.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from phantomhub.telemetry.columns import EPOCH_NS_MAX, EPOCH_NS_MIN

# The range of every timestamp the service stores (the same as the step columns' t_start_ns),
# and the longest span from allocation_start the analysis accepts; the waste model refuses runs
# outside them, so ingest refuses telemetry that would put a run there.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
MAX_SPAN = timedelta(days=400)
MAX_SPAN_NS = int(MAX_SPAN.total_seconds()) * 10**9
assert int(EARLIEST.timestamp()) * 10**9 == EPOCH_NS_MIN and int(LATEST.timestamp()) * 10**9 == EPOCH_NS_MAX

INT64_MAX = 2**63 - 1
# JSON documents a run carries (config, environment, event data): serialized size and number of
# values (every dict entry and list item, at any depth). A real config is a few hundred values.
MAX_JSON_BYTES = 64 * 1024
MAX_JSON_VALUES = 10_000
# Integers inside those documents must fit in 64 bits, what every JSON reader round-trips.
JSON_INT_MIN, JSON_INT_MAX = -(2**63), 2**64 - 1
# Drop counters of one rank: names, how many, and their values (cumulative, never negative).
MAX_COUNTER_NAME = 64
MAX_COUNTERS = 64  # in one counters event
MAX_RANK_COUNTERS = 256  # kept for a rank, over all its counters events


class BoundsError(ValueError):
    """`path` is relative to the checked value ("" for the value itself, "opt.lr", "xs[2]")."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or 'value'}: {message}")
        self.path = path
        self.message = message


def moment_check(value: datetime) -> None:
    if not EARLIEST <= value < LATEST:
        raise BoundsError("", "must be between 2000-01-01 and 2100-01-01 (UTC)")


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def json_check(value: Any, *, max_bytes: int = MAX_JSON_BYTES, max_values: int = MAX_JSON_VALUES) -> None:
    """Refuse a JSON document with more than `max_values` values, a non-finite number, an
    integer beyond 64 bits, or a compact UTF-8 encoding over `max_bytes`.

    The count stops at the first value over the limit, so a huge document costs no more than
    a small one to refuse (the request body cap keeps the parsed document itself small)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    count = 0
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            if isinstance(node, float) and not math.isfinite(node):
                raise BoundsError(path, "must be a finite number (no NaN or Infinity)")
            if isinstance(node, int) and not JSON_INT_MIN <= node <= JSON_INT_MAX:
                raise BoundsError(path, "integer out of range (at most 64 bits; send larger numbers as strings)")
            continue
        count += len(node)
        if count > max_values:
            raise BoundsError("", f"holds more than {max_values} values")
        stack.extend((child, _child(path, key)) for key, child in items)
    size = len(orjson.dumps(value))
    if size > max_bytes:
        raise BoundsError("", f"is {size} bytes as JSON, over the limit of {max_bytes}")


def ns_of(moment: datetime) -> int:
    """Epoch nanoseconds of an aware datetime, exactly (no float rounding)."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def moment_of(t_ns: int) -> datetime:
    """The aware UTC datetime of epoch nanoseconds (to the microsecond)."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=t_ns // 1000)


def span_end_ns(allocation_start: datetime) -> int:
    """The latest moment a run's telemetry may reach: MAX_SPAN after its allocation start."""
    return ns_of(allocation_start) + MAX_SPAN_NS


def counters_check(data: dict[str, Any]) -> None:
    """A counters event's data: at most MAX_COUNTERS names, each an integer in [0, 2**63 - 1]."""
    if len(data) > MAX_COUNTERS:
        raise BoundsError("", f"holds more than {MAX_COUNTERS} counters")
    for key, value in data.items():
        if len(key) > MAX_COUNTER_NAME:
            raise BoundsError("", f"counter names are at most {MAX_COUNTER_NAME} characters")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
            raise BoundsError(key, f"counters are integers in [0, {INT64_MAX}]")

"""Pure batching: raw step records in, columnar wire batches out. No I/O, no threads, no torch.

The training thread appends raw records (tuples of ``perf_counter_ns`` readings and counts); the
background thread turns them into rows with wall-clock start and duration, accumulates them in
columns, and cuts batches by rows, bytes and age. Everything here is deterministic so it can be
tested with plain lists and property-based tests.
"""

from __future__ import annotations

import array
import base64
import gzip
import json
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any

# Wire columns of POST /api/v1/runs/{id}/steps, in order.
STEP_COLUMNS: tuple[str, ...] = (
    "step",
    "t_start_ns",
    "dur_ns",
    "data_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "comm_ns",
    "flops",
    "tokens",
    "samples",
    "mem_allocated",
    "mem_reserved",
    "mem_peak",
    "alloc_retries",
)
REQUIRED_STEP_COLUMNS = ("step", "t_start_ns")

# Wire columns of POST /api/v1/runs/{id}/samples.
SAMPLE_COLUMNS: tuple[str, ...] = (
    "t_ns",
    "device",
    "gpu_util_pct",
    "sm_clock_mhz",
    "gpu_mem_used_bytes",
    "power_w",
    "cpu_process_pct",
    "cpu_other_pct",
    "cpu_steal_pct",
    "rss_bytes",
)
REQUIRED_SAMPLE_COLUMNS = ("t_ns",)

# Parts of a combined batch (POST /api/v1/runs/{id}/batch), besides "rank" and "host".
BATCH_PARTS = ("steps", "samples", "events", "counters")  # counters: only to a server that said it takes them

# Positions in a raw step record, as written by the training thread.
R_STEP, R_START, R_END, R_DATA, R_FWD, R_BWD, R_OPT, R_COMM = 0, 1, 2, 3, 4, 5, 6, 7
R_FLOPS, R_TOKENS, R_SAMPLES, R_MEM_ALLOC, R_MEM_RES, R_MEM_PEAK, R_RETRIES, R_MARKS = range(8, 16)
RAW_STEP_LEN = 16
# Stage slots in the training thread's accumulator, in raw-record order from R_DATA.
STAGE_SLOTS = {"data": 0, "forward": 1, "backward": 2, "optimizer": 3, "comm": 4}

RawStep = tuple[Any, ...]
Columns = dict[str, list[Any]]


Ended = tuple[RawStep, int]  # a raw record and the perf_counter_ns its duration runs to


def finalize_step(raw: RawStep, end_pc: int, clock_offset_ns: int) -> list[Any]:
    """One wire row (STEP_COLUMNS order) from a raw record whose duration runs to ``end_pc``."""
    cols = steps_to_columns([raw], [end_pc], clock_offset_ns)
    return [cols[name][0] for name in STEP_COLUMNS]


class DurationResolver:
    """Holds the latest step until its duration is known.

    ``dur_ns`` runs from a step's start to the next step's start; a phase (eval, checkpoint) or
    the end of the run closes it earlier, so that time between steps spent in a phase is not
    charged to the step before it. Emits (raw record, end) pairs; ``StepBuffer`` makes columns.
    """

    def __init__(self) -> None:
        self._held: RawStep | None = None

    @property
    def holding(self) -> bool:
        return self._held is not None

    def push(self, raw: RawStep) -> Ended | None:
        previous, self._held = self._held, raw
        if previous is None:
            return None
        return previous, raw[R_START]

    def boundary(self, t_pc: int) -> Ended | None:
        """A phase began (or the run ends) at ``t_pc``: the held step ends there."""
        held, self._held = self._held, None
        if held is None:
            return None
        return held, t_pc

    def close(self) -> Ended | None:
        """The run ends: the held step lasts until its own end."""
        held, self._held = self._held, None
        if held is None:
            return None
        return held, held[R_END]


class StepBuffer:
    """Ended steps waiting to be sent; turned into wire columns in bulk (zip runs in C).

    Rows numbered by the agent itself ("auto": the process's own 0, 1, 2...) come before any row
    the user numbered explicitly, and one ``take`` never mixes the two, so that a batch of auto
    rows can be shifted after a restart (``shift_steps``) and a batch of explicit rows never is.
    """

    def __init__(self, clock_offset_ns: int) -> None:
        self.clock_offset_ns = clock_offset_ns
        self._raws: list[RawStep] = []
        self._ends: list[int] = []
        self._auto = 0  # leading rows that are auto-numbered
        self.oldest_ns: int | None = None
        # Rows ever appended and taken: positions that outlive the rows (see ``since``).
        self.appended = 0
        self.taken = 0

    def __len__(self) -> int:
        return len(self._raws)

    @property
    def head_is_auto(self) -> bool:
        """Whether the next ``take`` returns auto-numbered rows."""
        return self._auto > 0

    def append(self, ended: Ended, now_ns: int, auto: bool = False) -> None:
        if auto and self._auto == len(self._raws):
            self._auto += 1
        self._raws.append(ended[0])
        self._ends.append(ended[1])
        self.appended += 1
        if self.oldest_ns is None:
            self.oldest_ns = now_ns

    def due(self, now_ns: int, max_rows: int, max_age_ns: int) -> bool:
        if not self._raws:
            return False
        if len(self._raws) >= max_rows:
            return True
        return self.oldest_ns is not None and now_ns - self.oldest_ns >= max_age_ns

    def take(self, max_rows: int) -> Columns:
        """Up to ``max_rows`` of the oldest rows: all auto-numbered or all explicit."""
        if self._auto:
            max_rows = min(max_rows, self._auto)
            self._auto -= max_rows
        raws, ends = self._raws[:max_rows], self._ends[:max_rows]
        del self._raws[:max_rows]
        del self._ends[:max_rows]
        self.taken += len(raws)
        if not self._raws:
            self.oldest_ns = None
        return steps_to_columns(raws, ends, self.clock_offset_ns)

    def since(self, mark: int) -> tuple[Columns, Columns]:
        """The rows appended after the first ``mark`` that are still here, left in place, as
        (auto-numbered, explicit) columns: what a checkpoint adds to the previous one."""
        lo = max(mark, self.taken) - self.taken
        split = max(lo, self._auto)
        off = self.clock_offset_ns
        auto = steps_to_columns(self._raws[lo:split], self._ends[lo:split], off)
        return auto, steps_to_columns(self._raws[split:], self._ends[split:], off)


def shift_steps(columns: Columns, base: int) -> Columns:
    """Auto-numbered rows of a process that resumed a run: numbered after ``base - 1``."""
    if base:
        columns["step"] = [step + base for step in columns["step"]]
    return columns


def base_after(last_step: Any) -> int:
    """The first step number a resumed rank may use, from the server's ``last_step`` (or null)."""
    if isinstance(last_step, bool) or not isinstance(last_step, int) or last_step < 0:
        return 0
    return int(last_step) + 1


def packed_from_run(answer: Any) -> bool:
    """Whether the server that answered ``POST /api/v1/runs`` takes packed columns."""
    return _wire_says(answer, "packed_columns")


def packed_nulls_from_run(answer: Any) -> bool:
    """Whether that server takes packed columns with a null mask (``pack_column(nulls=True)``)."""
    return _wire_says(answer, "packed_nulls")


def batch_counters_from_run(answer: Any) -> bool:
    """Whether that server takes the rank's counters as the batch's ``counters`` field."""
    return _wire_says(answer, "batch_counters")


def node_batches_from_run(answer: Any) -> bool:
    """Whether that server takes a node's rank batches in one ``POST /api/v1/runs/{id}/batches``."""
    return _wire_says(answer, "node_batches")


def _wire_says(answer: Any, name: str) -> bool:
    wire = answer.get("wire") if isinstance(answer, dict) else None
    return isinstance(wire, dict) and wire.get(name) is True


_NONE = type(None)


def pack_column(values: list[Any], *, nulls: bool = False) -> Any:
    """A column as ``{"i8" | "f8": base64 of little-endian values}`` when it is all integers
    (int64) or all finite numbers; otherwise (NaN, numpy scalars, huge integers) the list as it
    is. A column with nulls (or NaN / infinities, which an array would carry as nulls) is packed
    only with ``nulls`` (the server said ``wire.packed_nulls``), adding ``"null"``: base64 of one
    byte a row, 1 = null, with 0 written under it. The server decodes a packed column with one
    base64 pass instead of a JSON number per value, and the encoding here is C-speed too (array,
    base64), but for the mask and the zeros under it (a pass over the rows of a column with nulls)."""
    kinds = set(map(type, values))
    try:
        if kinds == {int}:
            return _packed("i8", array.array("q", values))
        if not kinds or not kinds <= {int, float, _NONE}:
            return values
        if _NONE not in kinds:
            floats = array.array("d", values)
            if all(map(math.isfinite, floats)):
                return _packed("f8", floats)
        return _masked(values, kinds) if nulls else values  # encode_json turns NaN into null
    except OverflowError:
        return values


def _masked(values: list[Any], kinds: set[type]) -> dict[str, str]:
    """A column of numbers and nulls packed with its null mask."""
    missing = bytearray(v is None for v in values)
    filled = [0 if v is None else v for v in values]
    if float in kinds:
        floats = array.array("d", filled)
        if all(map(math.isfinite, floats)):
            return _with_mask(_packed("f8", floats), missing)
        for i, x in enumerate(floats):  # rare: NaN / infinities, which an array would carry as null
            if not math.isfinite(x):
                missing[i], filled[i] = 1, 0
        if float in set(map(type, filled)):
            return _with_mask(_packed("f8", array.array("d", filled)), missing)
    # Integers and nulls only: int64, the type the server gives the same array.
    return _with_mask(_packed("i8", array.array("q", filled)), missing)


def _with_mask(column: dict[str, str], missing: bytearray) -> dict[str, str]:
    column["null"] = base64.b64encode(missing).decode("ascii")
    return column


def _packed(code: str, packed: array.array[Any]) -> dict[str, str]:
    if sys.byteorder == "big":
        packed.byteswap()
    return {code: base64.b64encode(packed.tobytes()).decode("ascii")}


def unpack_column(value: Any) -> Any:
    """The list a packed column holds, None where its mask says null (anything else unchanged)."""
    if not isinstance(value, dict) or len(value) != 1 + ("null" in value):
        return value
    mask = value.get("null", "")
    ((code, text),) = ((k, v) for k, v in value.items() if k != "null")
    typecode = {"i8": "q", "f8": "d"}.get(code)
    if typecode is None or not isinstance(text, str) or not isinstance(mask, str):
        return value
    out = array.array(typecode)
    out.frombytes(base64.b64decode(text))
    if sys.byteorder == "big":
        out.byteswap()
    if "null" not in value:
        return out.tolist()
    return [None if null else v for v, null in zip(out.tolist(), base64.b64decode(mask))]


def pack_columns(columns: Columns, *, nulls: bool = False) -> dict[str, Any]:
    return {name: pack_column(values, nulls=nulls) for name, values in columns.items()}


def unpack_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """A decoded batch with its step and sample columns as plain lists again (to split, shift or
    re-send it to a server that takes only arrays)."""
    for part in ("steps", "samples"):
        columns = payload.get(part)
        if isinstance(columns, dict):
            payload[part] = {name: unpack_column(values) for name, values in columns.items()}
    return payload


def step_base_from_run(answer: Any, rank: int) -> int:
    """The step base of ``rank`` from the answer to ``POST /api/v1/runs`` (0 for a new run)."""
    ranks = answer.get("ranks") if isinstance(answer, dict) else None
    if not isinstance(ranks, list):
        return 0
    for entry in ranks:
        if isinstance(entry, dict) and entry.get("rank") == rank:
            return base_after(entry.get("last_step"))
    return 0


def steps_to_columns(raws: list[RawStep], ends: list[int], clock_offset_ns: int) -> Columns:
    """Wire columns (STEP_COLUMNS) of ended raw records."""
    if not raws:
        return {name: [] for name in STEP_COLUMNS}
    cols = list(zip(*raws))
    starts = cols[R_START]
    off = clock_offset_ns
    out: Columns = {
        "step": list(cols[R_STEP]),
        "t_start_ns": [s + off for s in starts],
        "dur_ns": [(e if e > r else r) - s for s, r, e in zip(starts, cols[R_END], ends)],
    }
    for name, index in zip(STEP_COLUMNS[3:], range(R_DATA, R_MARKS)):
        out[name] = list(cols[index])
    return out


class ColumnBuffer:
    """Rows accumulated column by column, with the time the oldest one arrived."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._cols: list[list[Any]] = [[] for _ in self.names]
        self.oldest_ns: int | None = None
        self.appended = 0
        self.taken = 0

    def __len__(self) -> int:
        return len(self._cols[0])

    def append(self, row: Sequence[Any], now_ns: int) -> None:
        for col, value in zip(self._cols, row):
            col.append(value)
        self.appended += 1
        if self.oldest_ns is None:
            self.oldest_ns = now_ns

    def due(self, now_ns: int, max_rows: int, max_age_ns: int) -> bool:
        if not self._cols[0]:
            return False
        if len(self._cols[0]) >= max_rows:
            return True
        return self.oldest_ns is not None and now_ns - self.oldest_ns >= max_age_ns

    def take(self, max_rows: int) -> Columns:
        """Remove and return up to ``max_rows`` of the oldest rows as a name -> list mapping."""
        out = {name: col[:max_rows] for name, col in zip(self.names, self._cols)}
        for col in self._cols:
            del col[:max_rows]
        self.taken += len(out[self.names[0]])
        if not self._cols[0]:
            self.oldest_ns = None
        return out

    def since(self, mark: int) -> Columns:
        """The rows appended after the first ``mark`` that are still here, left in place."""
        lo = max(mark, self.taken) - self.taken
        return {name: col[lo:] for name, col in zip(self.names, self._cols)}


def compact_columns(columns: Columns, required: Sequence[str]) -> Columns:
    """Drops optional columns that hold nothing but nulls (the server treats a missing one as null)."""
    return {name: values for name, values in columns.items() if name in required or any(value is not None for value in values)}


def concat_columns(first: Columns, second: Columns) -> Columns:
    """The rows of ``first`` then those of ``second`` (same column names)."""
    return {name: first[name] + second[name] for name in first}


def column_rows(columns: Columns) -> int:
    for values in columns.values():
        return len(values)
    return 0


def halve_columns(columns: Columns) -> tuple[Columns, Columns]:
    half = (column_rows(columns) + 1) // 2
    return (
        {name: values[:half] for name, values in columns.items()},
        {name: values[half:] for name, values in columns.items()},
    )


def chunk_columns(columns: Columns, max_rows: int) -> Iterator[Columns]:
    """Consecutive slices of at most ``max_rows`` rows, in order."""
    total = column_rows(columns)
    for lo in range(0, total, max_rows):
        yield {name: values[lo : lo + max_rows] for name, values in columns.items()}


def _json_default(value: Any) -> Any:
    """numpy / torch scalars (e.g. ``tokens=mask.sum()``) become numbers; anything else a string."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:  # noqa: S110 - not a scalar after all: fall through to str()
            pass
    for cast in (int, float):
        try:
            return cast(value)
        except (TypeError, ValueError):
            continue
    return str(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode_json(payload: Any) -> bytes:
    """Compact JSON; NaN and infinities (not JSON) become null rather than losing the batch."""
    try:
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=_json_default)
    except ValueError:
        text = json.dumps(_finite(payload), separators=(",", ":"), allow_nan=False, default=_json_default)
    return text.encode("utf-8")


def gzip_bytes(data: bytes) -> bytes:
    # Level 1: on these integer columns within ~6% of level 6's ratio, at a third of the CPU.
    return gzip.compress(data, compresslevel=1, mtime=0)


def fit_columns(
    key: str, columns: Columns, extra: dict[str, Any], max_bytes: int, *, packed: bool = False, nulls: bool = False
) -> Iterator[tuple[dict[str, Any], bytes, int]]:
    """Payloads ``{**extra, key: columns}`` encoded to JSON (columns packed if ``packed``, those
    with nulls too if ``nulls``), halved until each fits ``max_bytes``.

    A single row that is still too large is yielded as is (the server's 413 decides its fate).
    """
    stack = [columns]
    while stack:
        part = stack.pop()
        payload = dict(extra)
        payload[key] = pack_columns(part, nulls=nulls) if packed else part
        body = encode_json(payload)
        rows = column_rows(part)
        if len(body) > max_bytes and rows > 1:
            first, second = halve_columns(part)
            stack.append(second)
            stack.append(first)
            continue
        yield payload, body, rows


def fit_batch(
    parts: dict[str, Any],
    extra: dict[str, Any],
    max_bytes: int,
    *,
    rebase: bool = False,
    packed: bool = False,
    nulls: bool = False,
) -> Iterator[tuple[bytes, int, bool]]:
    """A combined batch ``{**extra, **parts}`` encoded: (body, step rows, rebase) per request.

    One request when it fits ``max_bytes`` (the usual case: an interval of one rank is a few KB);
    otherwise each part on its own, columns halved until each fits. Only the requests that carry
    steps keep ``rebase``. ``packed``: step and sample columns packed (``pack_column``), except
    steps awaiting a rebase, which the spool shifts as lists; ``nulls``: columns with nulls packed
    too, with their null masks (a server that said ``wire.packed_nulls``).
    """
    pack = {"steps": packed and not rebase, "samples": packed}
    wire = {name: pack_columns(value, nulls=nulls) if pack.get(name) else value for name, value in parts.items()}
    body = encode_json({**extra, **wire})
    steps = parts.get("steps")
    if len(body) <= max_bytes or set(parts) <= {"events", "counters"}:  # events: at most 500 a request
        yield body, column_rows(steps) if steps is not None else 0, rebase and steps is not None
        return
    for name in BATCH_PARTS:
        if name not in parts:
            continue
        if name in ("events", "counters"):
            yield encode_json({**extra, name: parts[name]}), 0, False
            continue
        for _payload, part_body, rows in fit_columns(name, parts[name], extra, max_bytes, packed=pack[name], nulls=nulls):
            yield part_body, rows if name == "steps" else 0, rebase and name == "steps"

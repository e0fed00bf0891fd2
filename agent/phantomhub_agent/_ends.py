"""Why a run ended: the ``data`` of its finish event when it did not end cleanly.

``{"cause": c, "exception": "<module.QualName>", "message": "<first 200 characters>"}`` with the
cause one of:

- ``oom``: ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` is the same class), or a
  ``RuntimeError`` whose message says "out of memory";
- ``collective_timeout``: a ``torch.distributed.DistError`` (``DistBackendError``...), or a
  ``RuntimeError`` naming NCCL or Gloo with "timeout", "timed out" or "watchdog";
- ``exception``: anything else;
- ``sigterm``: the process got SIGTERM (no exception; see ``_run._on_sigterm``).

The exception's chain (``__cause__``, ``__context__``) is looked through, a few links deep, so
that an OOM a framework re-raised as its own error still counts as one. torch is never imported
here: its classes are looked up only when the program imported it.
"""

from __future__ import annotations

import sys
from typing import Any

CAUSES = ("oom", "collective_timeout", "exception", "sigterm")
MESSAGE_MAX_CHARS = 200
_CHAIN_MAX = 5


def _classes(module: str, *names: str) -> tuple[type[BaseException], ...]:
    mod: Any = sys.modules.get(module)
    if mod is None:
        return ()
    found = []
    for name in names:
        cls = getattr(mod, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(out) < _CHAIN_MAX and all(current is not seen for seen in out):
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _is_oom(exc: BaseException) -> bool:
    oom = _classes("torch", "OutOfMemoryError") + _classes("torch.cuda", "OutOfMemoryError")
    if oom and isinstance(exc, oom):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower()


def _is_collective_timeout(exc: BaseException) -> bool:
    dist = _classes("torch.distributed", "DistError", "DistBackendError")
    if dist and isinstance(exc, dist):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc).lower()
    return ("nccl" in text or "gloo" in text) and any(word in text for word in ("timeout", "timed out", "watchdog"))


def classify(exc: BaseException) -> str:
    """``oom``, ``collective_timeout`` or ``exception``."""
    chain = _chain(exc)
    if any(_is_oom(e) for e in chain):
        return "oom"
    if any(_is_collective_timeout(e) for e in chain):
        return "collective_timeout"
    return "exception"


def qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"[:MESSAGE_MAX_CHARS]  # builtins.RuntimeError, torch.OutOfMemoryError


def end_cause(exc: BaseException) -> dict[str, str]:
    """The finish event's ``data`` for a run ended by ``exc``."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the cause
        message = ""
    return {"cause": classify(exc), "exception": qualified_name(exc), "message": message[:MESSAGE_MAX_CHARS]}


def sigterm_cause() -> dict[str, str]:
    return {"cause": "sigterm"}

"""Logging that never floods the training job's output, and the debug switch that re-raises.

The agent lives inside someone else's process: in production every internal error is swallowed,
logged once per kind and counted; with ``debug=True`` (the test suite's setting) it is re-raised
so that a bug cannot hide behind the swallowing.
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("phantomhub_agent")


class AgentError(RuntimeError):
    """An internal error of the agent, surfaced only in debug mode."""


class OnceLogger:
    """Logs a message the first time its key is seen; later ones go to DEBUG only."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def warning(self, key: str, message: str, *args: object) -> None:
        self._emit(logging.WARNING, key, message, *args)

    def error(self, key: str, message: str, *args: object) -> None:
        self._emit(logging.ERROR, key, message, *args)

    def _emit(self, level: int, key: str, message: str, *args: object) -> None:
        with self._lock:
            first = key not in self._seen
            self._seen.add(key)
        logger.log(level if first else logging.DEBUG, message, *args)

    def forget(self, key: str) -> None:
        """The next message of this key is logged at its level again (a new episode)."""
        with self._lock:
            self._seen.discard(key)

    def reset(self) -> None:
        self._seen = set()
        self._lock = threading.Lock()

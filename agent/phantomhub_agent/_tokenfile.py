"""The token read from a file (PHANTOMHUB_TOKEN_FILE), so that rotating it needs no restart.

A Kubernetes Secret mounted as a volume, or a file a secrets agent rewrites, holds the token. The
agent reads it at start, and again whenever the server answers 401: the old token was revoked, or
its rotation's overlap ended. A new token in the file is used at once and the refused request is
sent again with it; with no new token yet, delivery halts and everything is kept in the spool
(``_delivery``), and the file is read again every ``RECHECK_S`` until a new token is there, then
the spool is sent in order. Nothing is lost across a rotation, however late the file is updated.
"""

from __future__ import annotations

import time
from pathlib import Path

# How often a halted sender looks at the file for a new token.
RECHECK_S = 1.0


def token_read(path: Path) -> str | None:
    """The token in the file (surrounding whitespace dropped), or None when unreadable or empty."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


class TokenFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.next_check = 0.0

    def newer(self, current: str | None, *, now: float | None = None, throttled: bool = False) -> str | None:
        """The file's token if it differs from ``current``; None otherwise. ``throttled`` reads
        at most every RECHECK_S (a halted sender's polling), else the file is read now (a 401)."""
        moment = time.monotonic() if now is None else now
        if throttled and moment < self.next_check:
            return None
        self.next_check = moment + RECHECK_S
        token = token_read(self.path)
        return token if token is not None and token != current else None

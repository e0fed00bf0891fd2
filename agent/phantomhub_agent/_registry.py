"""The in-process run registry: which process on this host belongs to which registered run.

While a run is active, its process keeps ``$PHANTOMHUB_RUN_DIR/<pid>.json`` (default
``/tmp/phantomhub-runs/``) with ``{"pid", "project", "run_id", "server_run_id", "server",
"started_at"}``; the node collector (``phantomhub-agent node``) maps the pids holding a GPU to
runs with it, so that a GPU an instrumented run covers is never priced a second time by the fleet.

``run_id`` is the id the agent registered the run by; ``project`` and ``server_run_id`` are
filled from the registration's answer when it comes (null until then, or when it never does).
The file is written atomically (temporary name, rename) and removed when the run finishes; a
file left by a killed process names a dead pid (or a pid whose process started after
``started_at``), which the collector ignores.

Nothing here may disturb training: every function swallows its errors (debug mode aside, where
the caller decides) and only touches a few hundred bytes on a local disk.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ._log import logger

ENV_DIR = "PHANTOMHUB_RUN_DIR"
DEFAULT_DIR = "/tmp/phantomhub-runs"  # noqa: S108 - a well-known place both sides agree on
FIELDS = ("pid", "project", "run_id", "server_run_id", "server", "started_at")


def registry_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get(ENV_DIR) or DEFAULT_DIR)


def _ensure_dir(path: Path) -> None:
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    if str(path) == DEFAULT_DIR:
        # Shared by every user's runs on the host, like /tmp itself: writable by all, sticky.
        with contextlib.suppress(OSError):
            os.chmod(path, 0o1777)  # noqa: S103 - the sticky bit keeps each user's files their own


class RunRecord:
    """The registry file of one run in this process. Methods never raise."""

    def __init__(
        self, *, run_id: str, project: str | None, server: str, started_at: float, directory: Path | None = None
    ) -> None:
        self.pid = os.getpid()
        self.directory = directory or registry_dir()
        self.path = self.directory / f"{self.pid}.json"
        self.data: dict[str, Any] = {
            "pid": self.pid,
            "project": project,
            "run_id": run_id,
            "server_run_id": None,
            "server": server,
            "started_at": dt.datetime.fromtimestamp(started_at, tz=dt.timezone.utc).isoformat(),
        }
        self.written = False

    def write(self) -> bool:
        try:
            _ensure_dir(self.directory)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=str(self.directory))
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(self.data, fh, separators=(",", ":"))
                os.chmod(tmp, 0o644)  # the collector may run as another user
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self.written = True
            return True
        except Exception as exc:
            logger.debug("phantomhub: cannot write the run registry file %s: %r", self.path, exc)
            return False

    def registered(self, answer: Any) -> None:
        """The server's answer to the registration: its run id and the project's slug."""
        try:
            if os.getpid() != self.pid or not isinstance(answer, dict):
                return
            changed = False
            for key, field in (("id", "server_run_id"), ("project", "project")):
                value = answer.get(key)
                if isinstance(value, str) and value and self.data.get(field) != value:
                    self.data[field] = value
                    changed = True
            if changed and self.written and self._still_ours():
                self.write()
        except Exception as exc:
            logger.debug("phantomhub: cannot update the run registry file: %r", exc)

    def _still_ours(self) -> bool:
        """A later run of this process may have replaced the file: never touch its record."""
        try:
            current = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(current, dict) and current.get("run_id") == self.data["run_id"]

    def remove(self) -> None:
        try:
            if os.getpid() == self.pid and self.written and self._still_ours():
                self.path.unlink()
            self.written = False
        except Exception as exc:
            logger.debug("phantomhub: cannot remove the run registry file %s: %r", self.path, exc)


def registry_read(path: Path) -> dict[str, Any] | None:
    """One registry file, or None when it is missing, half-written or not a registry record."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) or not isinstance(data.get("pid"), int):
        return None
    return {key: data.get(key) for key in FIELDS}


def started_at_epoch(record: dict[str, Any]) -> float | None:
    value = record.get("started_at")
    if not isinstance(value, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()

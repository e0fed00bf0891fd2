"""The on-disk spool: requests that could not be delivered, kept until they can be.

Layout: ``<root>/<run_id>/<time_ns>-<k>-r<rank>-p<pid>-<seq>.phk``, one request per file, where
``k`` is ``a`` for the run's metadata and ``b`` for everything else. A file is a one-line JSON
header followed by the request body exactly as it would have been sent (usually gzip). Files are
written to a temporary name, fsynced and renamed, so a file either exists whole or not at all,
even after SIGKILL or power loss.

Ownership: a process replays its own files in order (FIFO, so a run's metadata always precedes
its steps). Files of processes that are no longer alive are adopted by whoever finds them, claimed
by an atomic rename to ``*.claimed-<pid>`` so two processes never replay the same file at once.

The spool is bounded (default 1 GiB): when a write would pass the cap, the oldest files are
deleted first and counted. Run-metadata files are tiny and never dropped, so that whatever
survives can still be delivered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUFFIX = ".phk"
CLAIM_MARK = ".claimed-"
TMP_PREFIX = ".tmp-"
KIND_RUN = "a"
KIND_DATA = "b"
HEADER_VERSION = 1


def token_fingerprint(token: str | None) -> str:
    """A short fingerprint of the token, so the token itself is never written to disk."""
    if not token:
        return ""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass
class SpooledRequest:
    path: str
    body: bytes
    gzipped: bool
    kind: str  # "run" | "steps" | "samples" | "events"
    run_id: str
    rows: int = 0
    token_fp: str = ""
    server: str = ""
    created_ns: int = 0


@dataclasses.dataclass
class SpoolEntry:
    path: Path
    run_id: str
    name: str
    owner_pid: int

    @property
    def is_run_metadata(self) -> bool:
        return _kind_of(self.name) == KIND_RUN


def _kind_of(name: str) -> str:
    parts = name.split("-", 2)
    return parts[1] if len(parts) > 1 else ""


def _owner_of(name: str) -> int:
    if CLAIM_MARK in name:
        try:
            return int(name.rsplit(CLAIM_MARK, 1)[1])
        except ValueError:
            return -1
    for part in name.split("-"):
        if part.startswith("p") and part[1:].isdigit():
            return int(part[1:])
    return -1


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def encode_file(request: SpooledRequest) -> bytes:
    header = {
        "v": HEADER_VERSION,
        "path": request.path,
        "gzip": request.gzipped,
        "kind": request.kind,
        "run_id": request.run_id,
        "rows": request.rows,
        "token_fp": request.token_fp,
        "server": request.server,
        "created_ns": request.created_ns,
    }
    return json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n" + request.body


def decode_file(data: bytes) -> SpooledRequest:
    newline = data.index(b"\n")
    header = json.loads(data[:newline].decode("utf-8"))
    if header.get("v") != HEADER_VERSION:
        raise ValueError(f"unknown spool file version {header.get('v')!r}")
    return SpooledRequest(
        path=str(header["path"]),
        body=data[newline + 1 :],
        gzipped=bool(header["gzip"]),
        kind=str(header["kind"]),
        run_id=str(header["run_id"]),
        rows=int(header.get("rows", 0)),
        token_fp=str(header.get("token_fp", "")),
        server=str(header.get("server", "")),
        created_ns=int(header.get("created_ns", 0)),
    )


def read_entry(entry: SpoolEntry) -> SpooledRequest:
    return decode_file(entry.path.read_bytes())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Spool:
    """A bounded directory of undelivered requests. Thread-safe within a process."""

    def __init__(self, root: Path, max_bytes: int, rank: int = 0) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.rank = rank
        self.pid = os.getpid()
        self.dropped_batches = 0
        self.dropped_rows = 0
        self.written_batches = 0
        self._seq = 0
        self._lock = threading.Lock()
        self._known_bytes: int | None = None

    def after_fork(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._known_bytes = None

    # -- writing ---------------------------------------------------------------------------------

    def write(self, request: SpooledRequest) -> Path | None:
        """Stores ``request`` durably; drops the oldest files first if the cap would be passed.

        Returns the file, or None when the request itself cannot fit (it is then counted as dropped).
        """
        data = encode_file(request)
        with self._lock:
            if self.written_batches % 64 == 0:
                self._known_bytes = None  # other processes write here too: recount now and then
            if not self._make_room(len(data)) and request.kind != "run":
                self.dropped_batches += 1
                self.dropped_rows += request.rows if request.kind == "steps" else 0
                return None
            run_dir = self.root / request.run_id
            if not run_dir.is_dir():
                run_dir.mkdir(parents=True, exist_ok=True)
                _fsync_dir(run_dir.parent)
            self._seq += 1
            kind = KIND_RUN if request.kind == "run" else KIND_DATA
            name = f"{time.time_ns():020d}-{kind}-r{self.rank}-p{self.pid}-{self._seq:08d}{SUFFIX}"
            final = run_dir / name
            tmp = run_dir / (TMP_PREFIX + name)
            fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(str(tmp), str(final))
            _fsync_dir(run_dir)
            if self._known_bytes is not None:
                self._known_bytes += len(data)
            self.written_batches += 1
            return final

    def _make_room(self, incoming: int) -> bool:
        if self._known_bytes is not None and self._known_bytes + incoming <= self.max_bytes:
            return True
        files = sorted(self._scan_sizes(), key=lambda item: item[0].name)
        total = sum(size for _, size in files)
        for path, size in files:
            if total + incoming <= self.max_bytes:
                break
            if _kind_of(path.name) == KIND_RUN:
                continue
            try:
                rows = _rows_of(path)
                path.unlink()
            except OSError:
                continue
            total -= size
            self.dropped_batches += 1
            self.dropped_rows += rows
        self._known_bytes = total
        return total + incoming <= self.max_bytes

    def _scan_sizes(self) -> Iterator[tuple[Path, int]]:
        if not self.root.is_dir():
            return
        for run_dir in self.root.iterdir():
            if not run_dir.is_dir():
                continue
            for path in run_dir.iterdir():
                if path.name.startswith(TMP_PREFIX) or SUFFIX not in path.name:
                    continue
                try:
                    yield path, path.stat().st_size
                except OSError:
                    continue

    # -- reading ---------------------------------------------------------------------------------

    def own(self, run_id: str) -> list[SpoolEntry]:
        """This process's files of ``run_id``, oldest first."""
        run_dir = self.root / run_id
        marker = f"-p{self.pid}-"
        entries = [
            SpoolEntry(path=p, run_id=run_id, name=p.name, owner_pid=self.pid)
            for p in _list_files(run_dir)
            if marker in p.name and CLAIM_MARK not in p.name
        ]
        entries.sort(key=lambda e: e.name)
        return entries

    def has_own(self, run_id: str) -> bool:
        marker = f"-p{self.pid}-"
        return any(marker in p.name and CLAIM_MARK not in p.name for p in _list_files(self.root / run_id))

    def orphans(self) -> list[SpoolEntry]:
        """Files whose writing process is gone (killed, crashed, or an earlier start), oldest first."""
        found: list[SpoolEntry] = []
        alive: dict[int, bool] = {}
        if not self.root.is_dir():
            return found
        for run_dir in sorted(self.root.iterdir()):
            if not run_dir.is_dir():
                continue
            for path in _list_files(run_dir):
                owner = _owner_of(path.name)
                if owner not in alive:
                    alive[owner] = owner != self.pid and pid_alive(owner)
                if owner == self.pid or alive[owner]:
                    continue
                found.append(SpoolEntry(path=path, run_id=run_dir.name, name=path.name, owner_pid=owner))
        found.sort(key=lambda e: (e.run_id, _base_name(e.name)))
        return found

    def claim(self, entry: SpoolEntry) -> SpoolEntry | None:
        """Atomically takes a foreign file for this process; None if someone else was faster."""
        target = entry.path.with_name(_base_name(entry.name) + CLAIM_MARK + str(self.pid))
        try:
            os.rename(str(entry.path), str(target))
        except OSError:
            return None
        return SpoolEntry(path=target, run_id=entry.run_id, name=target.name, owner_pid=self.pid)

    def release(self, entry: SpoolEntry) -> None:
        """Gives a claimed file back (under its original name) for a later attempt."""
        if CLAIM_MARK not in entry.name:
            return
        with contextlib.suppress(OSError):
            os.rename(str(entry.path), str(entry.path.with_name(_base_name(entry.name))))

    def remove(self, entry: SpoolEntry) -> None:
        try:
            size = entry.path.stat().st_size
            entry.path.unlink()
        except OSError:
            return
        with self._lock:
            if self._known_bytes is not None:
                self._known_bytes = max(0, self._known_bytes - size)
        _remove_empty_dir(entry.path.parent)

    def cleanup_stale_tmp(self, older_than_s: float = 3600.0) -> None:
        """Removes half-written temporary files left by killed processes."""
        if not self.root.is_dir():
            return
        cutoff = time.time() - older_than_s
        for run_dir in self.root.iterdir():
            if not run_dir.is_dir():
                continue
            for path in run_dir.iterdir():
                if not path.name.startswith(TMP_PREFIX):
                    continue
                try:
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                except OSError:
                    continue


def _base_name(name: str) -> str:
    return name.split(CLAIM_MARK, 1)[0]


def _list_files(run_dir: Path) -> list[Path]:
    try:
        return [p for p in run_dir.iterdir() if not p.name.startswith(TMP_PREFIX) and SUFFIX in p.name]
    except OSError:
        return []


def _rows_of(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            header = json.loads(fh.readline().decode("utf-8"))
        return int(header.get("rows", 0)) if header.get("kind") == "steps" else 0
    except (OSError, ValueError):
        return 0


def _remove_empty_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def iter_spool_files(root: Path) -> Iterator[tuple[str, Path]]:
    """Every complete spool file under ``root`` (a spool root or one run's directory)."""
    root = Path(root)
    if not root.exists():
        return
    candidates = [root] if any(p.suffix == SUFFIX or CLAIM_MARK in p.name for p in _list_files(root)) else []
    candidates += sorted(p for p in root.rglob("*") if p.is_dir())
    seen: set[Path] = set()
    for run_dir in candidates:
        if run_dir in seen:
            continue
        seen.add(run_dir)
        for path in sorted(_list_files(run_dir), key=lambda p: _base_name(p.name)):
            yield run_dir.name, path


def describe(request: SpooledRequest) -> dict[str, Any]:
    return {"kind": request.kind, "run_id": request.run_id, "rows": request.rows, "path": request.path}

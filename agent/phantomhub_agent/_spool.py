"""The on-disk spool: requests that could not be delivered, kept until they can be.

Layout: ``<root>/<run_id>/<time_ns>-<k>-r<rank>-p<pid>-<seq>.phk``, one request per file, where
``k`` is ``a`` for the run's metadata, ``c`` for a checkpoint, ``h`` for a batch handed to the
node's sender and ``b`` for everything else. A
file is a one-line JSON header followed by the request body exactly as it would have been sent (usually gzip). Files are
written to a temporary name, fsynced and renamed, so a file either exists whole or not at all,
even after SIGKILL or power loss.

Step numbers: while a run's registration has not been answered, a process cannot know where its
own step numbering must start (after the steps stored by an earlier process of the same run and
rank), so its auto-numbered step files carry ``"rebase": true``. Whoever delivers the registration
learns the base from the answer and shifts those files in place (``Spool.rebase_after``) before
the registration file is removed: a crash in between repeats it with the same answer.

Checkpoints (``c``): what a live process has recorded but not yet sent, written every
``checkpoint_interval_s`` as ordinary requests (a batch of the rows since its previous checkpoint).
They are not backlog while their writer lives: ``own`` and ``has_own`` skip them, and the writer
deletes them once those rows were delivered or spooled. If it dies first, they are orphans like any
other file and go out with the orphan replay or ``sync``; a row sent twice is a duplicate the server
ignores (steps by (run, rank, step) and start, samples by (run, rank, device, t_ns), events by id).

Handed batches (``h``): on a node of several local ranks, a rank other than local rank 0 writes
its interval's batch here instead of sending it, and local rank 0 sends the node's batches in one
request (``_node``). They are not the writer's backlog; local rank 0 claims them as below, and
deletes them once delivered. One its writer sees still here after the hand-off timeout, it claims
and sends itself; one whose writer died is an orphan like any other file.

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
import gzip
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._batcher import encode_json, gzip_bytes, shift_steps, unpack_payload

SUFFIX = ".phk"
CLAIM_MARK = ".claimed-"
TMP_PREFIX = ".tmp-"
KIND_RUN = "a"
KIND_DATA = "b"
KIND_CHECKPOINT = "c"
KIND_HANDED = "h"
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
    kind: str  # "run" | "batch" | "steps" | "samples" | "events"
    # (rows: the step rows of a "steps" or "batch" request, what a dropped file is counted in)
    run_id: str
    rows: int = 0
    token_fp: str = ""
    server: str = ""
    created_ns: int = 0
    # Auto-numbered steps whose base (the run's stored steps of this rank) is not known yet.
    rebase: bool = False


@dataclasses.dataclass
class SpoolEntry:
    path: Path
    run_id: str
    name: str
    owner_pid: int

    @property
    def is_run_metadata(self) -> bool:
        return _kind_of(self.name) == KIND_RUN

    @property
    def is_checkpoint(self) -> bool:
        return _kind_of(self.name) == KIND_CHECKPOINT


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
    if request.rebase:
        header["rebase"] = True
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
        rebase=bool(header.get("rebase", False)),
    )


def written_ns(name: str) -> int:
    """When a spool file was written (epoch ns, from its name); 0 if the name has no time."""
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def writer_of(name: str) -> tuple[int, int] | None:
    """(pid, rank) of the process that wrote a spool file, from its name."""
    parts = _base_name(name).split("-")
    if len(parts) < 5 or not parts[2].startswith("r") or not parts[3].startswith("p"):
        return None
    try:
        return int(parts[3][1:]), int(parts[2][1:])
    except ValueError:
        return None


def shift_request(request: SpooledRequest, base: int) -> SpooledRequest:
    """A rebase-marked steps request (or combined batch) with its step numbers shifted by ``base``."""
    body = gzip.decompress(request.body) if request.gzipped else request.body
    payload = unpack_payload(json.loads(body.decode("utf-8")))
    payload["steps"] = shift_steps(payload["steps"], base)
    raw = encode_json(payload)
    return dataclasses.replace(request, body=gzip_bytes(raw) if request.gzipped else raw, rebase=False)


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

    def write(self, request: SpooledRequest, *, checkpoint: bool = False, handed: bool = False) -> Path | None:
        """Stores ``request`` durably; drops the oldest files first if the cap would be passed.

        Returns the file, or None when the request itself cannot fit (it is then counted as
        dropped, unless it is a ``checkpoint`` or ``handed``: the caller still holds it).
        """
        data = encode_file(request)
        with self._lock:
            if self.written_batches % 64 == 0:
                self._known_bytes = None  # other processes write here too: recount now and then
            if not self._make_room(len(data)) and request.kind != "run":
                if not (checkpoint or handed):
                    self.dropped_batches += 1
                    self.dropped_rows += request.rows if request.kind in ("steps", "batch") else 0
                return None
            run_dir = self.root / request.run_id
            if not run_dir.is_dir():
                run_dir.mkdir(parents=True, exist_ok=True)
                _fsync_dir(run_dir.parent)
            self._seq += 1
            kind = KIND_RUN if request.kind == "run" else KIND_CHECKPOINT if checkpoint else KIND_HANDED if handed else KIND_DATA
            name = f"{time.time_ns():020d}-{kind}-r{self.rank}-p{self.pid}-{self._seq:08d}{SUFFIX}"
            final = run_dir / name
            _write_atomic(final, data)
            if self._known_bytes is not None:
                self._known_bytes += len(data)
            self.written_batches += 1
            return final

    def rebase_after(self, run_entry: SpoolEntry, base: int) -> int:
        """The registration ``run_entry`` was delivered, and its answer gave its process's step
        base: shift the rebase-marked step files that process spooled after it, in place.

        Stops at that process's next registration (a later run with its own base). A file another
        live process is sending right now is left alone. Returns the files rewritten.
        """
        origin = _base_name(run_entry.name)
        writer = writer_of(origin)
        if writer is None:
            return 0
        rewritten = 0
        for path in sorted(_list_files(run_entry.path.parent), key=lambda p: _base_name(p.name)):
            name = _base_name(path.name)
            if name <= origin or writer_of(name) != writer:
                continue
            if _kind_of(name) == KIND_RUN:
                break
            if self._rebase_file(path, base):
                rewritten += 1
        return rewritten

    def _rebase_file(self, path: Path, base: int) -> bool:
        claimed: Path | None = None
        if CLAIM_MARK in path.name:
            if _owner_of(path.name) != self.pid:
                return False
        elif _owner_of(path.name) != self.pid:
            # Another process's file: hold it while rewriting, so nobody sends it half-way.
            claimed = path.with_name(path.name + CLAIM_MARK + str(self.pid))
            try:
                os.rename(str(path), str(claimed))
            except OSError:
                return False
        current = claimed or path
        try:
            request = decode_file(current.read_bytes())
            if request.kind not in ("steps", "batch") or not request.rebase:
                return False
            _write_atomic(current, encode_file(shift_request(request, base)), stale_tmp=True)
            return True
        except (OSError, ValueError, KeyError):
            return False
        finally:
            if claimed is not None:
                with contextlib.suppress(OSError):
                    os.rename(str(claimed), str(path))

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
                # A live writer's checkpoint only duplicates rows it still holds: nothing is lost.
                live_checkpoint = _kind_of(path.name) == KIND_CHECKPOINT and pid_alive(_owner_of(path.name))
                rows = 0 if live_checkpoint else _rows_of(path)
                path.unlink()
            except OSError:
                continue
            total -= size
            self.dropped_batches += 0 if live_checkpoint else 1
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
        """This process's backlog of ``run_id``, oldest first (its checkpoints are not backlog)."""
        entries = [
            SpoolEntry(path=p, run_id=run_id, name=p.name, owner_pid=self.pid)
            for p in _list_files(self.root / run_id)
            if self._is_own_backlog(p.name)
        ]
        entries.sort(key=lambda e: e.name)
        return entries

    def has_own(self, run_id: str) -> bool:
        return any(self._is_own_backlog(p.name) for p in _list_files(self.root / run_id))

    def _is_own_backlog(self, name: str) -> bool:
        return f"-p{self.pid}-" in name and CLAIM_MARK not in name and _kind_of(name) not in (KIND_CHECKPOINT, KIND_HANDED)

    def handed(self, run_id: str) -> list[SpoolEntry]:
        """The batches of ``run_id`` handed to the node's sender and not claimed yet, oldest first
        (any writer: the node's local ranks are other processes, or this one)."""
        entries = [
            SpoolEntry(path=p, run_id=run_id, name=p.name, owner_pid=_owner_of(p.name))
            for p in _list_files(self.root / run_id)
            if CLAIM_MARK not in p.name and _kind_of(p.name) == KIND_HANDED
        ]
        entries.sort(key=lambda e: e.name)
        return entries

    def discard(self, path: Path) -> None:
        """Deletes one of this process's checkpoints (gone already, e.g. taken by ``sync``: fine)."""
        self.remove(SpoolEntry(path=path, run_id=path.parent.name, name=path.name, owner_pid=self.pid))

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


def _write_atomic(final: Path, data: bytes, *, stale_tmp: bool = False) -> None:
    """Written to a temporary name, fsynced, renamed over ``final``: whole or not at all.

    ``stale_tmp``: a rewrite of an existing file may find the temporary file of a rewrite that
    was killed half-way; new files have fresh names and never do.
    """
    tmp = final.with_name(TMP_PREFIX + final.name)
    if stale_tmp:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
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
    _fsync_dir(final.parent)


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
        return int(header.get("rows", 0)) if header.get("kind") in ("steps", "batch") else 0
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

"""``phantomhub-agent``: upload a spool written offline (or left by a killed job).

    phantomhub-agent sync [DIR] [--server URL] [--token TOKEN]
    phantomhub-agent ls [DIR]
    phantomhub-agent gate --project P --run RUN_ID --max-usd-per-month 500 [--json]
      (the CI regression gate: docs/ci-gate.md)
    phantomhub-agent node --server URL --token TOKEN [--interval 15] [--source nvml|dcgm] ...
      (the node collector: docs/node-collector.md)

DIR is a spool root (default: PHANTOMHUB_SPOOL_DIR or ~/.cache/phantomhub/spool) or one run's
directory inside it. A run's files go in the order they were written, so each process's
registration precedes its steps (and its answer renumbers the steps that process numbered itself,
after those an earlier process of the run stored). Each delivered file is deleted; a file the server rejects as invalid (400)
is renamed ``*.rejected`` and kept for inspection. A file of a run the server does not know or
refuses (401/403/404) stays for a later attempt. Exit status 0 when everything was delivered.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ._batcher import step_base_from_run
from ._config import default_spool_dir
from ._delivery import job_refused, without_job
from ._split import split_request
from ._spool import (
    CLAIM_MARK,
    KIND_CHECKPOINT,
    Spool,
    SpooledRequest,
    SpoolEntry,
    _base_name,
    _kind_of,
    _owner_of,
    iter_spool_files,
    pid_alive,
    read_entry,
    token_fingerprint,
    writer_of,
)
from ._tokenfile import token_read
from ._transport import HALT, OK, RETRY, TOO_LARGE, NetworkError, Transport, backoff_delay, classify, parse_retry_after
from ._version import __version__

MAX_ATTEMPTS = 6


class Progress:
    """A one-line text progress bar (carriage returns on a terminal, a line per 10% otherwise)."""

    def __init__(self, total: int, stream: IO[str], width: int = 30) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.width = width
        self.tty = stream.isatty()
        self._last_decile = -1
        self._started = time.monotonic()

    def update(self, done: int, sent_bytes: int, note: str = "") -> None:
        frac = min(1.0, done / self.total)
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        rate = sent_bytes / max(1e-6, time.monotonic() - self._started)
        line = f"[{bar}] {done}/{self.total} files  {_human(sent_bytes)} ({_human(rate)}/s) {note}".rstrip()
        if self.tty:
            self.stream.write("\r" + line.ljust(100))
            self.stream.flush()
            return
        decile = int(frac * 10)
        if decile != self._last_decile or done == self.total:
            self._last_decile = decile
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _collect(root: Path) -> dict[str, list[Path]]:
    """Spool files per run directory, in write order (each process wrote its registration first).

    Files claimed by a live process (an agent replaying right now) are left alone, and so are the
    checkpoints of a live process: they are what it still holds and will send itself.
    """
    runs: dict[str, list[Path]] = {}
    for run_dir, path in iter_spool_files(root):
        if CLAIM_MARK in path.name and pid_alive(_owner_of(path.name)):
            continue
        if _kind_of(path.name) == KIND_CHECKPOINT and pid_alive(_owner_of(path.name)):
            continue
        runs.setdefault(run_dir, []).append(path)
    for paths in runs.values():
        paths.sort(key=lambda p: _base_name(p.name))
    return runs


def _post(transport: Transport, request: SpooledRequest, out: IO[str]) -> tuple[str, int, str, Any]:
    """Sends with retries on 5xx/429/network; returns (outcome, status, error text, JSON answer)."""
    answer: Any = None
    for attempt in range(MAX_ATTEMPTS):
        try:
            response = transport.request("POST", request.path, request.body, gzipped=request.gzipped)
        except NetworkError as exc:
            status, text, retry_after = 0, str(exc), None
            outcome = RETRY
        else:
            if response.status == 400 and request.kind == "run" and job_refused(response):
                stripped = without_job(request)
                if stripped is not None:  # a server older than jobs: the run without its job link
                    request = stripped
                    continue
            status, text = response.status, response.error_text()
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            outcome = classify(status)
            answer = response.json() if outcome == OK else None
        if outcome != RETRY:
            return outcome, status, text, answer
        if attempt + 1 < MAX_ATTEMPTS:
            time.sleep(backoff_delay(attempt, base_s=0.5, max_s=10.0, retry_after_s=retry_after))
    return RETRY, status, text, answer


def sync(root: Path, server: str, token: str | None, out: IO[str] | None = None) -> int:
    out = out or sys.stderr
    runs = _collect(root)
    total = sum(len(paths) for paths in runs.values())
    if total == 0:
        out.write(f"nothing to sync in {root}\n")
        return 0
    transport = Transport(server, token, timeout_s=30.0)
    fingerprint = token_fingerprint(token)
    progress = Progress(total, out)
    done = sent_bytes = delivered = rejected = kept = 0
    spool = Spool(root, max_bytes=1 << 62)
    warned_fp = False
    try:
        for run_id, paths in runs.items():
            for i, path in enumerate(paths):
                entry = SpoolEntry(path=path, run_id=run_id, name=path.name, owner_pid=_owner_of(path.name))
                try:
                    request = read_entry(entry)
                except (OSError, ValueError, KeyError) as exc:
                    out.write(f"\nunreadable spool file {path}: {exc}\n")
                    rejected += 1
                    done += 1
                    continue
                if request.token_fp and fingerprint and request.token_fp != fingerprint and not warned_fp:
                    out.write("\nnote: these files were written with a different token; sending with the given one\n")
                    warned_fp = True
                outcome, status, text, answer = _post(transport, request, out)
                if outcome == TOO_LARGE:
                    halves = split_request(request)
                    results = [_post(transport, half, out) for half in halves] if halves else [(outcome, status, text, None)]
                    outcome = OK if all(r[0] == OK for r in results) else results[-1][0]
                    status, text = results[-1][1], results[-1][2]
                if outcome == OK and request.kind == "run":
                    writer = writer_of(path.name)
                    spool.rebase_after(entry, step_base_from_run(answer, writer[1] if writer else 0))
                if outcome == OK:
                    sent_bytes += len(request.body)
                    delivered += 1
                    spool.remove(entry)
                elif outcome == HALT:
                    remaining = len(paths) - i
                    kept += remaining
                    done += remaining
                    out.write(f"\nrun {run_id}: server answered {status} ({text}); kept {remaining} files\n")
                    if status in (401, 403):
                        progress.close()
                        out.write("the token was refused; nothing more sent\n")
                        return 1
                    break
                elif outcome == RETRY:
                    progress.close()
                    out.write(f"\nserver unavailable ({status or 'network'}: {text}); run sync again later\n")
                    return 1
                else:
                    rejected += 1
                    os.replace(str(path), str(path.with_name(_base_name(path.name) + ".rejected")))
                    out.write(f"\nrejected {path.name}: {status} {text}\n")
                done += 1
                progress.update(done, sent_bytes)
    finally:
        transport.close()
    progress.close()
    out.write(f"delivered {delivered} files, rejected {rejected}, kept {kept}\n")
    return 0 if rejected == 0 and kept == 0 else 1


def ls(root: Path, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    runs = _collect(root)
    if not runs:
        out.write(f"nothing spooled in {root}\n")
        return 0
    for run_id, paths in sorted(runs.items()):
        size = sum(p.stat().st_size for p in paths if p.exists())
        out.write(f"{run_id}  {len(paths)} files  {_human(size)}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="phantomhub-agent", description="PhantomHub training agent tools")
    parser.add_argument("--version", action="version", version=f"phantomhub-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sync_p = sub.add_parser("sync", help="upload a spool directory to the server")
    sync_p.add_argument("dir", nargs="?", default=None, help="spool root or a run's directory")
    sync_p.add_argument("--server", default=None, help="server URL (default: PHANTOMHUB_SERVER)")
    sync_p.add_argument("--token", default=None, help="project token (default: PHANTOMHUB_TOKEN, or PHANTOMHUB_TOKEN_FILE's)")
    ls_p = sub.add_parser("ls", help="list what is spooled")
    ls_p.add_argument("dir", nargs="?", default=None)
    from .node import _cli as node_cli

    node_cli.add_parser(sub)
    from . import gate

    gate_p = gate.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "gate":
        return gate.main_gate(args, gate_p)
    if args.command == "node":
        return node_cli.main(args, parser)
    root = Path(args.dir).expanduser() if args.dir else Path(os.environ.get("PHANTOMHUB_SPOOL_DIR") or default_spool_dir())
    if args.command == "ls":
        return ls(root)
    server = args.server or os.environ.get("PHANTOMHUB_SERVER") or _server_from_files(root)
    token_file = os.environ.get("PHANTOMHUB_TOKEN_FILE")
    token = args.token or os.environ.get("PHANTOMHUB_TOKEN") or (token_read(Path(token_file)) if token_file else None)
    if not server:
        parser.error("no server: pass --server or set PHANTOMHUB_SERVER")
    if not token:
        parser.error("no token: pass --token or set PHANTOMHUB_TOKEN or PHANTOMHUB_TOKEN_FILE")
    return sync(root, server.rstrip("/"), token)


def _server_from_files(root: Path) -> str | None:
    for run_dir, path in iter_spool_files(root):
        try:
            server = read_entry(SpoolEntry(path=path, run_id=run_dir, name=path.name, owner_pid=-1)).server
        except (OSError, ValueError, KeyError):
            continue
        if server:
            return server
    return None


if __name__ == "__main__":
    sys.exit(main())

"""The on-disk spool: durable, bounded, FIFO per process, safe to share between processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from phantomhub_agent._spool import (
    CLAIM_MARK,
    Spool,
    SpooledRequest,
    decode_file,
    encode_file,
    read_entry,
    token_fingerprint,
)


def request(kind: str = "steps", run_id: str = "run-a", body: bytes = b"x" * 100, rows: int = 10) -> SpooledRequest:
    return SpooledRequest(path=f"/api/v1/runs/{run_id}/{kind}", body=body, gzipped=False, kind=kind, run_id=run_id, rows=rows)


def test_a_spooled_request_reads_back_identical(spool_dir: Path) -> None:
    spool = Spool(spool_dir, max_bytes=10**6)
    original = SpooledRequest(
        path="/api/v1/runs/r/steps",
        body=b"\x1f\x8b binary \n body",
        gzipped=True,
        kind="steps",
        run_id="r",
        rows=3,
        token_fp=token_fingerprint("phk_secret"),
        server="http://x",
        created_ns=42,
    )
    spool.write(original)
    [entry] = spool.own("r")
    assert read_entry(entry) == original
    assert b"phk_secret" not in entry.path.read_bytes()  # only a fingerprint of the token


def test_writes_are_fsynced_before_the_rename(spool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    Spool(spool_dir, max_bytes=10**6).write(request())
    assert calls.index("fsync") < calls.index("replace")


def test_own_files_come_back_oldest_first(spool_dir: Path) -> None:
    spool = Spool(spool_dir, max_bytes=10**6)
    for i in range(5):
        spool.write(request(body=str(i).encode()))
    assert [read_entry(e).body for e in spool.own("run-a")] == [b"0", b"1", b"2", b"3", b"4"]


def test_the_cap_drops_the_oldest_data_first_and_counts_it(spool_dir: Path) -> None:
    one = len(encode_file(request()))
    spool = Spool(spool_dir, max_bytes=one * 3)
    spool.write(request(kind="run", rows=1, body=b"{}"))
    for i in range(6):
        spool.write(request(body=str(i).encode() * 100))
    kept = [read_entry(e) for e in spool.own("run-a")]
    assert kept[0].kind == "run"  # run metadata is never dropped
    assert [r.body[:1] for r in kept[1:]] == [b"4", b"5"]
    assert spool.dropped_batches == 4
    assert spool.dropped_rows == 40
    assert sum(p.stat().st_size for p in (spool_dir / "run-a").iterdir()) <= one * 3 + 200


def test_a_request_larger_than_the_cap_is_dropped_and_counted(spool_dir: Path) -> None:
    spool = Spool(spool_dir, max_bytes=50)
    assert spool.write(request(body=b"y" * 500)) is None
    assert spool.dropped_batches == 1
    assert spool.own("run-a") == []


def test_files_of_a_dead_process_are_orphans_and_claimed_once(spool_dir: Path) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from phantomhub_agent._spool import Spool, SpooledRequest;"
        "Spool(sys.argv[1], 10**6).write(SpooledRequest('/p', b'b', False, 'steps', 'run-z', 1))"
    )
    agent_src = str(Path(__file__).resolve().parents[2] / "agent")
    subprocess.run([sys.executable, "-c", code, str(spool_dir), agent_src], check=True)
    mine = Spool(spool_dir, max_bytes=10**6)
    other = Spool(spool_dir, max_bytes=10**6)
    other.pid = 999_999_999  # a second, live process (no real pid is this large)
    [orphan] = mine.orphans()
    assert orphan.run_id == "run-z"
    claimed = mine.claim(orphan)
    assert claimed is not None and CLAIM_MARK in claimed.name
    assert other.claim(orphan) is None  # already taken
    assert other.orphans() == []  # a claim by a live process is not an orphan
    mine.release(claimed)
    assert [e.name for e in other.orphans()] == [orphan.name]


def test_files_of_a_live_process_are_not_orphans(spool_dir: Path) -> None:
    writer = Spool(spool_dir, max_bytes=10**6)
    writer.write(request())
    reader = Spool(spool_dir, max_bytes=10**6)
    reader.pid = writer.pid + 10_000_000  # another process; the writer (this one) is alive
    assert reader.orphans() == []


def test_half_written_files_are_ignored_and_cleaned(spool_dir: Path) -> None:
    run_dir = spool_dir / "run-a"
    run_dir.mkdir()
    tmp = run_dir / ".tmp-000-b-r0-p1-00000001.phk"
    tmp.write_bytes(b"partial")
    os.utime(tmp, (0, 0))
    spool = Spool(spool_dir, max_bytes=10**6)
    assert spool.own("run-a") == [] and spool.orphans() == []
    spool.cleanup_stale_tmp()
    assert not tmp.exists()


def test_unknown_file_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        decode_file(b'{"v": 99}\nbody')

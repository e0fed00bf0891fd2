"""The training agent's side of the run registry: the file a run keeps while it is active."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa

from .conftest import FakeServer, Recorded, wait_for


def read(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def test_a_run_keeps_its_registry_file_with_the_servers_answer_and_removes_it_at_finish(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHANTOMHUB_RUN_DIR", str(tmp_path / "runs"))
    server_id = str(uuid.uuid4())

    def answer(req: Recorded, index: int) -> tuple[int, dict[str, str], bytes] | None:
        if req.path.endswith("/runs"):  # another project had the id: the server gave the run its own
            return 201, {}, json.dumps({**req.body, "id": server_id, "client_id": req.body["id"], "project": "llm"}).encode()
        return None

    fake_server.script = answer
    run = pa.init(name="registry", server=fake_server.url, token="phk_t", **agent_kwargs)
    path = tmp_path / "runs" / f"{os.getpid()}.json"
    first = read(path)
    assert first["pid"] == os.getpid() and first["run_id"] == run.id and first["server"] == fake_server.url
    assert first["project"] is None and first["server_run_id"] is None  # the token names the project
    assert abs(time.time() - dt.datetime.fromisoformat(first["started_at"]).timestamp()) < 60
    answered = wait_for(lambda: read(path) if read(path)["server_run_id"] else None)
    assert answered["server_run_id"] == server_id and answered["project"] == "llm"
    with run.step():
        pass
    run.finish()
    assert not path.exists()


def test_a_later_run_of_the_process_owns_the_file_and_an_earlier_ones_finish_leaves_it(
    agent_kwargs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHANTOMHUB_RUN_DIR", str(tmp_path / "runs"))
    path = tmp_path / "runs" / f"{os.getpid()}.json"
    first = pa.init(name="a", project="p", mode="offline", **agent_kwargs)
    second = pa.init(name="b", project="p", mode="offline", **agent_kwargs)
    assert read(path)["run_id"] == second.id
    first.finish()
    assert read(path)["run_id"] == second.id
    second.finish()
    assert not path.exists()


def test_an_unwritable_registry_never_stops_the_run(
    agent_kwargs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PHANTOMHUB_RUN_DIR", str(blocker / "runs"))
    run = pa.init(name="c", project="p", mode="offline", **agent_kwargs)  # debug=True: errors would raise
    for _ in range(3):
        with run.step():
            pass
    run.finish()
    assert run.counters["internal_errors"] == 0


def test_the_default_registry_is_shared_by_every_user_like_tmp(
    agent_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHANTOMHUB_RUN_DIR", raising=False)
    run = pa.init(name="d", project="p", mode="offline", **agent_kwargs)
    directory = Path("/tmp/phantomhub-runs")
    try:
        assert (directory / f"{os.getpid()}.json").exists()
        assert directory.stat().st_mode & 0o1777 == 0o1777
    finally:
        run.finish()
    assert not (directory / f"{os.getpid()}.json").exists()


def test_a_registration_answered_only_after_an_outage_still_fills_the_registry(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registration is spooled while the server answers 503, replayed once it is back: the
    replay's answer completes the registry file like a first-time answer does."""
    monkeypatch.setenv("PHANTOMHUB_RUN_DIR", str(tmp_path / "runs"))
    server_id = str(uuid.uuid4())
    down = {"on": True}

    def answer(req: Recorded, index: int) -> tuple[int, dict[str, str], bytes] | None:
        if down["on"]:
            return 503, {}, b'{"error": {"code": "unavailable", "message": "down", "fields": {}}}'
        if req.path.endswith("/runs"):
            return 201, {}, json.dumps({**req.body, "id": server_id, "project": "llm"}).encode()
        return None

    fake_server.script = answer
    run = pa.init(name="late", server=fake_server.url, token="phk_t", **agent_kwargs)
    path = tmp_path / "runs" / f"{os.getpid()}.json"
    wait_for(lambda: list(agent_kwargs["spool_dir"].rglob("*.phk")))  # the registration went to the spool
    assert read(path)["server_run_id"] is None
    down["on"] = False
    answered = wait_for(lambda: read(path) if read(path)["server_run_id"] else None, timeout_s=20)
    assert answered["server_run_id"] == server_id and answered["project"] == "llm"
    run.finish()
    assert not path.exists()

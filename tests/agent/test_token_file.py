"""PHANTOMHUB_TOKEN_FILE: the token is read from a file, and again when the server answers 401, so
a rotated token needs no restart and a refused token loses nothing (agent/phantomhub_agent/_tokenfile.py).
Mechanics against a scripted server that takes only the tokens a test lets it; the real server and
a real rotation: tests/agent/test_token_rotation_live.py."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent._config import settings_from
from phantomhub_agent._tokenfile import TokenFile, token_read

from .conftest import FakeServer, Recorded, wait_for


def loop(run: pa.Run, first: int, n: int) -> None:
    for i in range(first, first + n):
        with run.step(step=i, tokens=10), run.stage("forward"):
            pass


class Gate:
    """The scripted server's tokens: requests with any other get 401. Records the steps it took,
    and the requests it refused."""

    def __init__(self, *valid: str) -> None:
        self.valid = set(valid)
        self.taken: list[int] = []
        self.refused = 0
        self.lock = threading.Lock()

    def __call__(self, req: Recorded, index: int) -> tuple[int, dict[str, str], bytes] | None:
        with self.lock:
            if req.headers.get("authorization", "").removeprefix("Bearer ") in self.valid:
                steps = (req.body or {}).get("steps") if req.path.endswith(("/batch", "/steps")) else None
                self.taken.extend(steps["step"] if steps else [])
                return None  # the default answer: accepted
            self.refused += 1
        return 401, {}, b'{"error": {"code": "unauthenticated", "message": "token phk_old... expired", "fields": {}}}'


def test_the_token_is_read_from_the_file_and_wins_over_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text("phk_from_file\n")
    monkeypatch.setenv("PHANTOMHUB_TOKEN", "phk_from_env")
    monkeypatch.setenv("PHANTOMHUB_TOKEN_FILE", str(path))
    settings = settings_from({})
    assert (settings.token, settings.token_file) == ("phk_from_file", path)
    path.write_text("  \n")
    assert token_read(path) is None and token_read(tmp_path / "absent") is None


def test_a_halted_sender_reads_the_file_at_most_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("phk_a")
    source = TokenFile(path)
    assert source.newer("phk_a", now=100.0) is None
    path.write_text("phk_b")
    assert source.newer("phk_a", now=100.5, throttled=True) is None  # within the second
    assert source.newer("phk_a", now=100.6) == "phk_b"  # a 401 reads it now
    assert source.newer("phk_a", now=102.0, throttled=True) == "phk_b"


def test_a_401_takes_the_new_token_in_the_file_and_sends_the_request_again(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text("phk_old")
    gate = Gate("phk_old")
    fake_server.script = gate
    run = pa.init(server=fake_server.url, token_file=path, **agent_kwargs)
    loop(run, 0, 20)
    run.flush()
    path.write_text("phk_new\n")  # rotated: the Secret's file now holds the successor ...
    gate.valid = {"phk_new"}  # ... and the old token's overlap has ended
    loop(run, 20, 20)
    run.finish()
    assert sorted(gate.taken) == list(range(40))  # every step, once
    assert gate.refused >= 1  # the old token was refused, and the request sent again at once
    assert fake_server.requests[-1].headers["authorization"] == "Bearer phk_new"
    assert not [p for p in agent_kwargs["spool_dir"].rglob("*") if p.is_file()]  # nothing waits in the spool


def test_with_no_new_token_yet_the_data_waits_in_the_spool_and_goes_once_one_is_there(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="phantomhub_agent")
    path = tmp_path / "token"
    path.write_text("phk_old")
    gate = Gate("phk_old")
    fake_server.script = gate
    run = pa.init(server=fake_server.url, token_file=path, **agent_kwargs)
    loop(run, 0, 10)
    run.flush()
    gate.valid = set()  # the old token stops; the file is not updated yet
    loop(run, 10, 30)
    run.flush()
    wait_for(lambda: [p for p in agent_kwargs["spool_dir"].rglob("*") if p.is_file()])
    assert any("holds a new one" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    sent = len(fake_server.requests)
    loop(run, 40, 10)
    run.flush()
    assert len(fake_server.requests) == sent  # halted: nothing more is sent with the refused token
    gate.valid = {"phk_new"}
    path.write_text("phk_new")
    wait_for(lambda: len(gate.taken) > 10, timeout_s=20)  # the spool goes out without a restart
    loop(run, 50, 10)
    run.finish()
    assert sorted(gate.taken) == list(range(60))  # every step, exactly once
    assert not [p for p in agent_kwargs["spool_dir"].rglob("*") if p.is_file()]


def test_an_empty_token_file_at_start_waits_for_a_token(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text("")
    gate = Gate("phk_late")
    fake_server.script = gate
    run = pa.init(server=fake_server.url, token_file=path, **agent_kwargs)
    loop(run, 0, 10)
    run.flush()
    assert gate.taken == [] and gate.refused >= 1
    path.write_text("phk_late")
    wait_for(lambda: gate.taken, timeout_s=20)
    run.finish()
    assert sorted(gate.taken) == list(range(10))
    assert fake_server.of("/runs")[-1].headers["authorization"] == "Bearer phk_late"


def test_the_node_collector_takes_its_token_from_a_file_and_a_rotated_one_without_a_restart(
    fake_server: FakeServer, tmp_path: Path
) -> None:
    from .conftest import REPO
    from .test_node_collector import node_cmd, node_env, state_file

    path = tmp_path / "node-token"
    path.write_text("phk_node_old\n")
    gate = Gate("phk_node_old")
    fake_server.script = gate
    env = node_env(tmp_path, state_file(tmp_path, []))
    env["PYTHONPATH"] += os.pathsep + str(REPO / "agent")  # this checkout's agent
    args = ("--server", fake_server.url, "--token-file", str(path), "--interval", "1", "--spool", str(tmp_path / "spool"))
    proc = subprocess.Popen(node_cmd(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        wait_for(lambda: len(fake_server.requests) >= 2)
        gate.valid = {"phk_node_new"}  # rotated, the overlap over: refused ...
        wait_for(lambda: gate.refused >= 1)
        path.write_text("phk_node_new\n")  # ... until the Secret's file holds the successor
        wait_for(lambda: fake_server.requests[-1].headers.get("authorization") == "Bearer phk_node_new")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err

    def sampled(token: str) -> list[int]:
        return [r.body["gpus"]["t_ns"][0] for r in fake_server.requests if r.headers.get("authorization") == f"Bearer {token}"]

    refused = sampled("phk_node_old")[-gate.refused :]
    assert refused and set(refused) <= set(sampled("phk_node_new"))  # what was refused was sent again with the new token


def test_sync_takes_the_token_from_the_file_too(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phantomhub_agent import cli

    from .test_cli import spool_a_run

    spool_a_run(spool_dir, agent_kwargs)
    path = tmp_path / "token"
    path.write_text("phk_synced\n")
    monkeypatch.setenv("PHANTOMHUB_TOKEN_FILE", str(path))
    monkeypatch.setenv("PHANTOMHUB_SERVER", fake_server.url)
    assert cli.main(["sync", str(spool_dir)]) == 0
    assert fake_server.requests and all(r.headers["authorization"] == "Bearer phk_synced" for r in fake_server.requests)

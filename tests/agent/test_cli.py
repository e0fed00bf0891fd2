"""`phantomhub-agent sync` and `ls` against the scripted server (the live path is in
test_training_live: a SIGKILLed process's spool is synced into the real server)."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent import cli

from .conftest import FakeServer, Recorded, carries


def spool_a_run(spool_dir: Path, agent_kwargs: dict[str, Any], steps: int = 30) -> str:
    run = pa.init(name="offline", mode="offline", batch_max_rows=10, **agent_kwargs)
    for i in range(steps):
        with run.step(step=i):
            pass
    run.finish()
    return run.id


def test_sync_uploads_metadata_first_then_everything_and_empties_the_spool(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    run_id = spool_a_run(spool_dir, agent_kwargs)
    out = io.StringIO()
    assert cli.sync(spool_dir, fake_server.url, "phk_t", out=out) == 0
    assert fake_server.paths()[0] == "/api/v1/runs"
    steps = sorted(s for r in fake_server.of("/steps") for s in r.body["steps"]["step"])
    assert steps == list(range(30))
    assert all(r.headers["authorization"] == "Bearer phk_t" for r in fake_server.requests)
    assert not list(spool_dir.rglob("*.phk"))
    assert "delivered" in out.getvalue() and "[" in out.getvalue()
    assert run_id in {r.body["id"] for r in fake_server.of("/runs")}


def test_sync_of_one_run_directory(fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path) -> None:
    run_id = spool_a_run(spool_dir, agent_kwargs)
    other = spool_a_run(spool_dir, agent_kwargs)
    assert cli.sync(spool_dir / run_id, fake_server.url, "t", out=io.StringIO()) == 0
    assert {r.body["id"] for r in fake_server.of("/runs")} == {run_id}
    assert list((spool_dir / other).glob("*.phk"))


def test_a_refused_token_keeps_every_file(fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path) -> None:
    spool_a_run(spool_dir, agent_kwargs)
    before = sorted(p.name for p in spool_dir.rglob("*.phk"))
    fake_server.script = lambda req, i: (401, {}, b'{"error": {"code": "unauthorized", "message": "revoked"}}')
    out = io.StringIO()
    assert cli.sync(spool_dir, fake_server.url, "phk_revoked", out=out) == 1
    assert sorted(p.name for p in spool_dir.rglob("*.phk")) == before
    assert "refused" in out.getvalue()


def test_an_invalid_batch_is_set_aside_and_the_rest_delivered(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], spool_dir: Path
) -> None:
    spool_a_run(spool_dir, agent_kwargs)

    def script(req: Recorded, index: int) -> Any:
        if carries(req, "steps") and 0 in req.body["steps"]["step"]:
            return 400, {}, b'{"error": {"code": "invalid", "message": "bad", "fields": {"step": "no"}}}'
        return None

    fake_server.script = script
    assert cli.sync(spool_dir, fake_server.url, "t", out=io.StringIO()) == 1
    assert len(list(spool_dir.rglob("*.rejected"))) == 1
    assert not list(spool_dir.rglob("*.phk"))


def test_ls_and_main(agent_kwargs: dict[str, Any], spool_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = spool_a_run(spool_dir, agent_kwargs)
    assert cli.main(["ls", str(spool_dir)]) == 0
    assert run_id in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["sync", str(spool_dir)])  # no server, no token: a usage error, nothing sent


def test_system_samples_reach_the_server(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    agent_kwargs["system_interval_s"] = 0.1
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    for i in range(5):
        with run.step(step=i):
            sum(range(200_000))
    time.sleep(0.5)
    run.finish()
    samples = [r.body for r in fake_server.of("/samples")]
    assert samples
    cols = samples[0]["samples"]
    assert {"t_ns", "cpu_process_pct", "cpu_other_pct", "rss_bytes"} <= set(cols)
    assert "device" not in cols  # host rows only (device null) on a CPU-only machine
    assert all(r > 0 for r in cols["rss_bytes"])


def test_the_first_system_sample_spans_a_whole_interval(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    # A sample taken right after priming spans milliseconds: CPU counters ticking every 10 ms
    # would read it as 0%, 50% or 100% of "other processes" and flag a calm host as contended.
    agent_kwargs["system_interval_s"] = 0.2
    started_ns = time.time_ns()
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    for i in range(3):
        with run.step(step=i):
            time.sleep(0.05)
    time.sleep(0.6)
    run.finish()
    t_ns = sorted(t for r in fake_server.of("/samples") for t in r.body["samples"]["t_ns"])
    assert t_ns and t_ns[0] - started_ns >= 0.2 * 1e9 * 0.9

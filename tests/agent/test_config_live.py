"""A config larger than the server takes (64 KiB, 10,000 values) must not cost the run: the agent
sends it without its large entries, with a note of what it left out, and the run is registered."""

from __future__ import annotations

from pathlib import Path

import pytest

import phantomhub_agent as pa

from .conftest import LiveServer

pytestmark = pytest.mark.live_server


def test_an_oversized_config_is_trimmed_and_the_run_still_registers(live: LiveServer, tmp_path: Path) -> None:
    config = {"lr": 3e-4, "batch_size": 32, "vocab": [f"tok{i}" for i in range(20_000)], "blob": "x" * 100_000}
    run = pa.init(server=live.url, token=live.token, name="big-config", config=config, debug=True,
                  spool_dir=str(tmp_path / "spool"), flush_interval_s=0.2)  # fmt: skip
    for i in range(3):
        with run.step(step=i, samples=4):
            pass
    run.finish()
    stored = live.run(run.id)
    assert stored["config"]["lr"] == 3e-4 and stored["config"]["batch_size"] == 32
    note = stored["config"]["phantomhub_truncated"]
    assert sorted(note["dropped_keys"]) == ["blob", "vocab"] and note["bytes"] > 64 * 1024
    assert len(live.steps(run.id)["step"]) == 3


def test_a_small_config_is_sent_as_it_is(live: LiveServer, tmp_path: Path) -> None:
    config = {"lr": 3e-4, "layers": list(range(100))}
    run = pa.init(server=live.url, token=live.token, name="small-config", config=config, debug=True,
                  spool_dir=str(tmp_path / "spool"))  # fmt: skip
    run.finish()
    assert live.run(run.id)["config"] == config

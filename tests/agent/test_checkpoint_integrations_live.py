"""Checkpoints and resumes of real Lightning and Hugging Face training against the live server:
the first attempt saves, a second Trainer (a new run: same job key, attempt 1) resumes from the
checkpoint, and the server links both runs to one job with their checkpoint and restore events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import LiveServer
from .jobs_fixtures import stored_events
from .test_checkpoint_events import dir_size, hf_train, lightning_fit

pytestmark = [pytest.mark.live_server, pytest.mark.slow]


def linked(live: LiveServer, first: Any, second: Any, key: str) -> tuple[str, str]:
    assert first is not None and second is not None and first.id != second.id
    a, b = live.run(first.id), live.run(second.id)
    assert a["job"] is not None and a["job"] == b["job"] and a["job"]["key"] == key
    assert (a["attempt"], b["attempt"]) == (0, 1)
    assert a["end_cause"] == b["end_cause"] == "finished"
    return first.id, second.id


def test_a_lightning_resume_is_the_second_attempt_of_the_job(
    live: LiveServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    pytest.importorskip("pytorch_lightning")
    from phantomhub_agent.integrations.lightning import PhantomHubCallback

    key = f"lightning-{tmp_path.name}"
    settings = {"server": live.url, "token": live.token, "job": key, **agent_kwargs}
    first = PhantomHubCallback(name="lit-0", attempt=0, **settings)
    lightning_fit(tmp_path, first, 6)
    second = PhantomHubCallback(name="lit-1", attempt=1, **settings)
    ckpt = tmp_path / "ckpt" / "step=6.ckpt"
    lightning_fit(tmp_path, second, 9, ckpt_path=ckpt)
    first_id, second_id = linked(live, first.run, second.run, key)
    saves = stored_events(live, first_id, kind="phase", name="checkpoint")
    assert [e["data"]["step"] for e in saves] == [3, 6]
    assert saves[1]["data"] == {"step": 6, "bytes": ckpt.stat().st_size, "async": False} and saves[1]["dur_ns"] > 0
    [restore] = stored_events(live, second_id, kind="phase", name="restore")
    assert restore["data"] == {"step": 6, "bytes": ckpt.stat().st_size} and restore["dur_ns"] > 0
    assert [e["data"]["step"] for e in stored_events(live, second_id, kind="phase", name="checkpoint")] == [9]
    assert live.steps(second_id, rank=0)["step"] == [6, 7, 8]


def test_a_hugging_face_resume_is_the_second_attempt_of_the_job(
    live: LiveServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from phantomhub_agent.integrations.transformers import PhantomHubCallback

    key = f"hf-{tmp_path.name}"
    settings = {"server": live.url, "token": live.token, "job": key, **agent_kwargs}
    first = PhantomHubCallback(name="hf-0", attempt=0, **settings)
    hf_train(tmp_path, first, 4)
    second = PhantomHubCallback(name="hf-1", attempt=1, **settings)
    resume = tmp_path / "hf" / "checkpoint-4"
    hf_train(tmp_path, second, 6, resume=resume)
    first_id, second_id = linked(live, first.run, second.run, key)
    saves = stored_events(live, first_id, kind="phase", name="checkpoint")
    assert [e["data"]["step"] for e in saves] == [2, 4]
    assert saves[1]["data"] == {"step": 4, "bytes": dir_size(resume), "async": False}
    [restore] = stored_events(live, second_id, kind="phase", name="restore")
    assert restore["data"] == {"step": 4} and restore["dur_ns"] == 0
    assert live.steps(second_id, rank=0)["step"] == [4, 5]

"""Checkpoints and restores as phase events, why a run ended (its finish event's data), and
SIGTERM: the run is finished as failed before the process dies of the signal."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import phantomhub_agent as pa
from bench.agent_overhead import timed_step
from phantomhub_agent import _ends
from phantomhub_agent import _run as run_module

from .conftest import PYTHON, SCRIPT_ENV, FakeServer, wait_for

MS = 1_000_000
P50_BUDGET_NS = 10_000
P99_BUDGET_NS = 50_000


def events(server: FakeServer, kind: str | None = None) -> list[dict[str, Any]]:
    found = [e for r in server.of("/events") for e in r.body["events"]]
    return [e for e in found if kind is None or e["kind"] == kind]


def phases(server: FakeServer, name: str) -> list[dict[str, Any]]:
    return [e for e in events(server, "phase") if e["name"] == name]


def steps(server: FakeServer) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {}
    for r in server.of("/steps"):
        for key, values in r.body["steps"].items():
            merged.setdefault(key, []).extend(values)
    return merged


@pytest.fixture
def run(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> Iterator[pa.Run]:
    started = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    yield started
    started.finish()


# -- checkpoints ------------------------------------------------------------------------------------


def test_a_checkpoint_is_a_phase_of_its_blocking_time_with_step_bytes_and_async(run: pa.Run, fake_server: FakeServer) -> None:
    with run.step(step=0):
        pass
    before = time.time_ns()
    with run.checkpoint(0) as ck:
        time.sleep(0.05)
        ck.bytes = 1234
    with run.step(step=1):
        pass
    with run.checkpoint(1, bytes=99, async_=True):
        pass
    run.finish()
    first, second = phases(fake_server, "checkpoint")
    assert first["data"] == {"step": 0, "bytes": 1234, "async": False}
    assert first["dur_ns"] >= 50 * MS and first["t_start_ns"] >= before - MS
    assert second["data"] == {"step": 1, "bytes": 99, "async": True}
    rows = steps(fake_server)
    assert rows["step"] == [0, 1]
    # a step boundary, like phase(): step 0 ends where the save begins, not at step 1's start
    assert rows["t_start_ns"][0] + rows["dur_ns"][0] <= first["t_start_ns"]
    assert rows["dur_ns"][0] < 50 * MS


def test_bytes_left_unset_are_omitted_and_a_failed_save_says_so(run: pa.Run, fake_server: FakeServer) -> None:
    with run.checkpoint(7):
        pass
    with pytest.raises(OSError, match="disk full"), run.checkpoint(8):
        raise OSError("disk full")
    run.finish()
    ok, failed = phases(fake_server, "checkpoint")
    assert ok["data"] == {"step": 7, "async": False}
    assert failed["data"] == {"step": 8, "async": False, "error": "builtins.OSError"}


def test_restores_measure_the_load_from_a_reading_taken_before_it_or_mark_the_moment(
    run: pa.Run, fake_server: FakeServer
) -> None:
    started = time.perf_counter_ns()
    time.sleep(0.03)
    run.restored(500, bytes=10, started_pc=started)
    run.restored(500)
    with run.restoring(500) as restoring:
        time.sleep(0.02)
        restoring.bytes = 11
    run.finish()
    measured, moment, block = phases(fake_server, "restore")
    assert measured["data"] == {"step": 500, "bytes": 10} and measured["dur_ns"] >= 30 * MS
    assert moment["data"] == {"step": 500} and moment["dur_ns"] == 0
    assert block["data"] == {"step": 500, "bytes": 11} and block["dur_ns"] >= 20 * MS


def test_bad_values_raise_in_debug_mode_and_are_left_out_otherwise(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    debug_run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    with pytest.raises(TypeError, match="step"), debug_run.checkpoint("ten"):  # type: ignore[arg-type]
        pass
    with pytest.raises(ValueError, match="started_pc"):
        debug_run.restored(1, started_pc=time.perf_counter_ns() + 10**12)
    debug_run.finish()
    agent_kwargs["debug"] = False
    quiet = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    with quiet.checkpoint(-3) as ck:
        ck.bytes = "big"  # type: ignore[assignment]
    quiet.finish()
    assert phases(fake_server, "checkpoint")[-1]["data"] == {"async": False}
    assert "internal error" in caplog.text


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def test_checkpointing_between_steps_leaves_the_step_cost_within_budget(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    """The same step bench/agent_overhead.py times, with a checkpoint every 50 steps or none."""
    n = 10_000
    figures = {}
    for every in (0, 50):
        run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
        batches = iter(run.data(range(n)))
        costs = []
        for i in range(n):
            costs.append(timed_step(run, batches))
            if every and i % every == every - 1:
                with run.checkpoint(i, bytes=1):
                    pass
        run.finish()
        costs = costs[n // 10 :]
        figures[every] = (percentile(costs, 0.5), percentile(costs, 0.99))
    for p50, p99 in figures.values():
        assert p50 <= P50_BUDGET_NS and p99 <= P99_BUDGET_NS, figures
    assert len(phases(fake_server, "checkpoint")) == n // 50


# -- end causes ----------------------------------------------------------------------------------------


def test_causes_of_exceptions() -> None:
    from torch.distributed import DistBackendError

    assert _ends.classify(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "oom"
    assert _ends.classify(RuntimeError("CUDA error: out of memory")) == "oom"
    assert _ends.classify(DistBackendError("NCCL communicator was aborted")) == "collective_timeout"
    assert (
        _ends.classify(RuntimeError("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(...)"))
        == "collective_timeout"
    )
    assert _ends.classify(RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv")) == (
        "collective_timeout"
    )
    assert _ends.classify(RuntimeError("NCCL error: invalid usage")) == "exception"
    assert _ends.classify(ValueError("bad shape")) == "exception"
    wrapped = ValueError("the framework's own error")
    wrapped.__cause__ = torch.OutOfMemoryError("out of memory")
    assert _ends.classify(wrapped) == "oom"  # the chain is looked through
    cause = _ends.end_cause(RuntimeError("x" * 500))
    assert cause == {"cause": "exception", "exception": "builtins.RuntimeError", "message": "x" * 200}
    assert _ends.end_cause(torch.OutOfMemoryError("oom"))["exception"] == "torch.OutOfMemoryError"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (torch.OutOfMemoryError("CUDA out of memory"), "oom"),
        (RuntimeError("NCCL watchdog thread terminated with exception: timeout"), "collective_timeout"),
        (KeyError("batch"), "exception"),
    ],
)
def test_leaving_the_run_by_an_exception_sends_its_cause(
    error: BaseException, cause: str, fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    with pytest.raises(type(error)), pa.init(server=fake_server.url, token="t", **agent_kwargs):
        raise error
    [finish] = events(fake_server, "finish")
    assert finish["status"] == "crashed"
    assert finish["data"]["cause"] == cause
    assert finish["data"]["exception"] == f"{type(error).__module__}.{type(error).__qualname__}"


def test_a_clean_finish_has_no_cause_and_finish_takes_an_exception(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    with pa.init(server=fake_server.url, token="t", **agent_kwargs):
        pass
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    run.finish("failed", exception=RuntimeError("CUDA out of memory"))
    clean, failed = events(fake_server, "finish")
    assert clean["status"] == "finished" and "data" not in clean
    assert failed["status"] == "failed" and failed["data"]["cause"] == "oom"


def script_env(fake_server: FakeServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    import os

    from .conftest import AGENT_ENV_VARS

    env = {k: v for k, v in os.environ.items() if k not in AGENT_ENV_VARS and not k.startswith("PHANTOMHUB_")}
    env.update(SCRIPT_ENV)
    env.update(
        PHANTOMHUB_SERVER=fake_server.url,
        PHANTOMHUB_TOKEN="t",
        PHANTOMHUB_SPOOL_DIR=str(tmp_path / "spool"),
        PHANTOMHUB_FLUSH_INTERVAL="0.2",
        PHANTOMHUB_DEBUG="1",
        **extra,
    )
    return env


UNCAUGHT_SCRIPT = """
import phantomhub_agent as pa
run = pa.init(name="uncaught")
for i in range(3):
    with run.step(step=i):
        pass
raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
"""


def test_an_uncaught_exception_without_a_with_block_reaches_the_finish_event(fake_server: FakeServer, tmp_path: Path) -> None:
    script = tmp_path / "uncaught.py"
    script.write_text(UNCAUGHT_SCRIPT)
    done = subprocess.run(
        [PYTHON, str(script)], env=script_env(fake_server, tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "CUDA out of memory" in done.stderr  # the previous hook still printed it
    [finish] = events(fake_server, "finish")
    assert finish["status"] == "crashed"
    assert finish["data"] == {
        "cause": "oom",
        "exception": "builtins.RuntimeError",
        "message": "CUDA out of memory. Tried to allocate 20.00 GiB",
    }
    assert steps(fake_server)["step"] == [0, 1, 2]


# -- SIGTERM --------------------------------------------------------------------------------------------

SIGTERM_SCRIPT = """
import signal, sys, time
import phantomhub_agent as pa
if sys.argv[1] == "own":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(42))
run = pa.init(name="sigterm")
for i in range(5):
    with run.step(step=i):
        pass
print("ready", flush=True)
time.sleep(60)
"""


def terminated(fake_server: FakeServer, tmp_path: Path, handler: str, **env: str) -> subprocess.Popen[str]:
    script = tmp_path / "sigterm.py"
    script.write_text(SIGTERM_SCRIPT)
    proc = subprocess.Popen(
        [PYTHON, str(script), handler],
        env=script_env(fake_server, tmp_path, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    wait_for(lambda: fake_server.of("/runs"))
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return proc


def test_sigterm_finishes_the_run_as_failed_and_the_process_still_dies_of_it(fake_server: FakeServer, tmp_path: Path) -> None:
    proc = terminated(fake_server, tmp_path, "none")
    assert proc.returncode == -signal.SIGTERM  # a signal death, as without the agent
    [finish] = events(fake_server, "finish")
    assert finish["status"] == "failed" and finish["data"] == {"cause": "sigterm"}
    assert steps(fake_server)["step"] == [0, 1, 2, 3, 4]  # flushed before dying


def test_sigterm_handling_can_be_turned_off(fake_server: FakeServer, tmp_path: Path) -> None:
    proc = terminated(fake_server, tmp_path, "none", PHANTOMHUB_HANDLE_SIGTERM="0")
    assert proc.returncode == -signal.SIGTERM
    assert events(fake_server, "finish") == []


def test_the_programs_own_sigterm_handler_is_never_replaced(fake_server: FakeServer, tmp_path: Path) -> None:
    proc = terminated(fake_server, tmp_path, "own")
    assert proc.returncode == 42  # its handler ran: sys.exit(42), then atexit finished the run
    [finish] = events(fake_server, "finish")
    assert finish["status"] == "finished"


def test_init_installs_the_handler_only_over_the_default_action(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    try:

        def own(signum: int, frame: Any) -> None:
            pass

        signal.signal(signal.SIGTERM, own)
        pa.init(server=fake_server.url, token="t", **agent_kwargs).finish()
        assert signal.getsignal(signal.SIGTERM) is own
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        pa.init(server=fake_server.url, token="t", handle_sigterm=False, **agent_kwargs).finish()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        pa.init(server=fake_server.url, token="t", **agent_kwargs).finish()
        assert signal.getsignal(signal.SIGTERM) is run_module._on_sigterm
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_finish_event_data_is_json(fake_server: FakeServer, agent_kwargs: dict[str, Any]) -> None:
    run = pa.init(server=fake_server.url, token="t", **agent_kwargs)
    run.finish("crashed", exception=ValueError("\u00e9" * 300))
    [finish] = events(fake_server, "finish")
    assert json.loads(json.dumps(finish["data"]))["message"] == "\u00e9" * 200
    assert sys.getsizeof(finish["data"]["message"]) < 1000


# -- torch.distributed.checkpoint ------------------------------------------------------------------


def test_dcp_save_async_save_and_load_are_checkpoint_and_restore_phases(
    run: pa.Run, fake_server: FakeServer, tmp_path: Path
) -> None:
    from phantomhub_agent.integrations import dcp

    model = torch.nn.Linear(64, 64)
    state = {"model": model.state_dict()}
    metadata = dcp.save(state, checkpoint_id=str(tmp_path / "step-10"), step=10)
    stored = sum(info.length for info in metadata.storage_data.values())
    assert stored >= 64 * 64 * 4
    future = dcp.async_save(state, checkpoint_id=str(tmp_path / "step-20"), step=20)
    getattr(future, "upload_completion", future).result(timeout=60)
    target = {"model": torch.nn.Linear(64, 64).state_dict()}
    dcp.load(target, checkpoint_id=str(tmp_path / "step-10"), step=10)
    assert torch.equal(target["model"]["weight"], model.weight.detach())
    run.finish()
    saved, staged = phases(fake_server, "checkpoint")
    assert saved["data"] == {"step": 10, "bytes": stored, "async": False} and saved["dur_ns"] > 0
    assert staged["data"] == {"step": 20, "async": True}
    [restore] = phases(fake_server, "restore")
    assert restore["data"] == {"step": 10} and restore["dur_ns"] > 0


def test_dcp_without_a_run_just_saves(tmp_path: Path) -> None:
    from phantomhub_agent.integrations import dcp

    assert pa.get_run() is None
    dcp.save({"w": torch.ones(3)}, checkpoint_id=str(tmp_path / "c"), step=1)
    target = {"w": torch.zeros(3)}
    dcp.load(target, checkpoint_id=str(tmp_path / "c"), step=1)
    assert target["w"].tolist() == [1.0, 1.0, 1.0]


# -- Lightning and the Hugging Face Trainer -----------------------------------------------------------


class _Data(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(16), torch.randn(2)


def lightning_fit(tmp_path: Path, callback: Any, max_steps: int, ckpt_path: Path | None = None) -> Any:
    pl = pytest.importorskip("pytorch_lightning")

    class Tiny(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(16, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[callback, saver],
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(_Data(), batch_size=4), ckpt_path=ckpt_path)
    return trainer


@pytest.mark.slow
def test_lightning_saves_are_timed_around_trainer_save_checkpoint_and_a_resume_is_a_restore(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    pytest.importorskip("pytorch_lightning")
    from phantomhub_agent.integrations.lightning import PhantomHubCallback

    first = PhantomHubCallback(server=fake_server.url, token="t", job="lit", attempt=0, **agent_kwargs)
    trainer = lightning_fit(tmp_path, first, 6)
    assert "save_checkpoint" not in vars(trainer)  # the wrapper is gone after the fit
    saved = {e["data"]["step"]: e for e in phases(fake_server, "checkpoint")}
    files = {step: tmp_path / "ckpt" / f"step={step}.ckpt" for step in (3, 6)}
    assert sorted(saved) == [3, 6]
    for step, event in saved.items():
        assert event["data"] == {"step": step, "bytes": files[step].stat().st_size, "async": False}
        assert event["dur_ns"] > 0
    rows = steps(fake_server)
    k = rows["step"].index(2)  # the save after step index 2 (global step 3) is outside steps 2 and 3
    assert rows["t_start_ns"][k] + rows["dur_ns"][k] <= saved[3]["t_start_ns"]
    assert saved[3]["t_start_ns"] + saved[3]["dur_ns"] <= rows["t_start_ns"][k + 1]

    second = PhantomHubCallback(server=fake_server.url, token="t", job="lit", attempt=1, **agent_kwargs)
    lightning_fit(tmp_path, second, 9, ckpt_path=files[6])
    [restore] = phases(fake_server, "restore")
    assert restore["data"] == {"step": 6, "bytes": files[6].stat().st_size} and restore["dur_ns"] > 0
    first_run, second_run = first.run, second.run
    assert first_run is not None and second_run is not None and first_run.id != second_run.id
    registered = [r.body for r in fake_server.of("/runs")]
    assert [b["job"] for b in registered] == [
        {"key": "lit", "attempt": 0, "source": "explicit"},
        {"key": "lit", "attempt": 1, "source": "explicit"},
    ]
    resumed = [s for r in fake_server.of("/steps") if f"/runs/{second_run.id}/" in r.path for s in r.body["steps"]["step"]]
    assert resumed == [6, 7, 8]  # the numbering the training restored, not renumbered


@pytest.mark.slow
def test_lightning_without_the_wrapper_measures_from_on_save_checkpoint_to_the_next_batch(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytorch_lightning")
    from phantomhub_agent.integrations.lightning import PhantomHubCallback

    monkeypatch.setattr(PhantomHubCallback, "_wrap", lambda self, owner, name, make: None)
    callback = PhantomHubCallback(server=fake_server.url, token="t", **agent_kwargs)
    lightning_fit(tmp_path, callback, 6)
    saved = phases(fake_server, "checkpoint")
    assert [e["data"] for e in saved] == [{"step": 3, "async": False}, {"step": 6, "async": False}]
    rows = steps(fake_server)
    k = rows["step"].index(3)
    assert saved[0]["t_start_ns"] + saved[0]["dur_ns"] <= rows["t_start_ns"][k] + rows["data_ns"][k] + MS


class _Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (16,))
        return {"input_ids": ids, "labels": ids.clone()}


def hf_train(tmp_path: Path, callback: Any, max_steps: int, resume: Path | None = None) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        save_strategy="steps",
        save_steps=2,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    model = transformers.GPT2LMHeadModel(config)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(), callbacks=[callback])
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.slow
def test_hugging_face_saves_carry_step_and_size_and_a_resume_is_a_restore(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from phantomhub_agent.integrations.transformers import PhantomHubCallback

    hf_train(tmp_path, PhantomHubCallback(server=fake_server.url, token="t", **agent_kwargs), 4)
    saved = phases(fake_server, "checkpoint")
    assert [e["data"]["step"] for e in saved] == [2, 4]
    for event in saved:
        step = event["data"]["step"]
        assert event["data"] == {"step": step, "bytes": dir_size(tmp_path / "hf" / f"checkpoint-{step}"), "async": False}
        assert event["dur_ns"] > 0
    assert phases(fake_server, "restore") == []
    hf_train(
        tmp_path,
        PhantomHubCallback(server=fake_server.url, token="t", **agent_kwargs),
        6,
        resume=tmp_path / "hf" / "checkpoint-4",
    )
    [restore] = phases(fake_server, "restore")
    assert restore["data"] == {"step": 4} and restore["dur_ns"] == 0
    assert [e["data"]["step"] for e in phases(fake_server, "checkpoint")] == [2, 4, 6]


def test_a_flush_inside_a_step_sends_the_step_before_it(run: pa.Run, fake_server: FakeServer) -> None:
    """A step lasts until the next one starts: flushed from inside the next step (a launcher's
    harness before a kill), the finished step goes too, ending where the open one began."""
    for i in range(3):
        with run.step(step=i):
            time.sleep(0.002)
    with run.step(step=3):
        assert run.flush(timeout=10)
        sent = steps(fake_server)
        assert sent["step"] == [0, 1, 2]
        assert sent["t_start_ns"][2] + sent["dur_ns"][2] > sent["t_start_ns"][2]
    run.flush(timeout=10)
    assert steps(fake_server)["step"] == [0, 1, 2]  # step 3 waits for its end (the next step or the finish)

"""The GPUs a rank reports when it registers (``environment.gpus``), named as the node collector
names them: UUID and physical index. Only the GPU is faked: a stand-in torch device and the
stand-in NVML (tests/agent/data/standin_nvml)."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent._gpus import rank_gpus

from .test_node_nvml import gpu, standin_nvml


def cuda_torch(uuids: list[str], *, initialized: bool = True) -> Any:
    """torch as far as the agent asks: CUDA initialised, devices with a ``uuid`` property that
    prints like torch's ``_CUuuid`` (the bare groups, no ``GPU-``)."""
    cuda = SimpleNamespace(
        is_initialized=lambda: initialized,
        get_device_properties=lambda i: SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid=uuids[i]),
    )
    return SimpleNamespace(cuda=cuda)


def test_torchs_uuid_and_the_physical_index_behind_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", cuda_torch(["5f2c1a7e-93b4-4d0e-8c61-2e7a9b3f0c11", "0b8e44d2-1c7f"]))
    got = rank_gpus([1], visible="2,3")
    assert got == [{"index": 3, "uuid": "GPU-0b8e44d2-1c7f"}]


def test_without_cuda_in_use_nvml_names_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = standin_nvml({"gpus": [gpu(0), gpu(1), gpu(2)]})
    monkeypatch.setitem(sys.modules, "torch", cuda_torch([], initialized=False))  # CUDA never touched here
    assert rank_gpus([1], visible="", nvml=nvml) == [{"index": 1, "uuid": gpu(1)["uuid"]}]


def test_a_uuid_in_cuda_visible_devices_is_the_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML installed: what the variable says is all
    assert rank_gpus([0], visible="GPU-abc,GPU-def") == [{"index": None, "uuid": "GPU-abc"}]
    assert rank_gpus([5], visible="0,1") == []  # past the visible devices: unknown, nothing claimed


def test_a_rank_without_a_gpu_reports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", standin_nvml({"gpus": [gpu(0)]}))
    assert rank_gpus([]) == []
    run = pa.init(name="cpu", mode="disabled", debug=True)
    try:
        assert "gpus" not in run.metadata["environment"]
        assert run.metadata["environment"]["host"] and run.metadata["environment"]["rank"] == 0
    finally:
        run.finish()


def test_the_registration_carries_host_rank_and_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", standin_nvml({"gpus": [gpu(0), gpu(1)]}))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    run = pa.init(name="gpu", mode="disabled", debug=True, gpu_devices=[1])
    try:
        env = run.metadata["environment"]
        assert env["gpus"] == [{"index": 1, "uuid": gpu(1)["uuid"]}]
        assert isinstance(env["host"], str) and env["rank"] == 0
    finally:
        run.finish()

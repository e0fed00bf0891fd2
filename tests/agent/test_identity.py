"""Rank, world size and the run id every rank of a job must agree on."""

from __future__ import annotations

import time
import uuid

import pytest

from phantomhub_agent import _identity as ident
from phantomhub_agent._system import CpuSampler, physical_gpu_ids


def test_rank_and_world_come_from_the_launcher_environment() -> None:
    got = ident.detect_identity({"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8"})
    assert (got.rank, got.world_size, got.local_rank, got.local_world_size, got.nodes) == (5, 16, 1, 8, 2)
    assert got.distributed


def test_a_plain_process_is_rank_zero_of_one() -> None:
    got = ident.detect_identity({})
    assert (got.rank, got.world_size, got.nodes, got.distributed) == (0, 1, 1, False)


def test_an_explicit_run_id_wins_and_non_uuids_are_hashed_stably() -> None:
    one = ident.Identity(world_size=8)
    given = str(uuid.uuid4())
    assert ident.resolve_run_id(given, one, {})[0] == given
    a = ident.resolve_run_id(None, one, {"PHANTOMHUB_RUN_ID": "exp-42"})[0]
    b = ident.resolve_run_id(None, one, {"PHANTOMHUB_RUN_ID": "exp-42"})[0]
    assert a == b and uuid.UUID(a)


def test_ranks_of_a_torchrun_job_derive_the_same_id(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"TORCHELASTIC_RUN_ID": "abc123", "RANK": "0", "WORLD_SIZE": "2"}
    monkeypatch.setattr(ident, "_init_count", 0)
    rank0 = ident.resolve_run_id(None, ident.detect_identity(env), env)
    monkeypatch.setattr(ident, "_init_count", 0)
    rank1 = ident.resolve_run_id(None, ident.detect_identity({**env, "RANK": "1"}), {**env, "RANK": "1"})
    assert rank0 == rank1 and rank0[1] == "torchelastic"
    other_job = ident.resolve_run_id(None, ident.detect_identity(env), {**env, "TORCHELASTIC_RUN_ID": "zzz"})
    assert other_job[0] != rank0[0]


def test_a_single_process_gets_a_fresh_id_each_time() -> None:
    one = ident.Identity()
    assert ident.resolve_run_id(None, one, {})[0] != ident.resolve_run_id(None, one, {})[0]


def test_visible_devices_map_logical_to_physical() -> None:
    assert physical_gpu_ids([0, 1], None) == [0, 1]
    assert physical_gpu_ids([0, 1], "3,5") == [3, 5]
    assert physical_gpu_ids([1], "GPU-aaaa,GPU-bbbb") == ["GPU-bbbb"]
    assert physical_gpu_ids([2], "0,1") == []


def test_cpu_figures_are_shares_of_the_node() -> None:
    sampler = CpuSampler()
    sampler.sample()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        sum(range(1000))
    process, other, steal, rss = sampler.sample()
    assert process is not None and 0 < process <= 100
    assert other is not None and 0 <= other <= 100
    assert steal is not None and 0 <= steal <= 100
    assert rss is not None and rss > 10 * 2**20


def _torchrun_id(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, scope: str | None) -> str:
    monkeypatch.setattr(ident, "_init_count", 0)
    return ident.resolve_run_id(None, ident.detect_identity(env), env, scope=scope)[0]


def test_two_teams_reusing_a_rendezvous_id_derive_different_run_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"TORCHELASTIC_RUN_ID": "job-1", "RANK": "0", "WORLD_SIZE": "8"}
    nlp = _torchrun_id(env, monkeypatch, ident.run_id_scope("nlp", "llm-pretrain"))
    vision = _torchrun_id(env, monkeypatch, ident.run_id_scope("vision", "detector"))
    assert nlp != vision
    assert _torchrun_id({**env, "RANK": "7"}, monkeypatch, ident.run_id_scope("nlp", "llm-pretrain")) == nlp
    assert ident.run_id_scope("nlp", None) != ident.run_id_scope(None, "nlp")


def test_without_team_or_project_the_run_id_is_the_one_older_agents_derived(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"TORCHELASTIC_RUN_ID": "job-1", "RANK": "0", "WORLD_SIZE": "8"}
    assert ident.run_id_scope(None, "") is None
    legacy = str(uuid.uuid5(ident.NAMESPACE, "torchelastic/job-1/0"))
    assert _torchrun_id(env, monkeypatch, None) == legacy


def test_the_run_takes_its_scope_from_the_team_and_project_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from phantomhub_agent import Run
    from phantomhub_agent._config import settings_from

    env = {"TORCHELASTIC_RUN_ID": "job-1", "RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PHANTOMHUB_TEAM", "nlp")
    settings = settings_from({"mode": "disabled"})
    monkeypatch.setattr(ident, "_init_count", 0)
    run = Run(settings, project="llm-pretrain")
    run.finish()
    expected = _torchrun_id(env, monkeypatch, ident.run_id_scope("nlp", "llm-pretrain"))
    assert run.id == expected and run.run_id_source == "torchelastic"
    assert run.metadata["team"] == "nlp" and run.metadata["project"] == "llm-pretrain"

"""Jobs and attempts: which job a run is an attempt of (given, or the launcher's), the run id of
each attempt, the register body's ``job`` field, and a server that does not know jobs yet."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent import _identity as ident
from phantomhub_agent._config import settings_from

from .conftest import PYTHON, SCRIPT_ENV, FakeServer, LiveServer, Recorded, run_script, wait_for
from .jobs_fixtures import stored_events

LAUNCHER_VARS = (
    "PHANTOMHUB_JOB",
    "PHANTOMHUB_ATTEMPT",
    "PHANTOMHUB_HANDLE_SIGTERM",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_RESTART_COUNT",
    "JOB_NAME",
    "JOBSET_NAME",
    "POD_NAMESPACE",
    "KUBERNETES_SERVICE_HOST",
)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ident, "K8S_NAMESPACE_FILE", str(tmp_path / "no-such-namespace-file"))


def job_of(env: dict[str, str], job: Any = None, attempt: Any = None) -> tuple[ident.Job | None, int | None]:
    found, number, problems = ident.resolve_job(job, attempt, env)
    assert problems == []
    return found, number


# -- which job --------------------------------------------------------------------------------------


def test_no_launcher_and_nothing_given_is_no_job() -> None:
    assert job_of({}) == (None, None)


def test_torchelastic_gives_the_job_and_its_restart_count_the_attempt() -> None:
    env = {"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "2"}
    assert job_of(env) == (ident.Job("torchelastic/abc", 2, "torchelastic"), 2)
    assert job_of({"TORCHELASTIC_RUN_ID": "abc"}) == (ident.Job("torchelastic/abc", None, "torchelastic"), None)
    assert job_of({"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "1"}) == (None, None)


def test_slurm_gives_the_job_its_array_task_and_restart_count_zero_when_unset() -> None:
    assert job_of({"SLURM_JOB_ID": "4242"}) == (ident.Job("slurm/4242", 0, "slurm"), 0)
    array = {"SLURM_JOB_ID": "4250", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "7", "SLURM_RESTART_COUNT": "3"}
    assert job_of(array) == (ident.Job("slurm/4242_7", 3, "slurm"), 3)


def test_kubernetes_gives_namespace_and_jobset_or_job_name_but_no_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAMESPACE": "ml", "JOB_NAME": "pretrain-7"}
    assert job_of(pod) == (ident.Job("kubernetes/ml/pretrain-7", None, "kubernetes"), None)
    assert job_of({**pod, "JOBSET_NAME": "pretrain"})[0] == ident.Job("kubernetes/ml/pretrain", None, "kubernetes")
    assert job_of({**pod, "PHANTOMHUB_ATTEMPT": "4"}) == (ident.Job("kubernetes/ml/pretrain-7", 4, "kubernetes"), 4)
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("team-a\n")
    monkeypatch.setattr(ident, "K8S_NAMESPACE_FILE", str(namespace_file))
    found = job_of({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "JOB_NAME": "x"})[0]
    assert found == ident.Job("kubernetes/team-a/x", None, "kubernetes")
    assert job_of({"JOB_NAME": "jenkins-build"}) == (None, None)  # JOB_NAME outside a pod (CI) is no job


def test_a_pod_without_a_known_namespace_is_no_job(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="phantomhub_agent"):
        assert job_of({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "JOB_NAME": "x"}) == (None, None)
    assert "POD_NAMESPACE" in caplog.text


def test_precedence_explicit_then_torchelastic_then_slurm_then_kubernetes() -> None:
    k8s = {"KUBERNETES_SERVICE_HOST": "h", "POD_NAMESPACE": "ml", "JOB_NAME": "k"}
    slurm = {**k8s, "SLURM_JOB_ID": "9", "SLURM_RESTART_COUNT": "1"}
    elastic = {**slurm, "TORCHELASTIC_RUN_ID": "e", "TORCHELASTIC_RESTART_COUNT": "5"}
    assert job_of(k8s)[0].source == "kubernetes"  # type: ignore[union-attr]
    assert job_of(slurm)[0] == ident.Job("slurm/9", 1, "slurm")
    assert job_of(elastic)[0] == ident.Job("torchelastic/e", 5, "torchelastic")
    # an explicit key wins; the attempt is still the launcher's count unless given
    assert job_of({**elastic, "PHANTOMHUB_JOB": "my-job"})[0] == ident.Job("my-job", 5, "explicit")
    assert job_of(elastic, job="arg-job", attempt=0)[0] == ident.Job("arg-job", 0, "explicit")
    assert job_of({**elastic, "PHANTOMHUB_JOB": "env-job", "PHANTOMHUB_ATTEMPT": "8"}, job="arg-job")[0] == ident.Job(
        "arg-job", 8, "explicit"
    )
    assert job_of({}, job="  padded  ")[0] == ident.Job("padded", None, "explicit")
    assert job_of({}, attempt=3) == (None, 3)  # an attempt without a job still names the run per attempt


@pytest.mark.parametrize(
    ("job", "attempt", "fragment"),
    [
        ("", None, "empty"),
        ("x" * 201, None, "at most 200"),
        (42, None, "string"),
        ("ok", -1, ">= 0"),
        ("ok", True, "bool"),
        ("ok", "two", ">= 0"),
        ("line\nbreak", None, "printable"),
        ("ok", 1_000_001, "<= 1000000"),
    ],
)
def test_bad_values_are_problems_and_the_launcher_fills_in(job: Any, attempt: Any, fragment: str) -> None:
    env = {"TORCHELASTIC_RUN_ID": "e", "TORCHELASTIC_RESTART_COUNT": "1"}
    found, number, problems = ident.resolve_job(job, attempt, env)
    assert len(problems) == 1 and fragment in problems[0]
    assert found is not None and number == 1
    assert found.key == ("ok" if job == "ok" else "torchelastic/e")


def test_bad_environment_values_are_problems_too() -> None:
    assert ident.resolve_job(None, None, {"PHANTOMHUB_ATTEMPT": "-2"})[2] != []
    assert ident.resolve_job(None, None, {"TORCHELASTIC_RUN_ID": "e", "TORCHELASTIC_RESTART_COUNT": "x"})[2] != []
    assert ident.resolve_job(None, None, {"PHANTOMHUB_JOB": "", "PHANTOMHUB_ATTEMPT": ""}) == (None, None, [])


# -- one run per attempt ------------------------------------------------------------------------------


def elastic_id(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, attempt: int | None, scope: str | None = None) -> str:
    monkeypatch.setattr(ident, "_init_count", 0)
    return ident.resolve_run_id(None, ident.detect_identity(env), env, scope=scope, attempt=attempt)[0]


def test_each_attempt_of_a_torchelastic_job_is_its_own_run_and_attempt_zero_keeps_the_old_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"TORCHELASTIC_RUN_ID": "job-1", "RANK": "0", "WORLD_SIZE": "8"}
    legacy = str(uuid.uuid5(ident.NAMESPACE, "torchelastic/job-1/0"))
    assert elastic_id(env, monkeypatch, None) == legacy
    assert elastic_id(env, monkeypatch, 0) == legacy
    first = elastic_id(env, monkeypatch, 1)
    assert first == str(uuid.uuid5(ident.NAMESPACE, "torchelastic/job-1/a1/0"))
    assert elastic_id({**env, "RANK": "5"}, monkeypatch, 1) == first  # every rank of the attempt agrees
    assert elastic_id(env, monkeypatch, 2) not in (legacy, first)
    scope = ident.run_id_scope("nlp", "llm")
    assert elastic_id(env, monkeypatch, 1, scope) == str(uuid.uuid5(ident.NAMESPACE, f"{scope}/torchelastic/job-1/a1/0"))


def test_an_explicit_run_name_gets_the_attempt_and_a_uuid_is_kept() -> None:
    one = ident.Identity()
    assert ident.resolve_run_id("exp-42", one, {}, attempt=0)[0] == ident.normalize_run_id("exp-42")
    assert ident.resolve_run_id("exp-42", one, {}, attempt=3)[0] == ident.normalize_run_id("exp-42/a3")
    assert ident.resolve_run_id(None, one, {"PHANTOMHUB_RUN_ID": "exp-42"}, attempt=3)[0] == ident.normalize_run_id("exp-42/a3")
    given = str(uuid.uuid4())
    assert ident.resolve_run_id(given, one, {}, attempt=3) == (given, "explicit")


# -- the register body ----------------------------------------------------------------------------


def disabled_run(**kwargs: Any) -> pa.Run:
    run = pa.Run(settings_from({"mode": "disabled", "debug": kwargs.pop("debug", True)}), **kwargs)
    run.finish()
    return run


def test_the_register_body_carries_the_job_only_when_one_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "job" not in disabled_run().metadata
    run = disabled_run(job="pretrain-7b", attempt=2, run_id="exp-9")
    assert run.metadata["job"] == {"key": "pretrain-7b", "attempt": 2, "source": "explicit"}
    assert run.id == ident.normalize_run_id("exp-9/a2") and (run.job, run.attempt) == (ident.Job("pretrain-7b", 2, "explicit"), 2)
    assert disabled_run(job="pretrain-7b").metadata["job"] == {"key": "pretrain-7b", "source": "explicit"}
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    body = json.loads(json.dumps(disabled_run().metadata))  # as it goes on the wire
    assert body["job"] == {"key": "slurm/77", "attempt": 1, "source": "slurm"}


def test_a_bad_job_raises_in_debug_mode_and_is_logged_and_ignored_otherwise(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="at most 200"):
        disabled_run(job="x" * 201)
    with caplog.at_level(logging.ERROR, logger="phantomhub_agent"):
        run = disabled_run(job="x" * 201, attempt=-1, debug=False)
    assert "job" not in run.metadata and run.attempt is None
    assert "at most 200" in caplog.text


def test_init_takes_job_and_attempt_and_a_bad_one_never_reaches_training(
    fake_server: FakeServer, agent_kwargs: dict[str, Any]
) -> None:
    run = pa.init(server=fake_server.url, token="t", job="j-1", attempt=1, **agent_kwargs)
    run.finish()
    [register] = fake_server.of("/runs")
    assert register.body["job"] == {"key": "j-1", "attempt": 1, "source": "explicit"}
    agent_kwargs["debug"] = False
    quiet = pa.init(server=fake_server.url, token="t", job="", **agent_kwargs)  # logged, the run goes on
    quiet.finish()
    assert "job" not in fake_server.of("/runs")[-1].body


def test_a_server_without_jobs_gets_the_registration_again_without_the_field(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    def older_server(req: Recorded, index: int) -> Any:
        if req.path.endswith("/runs") and "job" in (req.body or {}):
            error = {"error": {"code": "invalid", "message": "job: unknown field", "fields": {"job": "unknown field"}}}
            return 400, {}, json.dumps(error).encode()
        return None

    fake_server.script = older_server
    with caplog.at_level(logging.WARNING, logger="phantomhub_agent"):
        run = pa.init(server=fake_server.url, token="t", job="j-2", **agent_kwargs)
        for i in range(5):
            with run.step(step=i):
                pass
        run.finish()
    registrations = fake_server.of("/runs")
    assert ["job" in r.body for r in registrations] == [True, False]
    assert registrations[1].body["id"] == run.id
    assert sorted(s for r in fake_server.of("/steps") for s in r.body["steps"]["step"]) == list(range(5))
    assert run.counters["rejected_batches"] == 0
    assert "does not know jobs" in caplog.text


# -- against the live server ---------------------------------------------------------------------

ATTEMPT_SCRIPT = """
import sys, time
import phantomhub_agent as pa
run = pa.init(name="attempt", debug=True, flush_interval_s=0.2)
first = int(sys.argv[1])
for i in range(first, first + 5):  # the script restores its step from its checkpoint
    with run.step(step=i, samples=8):
        time.sleep(0.001)
if sys.argv[2] == "oom":
    raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")
with run.checkpoint(first + 4, bytes=100):
    time.sleep(0.01)
run.finish()
print(run.id)
"""


def attempt(live: LiveServer, tmp_path: Path, rank: int, restart: int, first: int, end: str, job: str) -> str:
    env = {
        "PHANTOMHUB_SERVER": live.url,
        "PHANTOMHUB_TOKEN": live.token,
        "PHANTOMHUB_SPOOL_DIR": str(tmp_path / "s"),
        "TORCHELASTIC_RUN_ID": job,
        "TORCHELASTIC_RESTART_COUNT": str(restart),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
    }
    done = run_script(ATTEMPT_SCRIPT, tmp_path, env, args=[str(first), end])
    if end == "oom":
        assert done.returncode == 1 and "out of memory" in done.stderr, done.stderr[-3000:]
        return ""
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.live_server
def test_an_elastic_restart_registers_a_second_run_in_the_same_job(live: LiveServer, tmp_path: Path) -> None:
    """torchrun restarts the workers with the same rendezvous id and a higher restart count: each
    attempt is its own run (its steps are never refused as reused), both in one job."""
    job = f"job-{tmp_path.name}"
    for rank in (0, 1):
        attempt(live, tmp_path, rank, 0, 0, "oom", job)  # attempt 0 dies of an OOM at step 4
    ids = {attempt(live, tmp_path, rank, 1, 3, "finish", job) for rank in (0, 1)}  # resumed from step 3
    [second_id] = ids
    legacy_first = str(uuid.uuid5(ident.NAMESPACE, f"torchelastic/{job}/0"))  # attempt 0 keeps the old id
    first, second = live.run(legacy_first), live.run(second_id)
    assert first["job"] is not None and first["job"] == second["job"]
    assert first["job"]["key"] == f"torchelastic/{job}" and first["job"]["source"] == "torchelastic"
    assert (first["attempt"], second["attempt"]) == (0, 1)
    assert (first["end_cause"], first["end_detail"]) == ("oom", "builtins.RuntimeError")
    assert second["end_cause"] == "finished"
    for rank in (0, 1):
        assert live.steps(legacy_first, rank=rank)["step"] == [0, 1, 2, 3, 4]
        assert live.steps(second_id, rank=rank)["step"] == [3, 4, 5, 6, 7]  # the script's numbers, not renumbered
    assert all(r["reused_step_rows"] == 0 for r in first["ranks"] + second["ranks"])
    finish = stored_events(live, legacy_first, kind="finish")
    assert {e["data"]["cause"] for e in finish} == {"oom"} and len(finish) == 2
    saves = stored_events(live, second_id, kind="phase", name="checkpoint")
    assert sorted(e["rank"] for e in saves) == [0, 1]
    assert all(e["data"] == {"step": 7, "bytes": 100, "async": False} and e["dur_ns"] >= 10_000_000 for e in saves)


@pytest.mark.live_server
def test_the_live_server_takes_the_job_field_and_sigterm_is_an_end_cause(live: LiveServer, tmp_path: Path) -> None:
    script = tmp_path / "term.py"
    script.write_text(
        "import time\nimport phantomhub_agent as pa\n"
        "run = pa.init(name='term', debug=True, flush_interval_s=0.2)\n"
        "with run.step(step=0):\n    pass\nprint(run.id, flush=True)\ntime.sleep(60)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")}
    env.update(SCRIPT_ENV)
    env.update(
        PHANTOMHUB_SERVER=live.url,
        PHANTOMHUB_TOKEN=live.token,
        PHANTOMHUB_SPOOL_DIR=str(tmp_path / "s"),
        PHANTOMHUB_JOB=f"preemptible-{tmp_path.name}",
        PHANTOMHUB_ATTEMPT="2",
    )
    proc = subprocess.Popen([PYTHON, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    wait_for(lambda: live.get(f"/api/v1/runs/{run_id}")[0] == 200)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    stored = live.run(run_id)
    assert stored["job"]["key"] == f"preemptible-{tmp_path.name}" and stored["attempt"] == 2
    assert stored["status"] == "failed" and stored["end_cause"] == "sigterm"

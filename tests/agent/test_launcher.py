"""Who launched the run (``_launcher``): each source with its environment faked, the precedence,
bad values, the register body's ``launched_by``, and a real PyTorch loop whose run on the live
server shows its launcher."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

import phantomhub_agent as pa
from phantomhub_agent import _launcher as launcher
from phantomhub_agent._config import settings_from

from .conftest import FakeServer, LiveServer, run_script


def _token(tmp_path: Path, claims: dict[str, Any]) -> Path:
    """A service account token as Kubernetes mounts it: header.payload.signature, base64url."""

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    path = tmp_path / "token"
    path.write_text(f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl\n")
    return path


SA = {"sub": "system:serviceaccount:ml:trainer", "iss": "https://kubernetes.default.svc"}


def resolve(env: dict[str, str], tmp_path: Path, *, token: Path | None = None, user: str | None = "alice", **given: Any) -> Any:
    def getuser() -> str:
        if user is None:
            raise OSError("no user name")
        return user

    return launcher.resolve_launched_by(
        given.get("explicit"), given.get("source"), given.get("label"), env,
        token_file=token or tmp_path / "no-token", getuser=getuser,
    )  # fmt: skip


def test_auto_outside_any_scheduler_is_the_unix_user(tmp_path: Path) -> None:
    assert resolve({}, tmp_path) == ("alice", "unix", [])
    assert resolve({}, tmp_path, user=None) == (None, "", [])  # no user name: nothing sent


def test_auto_under_slurm_is_the_submitting_user(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "bob"}
    assert resolve(env, tmp_path) == ("bob", "slurm", [])
    assert resolve({"SLURM_JOB_ID": "42"}, tmp_path) == ("alice", "unix", [])  # no SLURM_JOB_USER


def test_auto_in_a_pod_is_the_owner_label_then_the_service_account_then_the_unix_user(tmp_path: Path) -> None:
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    labelled = pod | {"PHANTOMHUB_LAUNCHER_LABEL": "owner", "PHANTOMHUB_LAUNCHER_LABEL_VALUE": "carol"}
    token = _token(tmp_path, SA)
    assert resolve(labelled, tmp_path, token=token) == ("carol", "kubernetes_label", [])
    # The label's value alone is not used: the label must be named (PHANTOMHUB_LAUNCHER_LABEL).
    assert resolve(pod | {"PHANTOMHUB_LAUNCHER_LABEL_VALUE": "carol"}, tmp_path, token=token)[:2] == (
        "system:serviceaccount:ml:trainer",
        "kubernetes_service_account",
    )
    assert resolve(pod, tmp_path)[:2] == ("alice", "unix")  # no token mounted


@pytest.mark.parametrize(
    "content",
    ["not a token", "a.!!!.c", "a." + base64.urlsafe_b64encode(b'{"sub": "alice"}').decode() + ".c"],
)
def test_a_token_that_names_no_service_account_is_skipped(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    assert resolve({"KUBERNETES_SERVICE_HOST": "h"}, tmp_path, token=path)[:2] == ("alice", "unix")


def test_a_named_source_is_used_alone(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_USER": "bob", "KUBERNETES_SERVICE_HOST": "h"}
    token = _token(tmp_path, SA)
    assert resolve(env, tmp_path, token=token, source="unix")[:2] == ("alice", "unix")
    assert resolve(env, tmp_path, token=token, source="kubernetes")[:2] == (
        "system:serviceaccount:ml:trainer",
        "kubernetes_service_account",
    )
    assert resolve(env | {"PHANTOMHUB_LAUNCHER_SOURCE": "slurm"}, tmp_path, token=token)[:2] == ("bob", "slurm")
    name, source, problems = resolve({}, tmp_path, source="slurm")  # a Slurm source outside Slurm
    assert (name, source) == (None, "") and "found no launcher" in problems[0]


def test_an_explicit_launcher_comes_first(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_USER": "bob"}
    assert resolve(env | {"PHANTOMHUB_LAUNCHED_BY": " team-nlp-ci "}, tmp_path) == ("team-nlp-ci", "explicit", [])
    assert resolve(env | {"PHANTOMHUB_LAUNCHED_BY": "x"}, tmp_path, explicit="dora") == ("dora", "explicit", [])
    assert resolve(env | {"PHANTOMHUB_LAUNCHED_BY": ""}, tmp_path) == ("bob", "slurm", [])  # empty: not set


@pytest.mark.parametrize(
    ("given", "fragment"),
    [("x" * 129, "at most 128"), ("ann\nroot", "printable"), ("   ", "empty"), (7, "must be a string")],
)
def test_a_bad_value_is_a_problem_and_the_source_fills_in(tmp_path: Path, given: Any, fragment: str) -> None:
    name, source, problems = resolve({}, tmp_path, explicit=given)
    assert (name, source) == ("alice", "unix")
    assert len(problems) == 1 and fragment in problems[0]


def test_a_bad_value_read_from_a_source_is_never_cut_short(tmp_path: Path) -> None:
    name, source, problems = resolve({"SLURM_JOB_ID": "1", "SLURM_JOB_USER": "b" * 200}, tmp_path)
    assert (name, source) == ("alice", "unix") and "at most 128" in problems[0]
    name, _, problems = resolve({}, tmp_path, source="teleport")
    assert name == "alice" and "must be one of" in problems[0]


def disabled_run(**settings: Any) -> pa.Run:
    run = pa.Run(settings_from({"mode": "disabled", "debug": True, **settings}))
    run.finish()
    return run


def test_the_register_body_carries_the_launcher_and_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHANTOMHUB_LAUNCHED_BY", raising=False)
    monkeypatch.setenv("PHANTOMHUB_LAUNCHER_SOURCE", "slurm")
    monkeypatch.setenv("SLURM_JOB_USER", "bob")
    run = disabled_run()
    assert run.metadata["launched_by"] == "bob" and run.metadata["environment"]["launcher_source"] == "slurm"
    assert disabled_run(launched_by="eve").metadata["launched_by"] == "eve"  # init(launched_by=...)
    monkeypatch.delenv("SLURM_JOB_USER")
    with pytest.raises(ValueError, match="found no launcher"):  # debug mode raises the problem
        disabled_run()


def test_a_bad_launcher_is_logged_and_the_run_goes_on(
    fake_server: FakeServer, agent_kwargs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    agent_kwargs["debug"] = False
    with caplog.at_level(logging.ERROR, logger="phantomhub_agent"):
        run = pa.init(server=fake_server.url, token="t", launched_by="x" * 500, launcher_source="unix", **agent_kwargs)
        run.finish()
    [register] = fake_server.of("/runs")
    assert register.body["launched_by"] == launcher._unix_user(launcher.getpass.getuser)  # the source filled in
    assert "at most 128" in caplog.text


LOOP = """
import torch
from torch import nn
import phantomhub_agent as pa

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with pa.init(name="launched", debug=True, flush_interval_s=0.2) as run:
    for i in range(20):
        with run.step(step=i, samples=8):
            x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
print(run.id)
"""


@pytest.mark.live_server
def test_a_pytorch_run_in_a_pod_shows_its_owner_label_on_the_server(live: LiveServer, tmp_path: Path) -> None:
    env = {
        "PHANTOMHUB_SERVER": live.url,
        "PHANTOMHUB_TOKEN": live.token,
        "PHANTOMHUB_SPOOL_DIR": str(tmp_path / "spool"),
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "PHANTOMHUB_LAUNCHER_LABEL": "team.example.com/owner",
        "PHANTOMHUB_LAUNCHER_LABEL_VALUE": "carol",
    }
    done = run_script(LOOP, tmp_path, env)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    stored = live.run(run_id)
    assert stored["launched_by"] == "carol"
    assert stored["environment"]["launcher_source"] == "kubernetes_label"
    assert len(live.steps(run_id)["step"]) == 20

"""Token lifecycle against the real server in another process (gunicorn): a rotation in the middle
of a real PyTorch training run loses no step (PHANTOMHUB_TOKEN_FILE and the spool), and a
deactivated person's token is refused from the very next request (no per-process cache hides it).
docs/identity.md, "Tokens"; docs/agent.md, "Rotating the token without losing telemetry"."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests

import phantomhub_agent as pa

from .conftest import LiveServer, wait_for
from .test_training_live import train

pytestmark = pytest.mark.live_server

PASSWORD = "rotation-tests-password"


def _shell(live: LiveServer, code: str) -> str:
    return live.manage("shell", "-v", "0", "-c", code).strip()


def _signed_in(live: LiveServer, username: str) -> requests.Session:
    """A session of an organization admin, signed in through the portal like the web UI."""
    _shell(
        live,
        "from django.contrib.auth.models import User; from phantomhub.accounts.models import Profile\n"
        f"u, _ = User.objects.get_or_create(username={username!r}); u.set_password({PASSWORD!r}); u.save()\n"
        "Profile.objects.update_or_create(user=u, defaults={'is_org_admin': True})",
    )
    session = requests.Session()
    # The server's cookies are Secure (it is not in debug mode) and this is plain http on the
    # loopback, where requests would hold them back: they are sent by hand.
    cookies: dict[str, str] = {}

    def keep(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        cookies.update(response.cookies.get_dict())
        session.headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())

    session.hooks["response"].append(keep)
    csrf = session.get(f"{live.url}/api/v1/portal/session", timeout=30).json()["csrf_token"]
    answer = session.post(
        f"{live.url}/api/v1/portal/session",
        json={"username": username, "password": PASSWORD},
        headers={"X-CSRFToken": csrf},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    session.headers["X-CSRFToken"] = answer.json()["csrf_token"]
    return session


def test_a_rotation_mid_run_loses_no_step(live: LiveServer, agent_kwargs: dict[str, Any], tmp_path: Path) -> None:
    admin = _signed_in(live, "rotator")
    made = admin.post(f"{live.url}/api/v1/portal/tokens", json={"project": "agent", "name": "trainer"}, timeout=30)
    assert made.status_code == 201, made.text
    token_file = tmp_path / "token"  # what a mounted Kubernetes Secret would be
    token_file.write_text(made.json()["token"] + "\n")
    run = pa.init(name="rotation", server=live.url, token_file=token_file, **agent_kwargs)
    rotated: dict[str, Any] = {}

    def lifecycle(step: int) -> None:
        time.sleep(0.002)
        if step == 60:  # rotate with a short overlap: both tokens work for 2 s
            answer = admin.post(f"{live.url}/api/v1/portal/tokens/{made.json()['id']}/rotate", json={"overlap_s": 2}, timeout=30)
            assert answer.status_code == 201, answer.text
            rotated.update(answer.json())
        if step == 120:  # the overlap ends before the file is updated: the agent is refused, and keeps it all
            ends = datetime.fromisoformat(rotated["old"]["overlap_ends_at"])
            time.sleep(max(0.0, ends.timestamp() - time.time()) + 0.2)
            wait_for(lambda: run.counters["spooled_batches"] > 0, timeout_s=30)
        if step == 180:  # the new token reaches the file (the Secret's volume is updated)
            token_file.write_text(rotated["token"]["token"] + "\n")
        if step == 200:  # ... and the agent sends what it kept, during the run, without a restart
            wait_for(lambda: run.counters["replayed_batches"] > 0, timeout_s=30)

    train(run, 260, on_step=lifecycle)
    run.finish(timeout=30)
    assert live.steps(run.id, rank=0)["step"] == list(range(260))  # every step, exactly once
    # The spool covered the gap (the agent's own count: the replay at finish follows its last report).
    assert run.counters["spooled_batches"] > 0 and run.counters["replayed_batches"] > 0
    counters = live.run(run.id)["ranks"][0]["counters"]
    assert counters["dropped_steps"] == 0 and counters["spool_dropped_batches"] == 0
    assert live.run(run.id)["status"] == "finished"
    status, body = live.request("GET", f"/api/v1/runs/{run.id}", token=made.json()["token"])
    assert status == 401
    assert body["error"]["message"] == (
        f"token {made.json()['prefix']}… was replaced by rotation; its overlap ended at "
        f"{datetime.fromisoformat(rotated['old']['overlap_ends_at']).strftime('%Y-%m-%dT%H:%M:%SZ')}"
    )


def test_a_deactivated_persons_token_is_refused_by_another_process_in_the_same_second(live: LiveServer) -> None:
    raw = _shell(
        live,
        "from django.contrib.auth.models import User; from phantomhub.accounts.services import personal_token_create\n"
        "u, _ = User.objects.get_or_create(username='leaver'); u.is_active = True; u.save()\n"
        "print(personal_token_create(user=u, name='grafana').raw)",
    )
    for _ in range(3):  # the web process has looked the token up, more than once
        status, _ = live.request("GET", "/api/v1/portal/teams", token=raw)
        assert status == 200
    # Another process (here manage.py, in production an admin's request or SCIM in another
    # web worker) deactivates the person, and commits.
    _shell(live, "from django.contrib.auth.models import User; User.objects.filter(username='leaver').update(is_active=False)")
    committed = time.monotonic()
    status, body = live.request("GET", "/api/v1/portal/teams", token=raw)
    assert time.monotonic() - committed < 1.0
    assert status == 401 and body["error"]["message"] == f"token {raw[:12]}… belongs to an inactive person"
    # And revoked in another process: refused at once too.
    _shell(live, "from django.contrib.auth.models import User; User.objects.filter(username='leaver').update(is_active=True)")
    assert live.request("GET", "/api/v1/portal/teams", token=raw)[0] == 200
    _shell(
        live,
        "from django.utils import timezone; from phantomhub.accounts.models import ApiToken\n"
        f"ApiToken.objects.filter(prefix={raw[:12]!r}).update(revoked_at=timezone.now())",
    )
    status, body = live.request("GET", "/api/v1/portal/teams", token=raw)
    assert status == 401 and "was revoked at" in body["error"]["message"]

"""End to end: a real CPU PyTorch training loop, through the agent, into a real PhantomHub
server (gunicorn with the embedded sweeper, which analyses and evaluates alert rules every 5 s)
develops a data stall mid-run; a local HTTP receiver gets exactly one signed alert within a
minute of the stall, and exactly one resolve after the stall ends."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import phantomhub_agent as pa
from tests.agent.conftest import PYTHON, REPO, LiveServer, _clean_agent_env, agent_kwargs, spool_dir  # noqa: F401
from tests.alerts.conftest import LOOPBACK_ALLOWED, Received, Receiver

pytestmark = [pytest.mark.live_server, pytest.mark.slow]
torch.set_num_threads(1)


class EmbeddedServer(LiveServer):
    """The live server started as `make run` starts it: deploy/gunicorn_embedded.py, so one
    worker runs the in-process sweeper (phantomhub/periodic.py)."""

    def start(self) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "gunicorn", "phantomhub.wsgi", "-c", "deploy/gunicorn_embedded.py", "-b",
             f"127.0.0.1:{self.port}", "-w", "1", "-k", "gthread", "--threads", "8", "--graceful-timeout", "2"],
            cwd=REPO, env=self.env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if self.get("/api/v1/health", auth=False)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy within 60 s")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    live = EmbeddedServer(tmp_path)
    live.env["PHANTOMHUB_PUBLIC_URL"] = "https://phantomhub.example.com"
    live.env["PHANTOMHUB_EGRESS_ALLOW_NETWORKS"] = LOOPBACK_ALLOWED  # the test's receiver, and only it
    live.setup()
    live.start()
    yield live
    live.stop()


def _rule_create(server: EmbeddedServer, url: str) -> str:
    code = (
        "from phantomhub.accounts.models import Project; from phantomhub.alerts.models import AlertRule; "
        f"r = AlertRule.objects.create(name='data stall', kind='waste_rate', scope='project', "
        f"project=Project.objects.get(slug='agent'), params={{'share': 0.5}}, for_s=4, window_s=6, "
        f"webhook_url={url!r}); print(r.webhook_secret)"
    )
    return server.manage("shell", "-c", code).strip().splitlines()[-1]


def _verified(item: Received, secret: str) -> bool:
    ts = item.headers["x-phantomhub-timestamp"]
    mac = hmac.new(secret.encode(), ts.encode() + b"." + item.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(item.headers["x-phantomhub-signature"], "v1=" + mac) and abs(time.time() - int(ts)) < 300


def test_a_data_stall_mid_run_sends_one_signed_alert_and_one_resolve(
    server: EmbeddedServer,
    receiver: Receiver,
    agent_kwargs: dict[str, Any],  # noqa: F811
) -> None:
    secret = _rule_create(server, receiver.url)
    run = pa.init(project="agent", team="agent-tests", name="stalls", server=server.url, token=server.token, **agent_kwargs)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stall = {"on": False}

    def loader() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            if stall["on"]:
                time.sleep(0.3)  # the loader regressed: 0.3 s waiting for every batch
            yield torch.randn(8, 16), torch.randint(0, 4, (8,))

    def steps_for(seconds: float, until: Any = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until()):
            x, y = next(batches)
            with run.step(tokens=128, samples=8):
                with run.stage("forward"):
                    loss = nn.functional.cross_entropy(model(x), y)
                    time.sleep(0.02)  # a model that computes for 40 ms a step
                with run.stage("backward"):
                    loss.backward()
                    time.sleep(0.02)
                with run.stage("optimizer"):
                    opt.step()
                    opt.zero_grad()

    batches = iter(run.data(loader()))
    steps_for(10)  # healthy: data waits are tiny, compute is most of each step
    assert receiver.got == []
    stall["on"] = True
    stalled_at = time.monotonic()
    steps_for(60, until=lambda: bool(receiver.got))
    alerts = list(receiver.got)
    assert alerts, f"no alert within 60 s of the stall: {server.log.read_text()[-2000:]}"
    assert alerts[0].at - stalled_at < 60
    steps_for(3)  # the stall goes on a little: still one alert
    stall["on"] = False
    ended_at = time.monotonic()
    steps_for(60, until=lambda: len(receiver.got) >= 2)
    if len(receiver.got) >= 2:
        resolve_s = receiver.got[1].at - ended_at
        print(f"alert {alerts[0].at - stalled_at:.1f} s after the stall began, resolve {resolve_s:.1f} s after it ended")
    steps_for(6)  # healthy again for a while: nothing more arrives
    run.finish()
    time.sleep(6)  # one more sweep after the run ended: the resolved alert stays resolved

    got = list(receiver.got)
    events = [json.loads(g.body)["event"] for g in got]
    assert events == ["firing", "resolved"], events
    assert all(_verified(g, secret) for g in got), (secret, [g.headers for g in got])
    firing, resolved = (json.loads(g.body) for g in got)
    assert firing["subject"]["run_id"] == run.id and firing["url"] == f"https://phantomhub.example.com/runs/{run.id}"
    assert firing["figure"]["name"] == "waste_share" and firing["figure"]["value"] > 0.5
    assert firing["evidence"]["shares"]["data_stall"] > 0.4
    assert resolved["figure"]["value"] < 0.5 and "resolved_because" not in resolved["evidence"]
    assert resolved["alert_id"] == firing["alert_id"]

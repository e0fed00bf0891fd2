"""Alerts survive the server's own restarts.

A real PhantomHub (gunicorn with the embedded sweeper, which evaluates the alert rules every 5 s,
on a temporary database) receives a real node collector (`phantomhub-agent node`, the stand-in
NVML: the GPU is the only fake) whose GPU 2 holds memory and computes nothing. The
idle-GPU rule fires once to a receiver on 127.0.0.1. Then the server is stopped for longer than
four collector intervals while the collector keeps sampling and spools, and started again: the
collector replays, and no alert resolved ("node stopped reporting") nor fired a second time.
Before, the first evaluation after the restart resolved the alert and the replay fired it again:
two extra webhooks per GPU per restart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import PYTHON, REPO, LiveServer
from tests.agent.test_node_collector import node_cmd, node_env, state_file
from tests.alerts.conftest import LOOPBACK_ALLOWED, Receiver

pytestmark = [pytest.mark.live_server, pytest.mark.slow, pytest.mark.timeout(280)]
INTERVAL_S = 3  # the collector's: four intervals are 12 s, the server's "reporting now"
DOWN_S = 25  # longer than four intervals, and than the evaluator's gap (liveness.GAP_S, 15 s)


class SweepingServer(LiveServer):
    """The live server as `make run` serves it: its sweeper thread evaluates the alert rules."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.env.update(PHANTOMHUB_EGRESS_ALLOW_NETWORKS=LOOPBACK_ALLOWED, PHANTOMHUB_LOG_LEVEL="INFO")

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        log = self.log.open("ab")
        command = [PYTHON, "-m", "gunicorn", "phantomhub.wsgi", "-c", "deploy/gunicorn_embedded.py", "-b",
                   f"127.0.0.1:{self.port}", "-w", "1", "-k", "gthread", "--threads", "4", "--graceful-timeout", "2"]  # fmt: skip
        self.proc = subprocess.Popen(command, cwd=REPO, env=self.env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if self.get("/api/v1/health", auth=False)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy within 60 s")

    def query(self, code: str) -> Any:
        return json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])


STATES = """
import json
from phantomhub.alerts.models import AlertDelivery, AlertState
states = [[s.subject, s.state, s.fired_at.isoformat() if s.fired_at else None, s.resolved_at is not None]
          for s in AlertState.objects.order_by("subject")]
deliveries = [[d.event, d.status] for d in AlertDelivery.objects.order_by("id")]
print(json.dumps({"states": states, "deliveries": deliveries}))
"""

SAMPLES = """
import json
from phantomhub.fleet.models import GpuSample, Node
node = Node.objects.get()
times = list(GpuSample.objects.filter(gpu_index=1).order_by("t_ns").values_list("t_ns", flat=True))
print(json.dumps({"times": times, "counters": node.counters}))
"""


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SweepingServer]:
    live = SweepingServer(tmp_path / "server")
    live.workdir.mkdir()
    live.setup()
    live.start()
    yield live
    live.stop()


def events(receiver: Receiver) -> list[str]:
    with receiver.lock:
        return [str(item.json.get("event")) for item in receiver.got]


def test_a_restart_longer_than_four_intervals_neither_resolves_nor_refires_an_alert(
    server: SweepingServer, receiver: Receiver, tmp_path: Path
) -> None:
    token = server.manage("createtoken", "--node", "--hostname", "*", "--name", f"n-{uuid.uuid4().hex[:6]}").strip()
    server.manage(
        "shell", "-c",
        "from phantomhub.alerts.models import AlertRule; "
        f"AlertRule.objects.create(name='idle GPUs', kind='idle_gpu', for_s=1, webhook_url={receiver.url + '/hook'!r})",
    )  # fmt: skip
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    # GPU 0 computes (97 %, a process), 1 too (99 %), 2 holds 38 GiB at 0 % (idle-held), 3 is empty.
    state = state_file(tmp_path, [busy.pid])
    env = {**node_env(tmp_path, state), "PHANTOMHUB_SERVER": server.url, "PHANTOMHUB_TOKEN": token}
    collector = subprocess.Popen(
        node_cmd("--interval", str(INTERVAL_S), "--hostname", "gpu-r-1", "--spool", str(tmp_path / "spool")),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        wait_until(lambda: events(receiver) == ["firing"], 60, "the idle GPU's alert to fire")
        before = server.query(STATES)
        assert [s[:2] for s in before["states"]] == [["gpu:gpu-r-1:2", "firing"]]

        server.stop()  # the collector keeps sampling and spools what it cannot send
        down_at = time.time_ns()
        time.sleep(DOWN_S)
        server.start()
        up_at = time.time_ns()

        # The collector replays what it spooled; the node's samples cover the outage.
        def caught_up() -> bool:
            times = server.query(SAMPLES)["times"]
            return bool(times) and times[-1] > up_at

        wait_until(caught_up, 60, "the collector to replay and catch up")
        time.sleep(15)  # three more passes of the sweeper, each evaluating the rule
        got = server.query(SAMPLES)
        during = [t for t in got["times"] if down_at < t < up_at]
        assert len(during) >= DOWN_S // INTERVAL_S - 2  # sampled while the server was down, replayed
        assert max(b - a for a, b in zip(got["times"], got["times"][1:], strict=False)) < 2 * INTERVAL_S * 10**9
        assert got["counters"]["spooled_batches"] > 0 and got["counters"]["replayed_batches"] > 0

        after = server.query(STATES)
        assert after["states"] == before["states"]  # still firing, never resolved, fired at the same moment
        assert after["deliveries"] == [["firing", "sent"]]
        assert events(receiver) == ["firing"]  # one webhook in all: no resolve, no second firing
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.wait(timeout=20)
        busy.kill()
        busy.wait()

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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import PYTHON, REPO, LiveServer
from tests.agent.test_node_collector import node_cmd, node_env, state_file
from tests.alerts.conftest import LOOPBACK_ALLOWED, Receiver
from tests.conftest import Tenant
from tests.fleet.conftest import h100_price, node_client, raw_days_for_fixed_dates, teams  # noqa: F401

pytestmark = pytest.mark.slow  # a long unit: handed out first (tests/conftest.py)

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


@pytest.mark.live_server
@pytest.mark.slow
@pytest.mark.timeout(280)
def test_a_restart_longer_than_four_intervals_neither_resolves_nor_refires_an_alert(
    server: SweepingServer, receiver: Receiver, tmp_path: Path
) -> None:
    token = server.manage("createnodetoken", "--hostname", "*", "--name", f"n-{uuid.uuid4().hex[:6]}").strip()
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


# -- the same rules on the database, the restart made by a beat in the past -----------------------


def _restarted(seconds_down: float) -> None:
    """The evaluator last beat `seconds_down` ago: the next evaluation starts a new up-time."""
    from django.utils import timezone

    from phantomhub.alerts.models import ServerBeat

    ServerBeat.objects.update_or_create(pk=1, defaults={"beat_at": timezone.now() - timedelta(seconds=seconds_down)})


@pytest.mark.django_db
def test_a_beat_after_a_gap_starts_an_up_time_and_a_first_beat_does_not() -> None:
    from django.utils import timezone

    from phantomhub.alerts.liveness import GAP_S, server_beat

    now = timezone.now()
    assert server_beat(at=now) is None  # a new install has seen no gap
    assert server_beat(at=now + timedelta(seconds=GAP_S - 1)) is None
    later = now + timedelta(seconds=3 * GAP_S)
    assert server_beat(at=later) == later
    assert server_beat(at=later + timedelta(seconds=5)) == later  # one up-time until the next gap


@pytest.mark.django_db
def test_a_silent_runs_alert_neither_resolves_nor_fires_while_its_agent_may_still_replay(owner: Tenant) -> None:
    from django.utils import timezone

    from phantomhub.alerts import services
    from phantomhub.alerts.models import AlertRule, AlertState
    from phantomhub.telemetry.models import Run
    from tests.alerts.conftest import live_run, steps

    quiet, lost = live_run(owner, steps(10)), live_run(owner, steps(10))
    now = timezone.now()
    Run.objects.filter(pk=quiet).update(last_seen_at=now - timedelta(seconds=400))
    rule = AlertRule.objects.create(name="silent", kind="silent_run", for_s=300)
    services.alerts_evaluate(now=now)
    assert AlertState.objects.get(rule=rule, subject=f"run:{quiet}").state == "firing"
    Run.objects.filter(pk=lost).update(last_seen_at=now - timedelta(seconds=400))  # silent during the outage
    _restarted(120)
    services.alerts_evaluate()
    states = dict(AlertState.objects.filter(rule=rule).values_list("subject", "state"))
    assert states == {f"run:{quiet}": "firing"}  # kept, and the other not fired for the server's downtime


@pytest.mark.django_db
def test_a_node_that_has_not_caught_up_keeps_its_gpus_alerts_until_its_hold_ends(
    node_client: Any,  # noqa: F811
    h100_price: Any,  # noqa: F811
    teams: Any,  # noqa: F811
) -> None:
    from django.utils import timezone

    from phantomhub.alerts import services
    from phantomhub.alerts.liveness import hold_s
    from phantomhub.alerts.models import AlertRule, AlertState, ServerBeat
    from phantomhub.fleet.models import Node
    from tests.fleet.test_ground_truth import post_hour

    post_hour(node_client)  # GPU 2 idle-held for an hour, ending at HOUR_START + 1 h
    node = Node.objects.get()
    now = datetime.fromtimestamp(node.last_t_ns / 1e9, tz=UTC) + timedelta(seconds=10)
    rule = AlertRule.objects.create(name="idle", kind="idle_gpu", for_s=60)
    services.alerts_evaluate(now=now)
    assert AlertState.objects.get(rule=rule).state == "firing"
    # The node's newest sample is from before the restart: its GPU is not "reporting now", and
    # the node is left unjudged, not resolved.
    _restarted(120)
    services.alerts_evaluate(now=now + timedelta(minutes=5))
    assert AlertState.objects.get(rule=rule).state == "firing"
    # Its hold over and still no sample since: it stopped reporting.
    up_since = ServerBeat.objects.get().up_since
    assert up_since is not None
    ServerBeat.objects.update(up_since=timezone.now() - timedelta(seconds=hold_s(node.interval_s) + 1))
    services.alerts_evaluate(now=now + timedelta(minutes=6))
    assert AlertState.objects.get(rule=rule).state == "resolved"

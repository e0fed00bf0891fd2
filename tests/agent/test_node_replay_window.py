"""The node collector's replay window: a spooled request older than the server's window is
dropped and counted at replay, never sent (the server would refuse it), and the server's default
window is the collector's."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from phantomhub_agent.node._collector import REPLAY_WINDOW_S

from .conftest import FakeServer, Recorded, wait_for
from .test_node_collector import ok, printed, start, state_file


def test_the_servers_default_window_is_the_collectors() -> None:
    from django.conf import settings

    assert settings.FLEET_REPLAY_WINDOW_S == REPLAY_WINDOW_S == 72 * 3600


def _age(path: Path, seconds: int) -> None:
    """Make a spool file look written `seconds` ago (its header's created_ns)."""
    data = path.read_bytes()
    newline = data.index(b"\n")
    header = json.loads(data[:newline])
    header["created_ns"] -= seconds * 1_000_000_000
    path.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + data[newline + 1 :])


def test_a_spooled_request_older_than_the_window_is_dropped_and_counted_not_sent(fake_server: FakeServer, tmp_path: Path) -> None:
    state = state_file(tmp_path, [])
    answered: dict[int, int] = {}

    def down(req: Recorded, index: int) -> tuple[int, dict[str, str], bytes]:
        answered[index] = 503
        return 503, {"Retry-After": "1"}, b'{"error": {"code": "unavailable", "message": "down", "fields": {}}}'

    fake_server.script = down
    spool = tmp_path / "spool"
    args = ("--server", fake_server.url, "--token", "phk_node", "--interval", "1", "--spool", str(spool), "--print")
    first = start(tmp_path, state, *args)
    wait_for(lambda: len(list(spool.rglob("*.phk"))) >= 3)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=20)
    assert first.returncode == 0, err
    taken = [p["gpus"]["t_ns"][0] for p in printed(out)]
    files = sorted(spool.rglob("*.phk"), key=lambda p: p.name)
    assert len(files) == len(taken)
    _age(files[0], REPLAY_WINDOW_S + 60)  # the oldest: past the window

    fake_server.script = None
    second = start(tmp_path, state, *args, "--once")
    out2, err2 = second.communicate(timeout=30)
    assert second.returncode == 0, err2
    delivered = sorted(r.body["gpus"]["t_ns"][0] for r in ok(fake_server.requests, answered))
    expected = sorted(taken[1:] + [p["gpus"]["t_ns"][0] for p in printed(out2)])
    assert delivered == expected  # all but the old one, which was never sent
    assert "older than 72 h dropped" in err2 and '"spool_dropped_batches": 1' in err2
    assert not list(spool.rglob("*.phk"))

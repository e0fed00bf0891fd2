"""One request per node against the live server: four processes launched as torchrun launches a
node's ranks (RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, one rendezvous id) record steps through the
agent; local rank 0 sends the node's batches. The oracle is what each process recorded."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import AGENT_ENV_VARS, PYTHON, SCRIPT_ENV, LiveServer

pytestmark = pytest.mark.live_server

LOCAL_WORLD = 4
STEPS = 60

NODE_RANK_SCRIPT = """
import sys, time
import phantomhub_agent as pa
run = pa.init(name="node", debug=True, flush_interval_s=0.4, system_interval_s=0, request_timeout_s=5)
for i in range(int(sys.argv[1])):
    with run.step(samples=8, tokens=100):
        time.sleep(0.02)
run.finish()
print(run.id)
print(run.counters["node_batches"], run.counters["handed_batches"], run.counters["node_peer_batches"])
"""


def _node(live: LiveServer, tmp_path: Path, **extra: str) -> list[tuple[str, list[int]]]:
    """Starts the node's processes together; each one's run id and (node, handed, carried) counters."""
    script = tmp_path / "node_rank.py"
    script.write_text(NODE_RANK_SCRIPT)
    procs = []
    for rank in range(LOCAL_WORLD):
        env = {k: v for k, v in os.environ.items() if k not in AGENT_ENV_VARS}
        env.update(SCRIPT_ENV)
        env.update(
            PHANTOMHUB_SERVER=live.url, PHANTOMHUB_TOKEN=live.token, PHANTOMHUB_SPOOL_DIR=str(tmp_path / "spool"),
            TORCHELASTIC_RUN_ID=f"node-{tmp_path.name}", WORLD_SIZE=str(LOCAL_WORLD), RANK=str(rank),
            LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(LOCAL_WORLD), **extra,
        )  # fmt: skip
        procs.append(subprocess.Popen([PYTHON, str(script), str(STEPS)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-3000:]
        run_id, counters = stdout.strip().splitlines()[-2:]
        out.append((run_id, [int(c) for c in counters.split()]))
    return out


def test_a_nodes_ranks_reach_the_server_through_local_rank_0(live: LiveServer, tmp_path: Path) -> None:
    started = time.monotonic()
    results = _node(live, tmp_path)
    [run_id] = {run_id for run_id, _ in results}
    for rank in range(LOCAL_WORLD):  # every recorded step stored once, in its rank
        assert live.steps(run_id, rank=rank)["step"] == list(range(STEPS))
    node_batches, _, carried = results[0][1]
    handed = [counters[1] for _, counters in results[1:]]
    assert node_batches >= 1 and all(h >= 1 for h in handed)  # the peers handed, local rank 0 sent them
    assert carried >= 1 and carried <= sum(handed)  # a handed batch left at finish goes out with its writer
    ranks = {r["rank"]: r for r in live.run(run_id)["ranks"]}
    # The counters, stored by the server as of the last batch that carried them: a node batch sent
    # in the final pass carries the snapshot taken before it went out, so it may not count itself.
    assert ranks[0]["counters"]["node_batches"] in (node_batches - 1, node_batches)
    assert [p for p in (tmp_path / "spool").rglob("*.phk*")] == []  # nothing left behind
    assert time.monotonic() - started < 60


def test_node_batches_off_sends_from_every_rank(live: LiveServer, tmp_path: Path) -> None:
    results = _node(live, tmp_path, PHANTOMHUB_NODE_BATCHES="0")
    [run_id] = {run_id for run_id, _ in results}
    for rank in range(LOCAL_WORLD):
        assert live.steps(run_id, rank=rank)["step"] == list(range(STEPS))
    assert all(counters == [0, 0, 0] for _, counters in results)

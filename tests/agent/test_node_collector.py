"""`phantomhub-agent node` as a process: one request per interval to a local receiver that
records them (tests/agent/conftest.py's fake_server), SIGTERM, an outage spooled and replayed by
the next start, refusals, flags. The GPUs are the stand-in NVML (the hardware), loaded as
``pynvml`` from data/standin_nvml; owners come from this machine's real /proc."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import AGENT_ENV_VARS, FakeServer, Recorded, wait_for

DATA = Path(__file__).parent / "data"
GIB = 1024**3
PATH = "/api/v1/nodes/samples"


def state_file(tmp_path: Path, pids: list[int]) -> Path:
    gpus = []
    for i in range(4):
        gpus.append(
            {
                "uuid": f"GPU-{i}",
                "name": "NVIDIA H100 80GB HBM3",
                "util": [97, 99, 0, 0][i],
                "mem_used": [71, 40, 38, 0][i] * GIB,
                "mem_total": 80 * GIB,
                "power_mw": 400_000,
                "sm_clock": 1980,
                "compute": [[pids[i], 10 * GIB]] if i < len(pids) else [],
            }
        )
    path = tmp_path / "nvml-state.json"
    path.write_text(json.dumps({"gpus": gpus}))
    return path


def node_env(tmp_path: Path, state: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AGENT_ENV_VARS}
    env["PYTHONPATH"] = str(DATA / "standin_nvml")
    env["PHANTOMHUB_RUN_DIR"] = str(tmp_path / "runs")
    if state is not None:
        env["NVML_STANDIN_STATE"] = str(state)
    return env


def node_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "phantomhub_agent.cli", "node", *args]


def start(tmp_path: Path, state: Path | None, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        node_cmd(*args), env=node_env(tmp_path, state), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )


def printed(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def ok(requests: list[Recorded], answered: dict[int, int]) -> list[Recorded]:
    return [r for i, r in enumerate(requests) if answered.get(i, 200) == 200]


def test_one_request_per_interval_until_sigterm_then_a_clean_exit(fake_server: FakeServer, tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = state_file(tmp_path, [sleeper.pid])
        proc = start(
            tmp_path,
            state,
            "--server",
            fake_server.url,
            "--token",
            "phk_node",
            "--interval",
            "1",
            "--spool",
            str(tmp_path / "spool"),
        )
        wait_for(lambda: len(fake_server.requests) >= 4)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 0, err
    requests = list(fake_server.requests)
    assert {r.path for r in requests} == {PATH}  # nothing else: no run, no counter events
    assert all(r.headers["authorization"] == "Bearer phk_node" for r in requests)
    times = [r.body["gpus"]["t_ns"][0] for r in requests]
    assert times == sorted(set(times))  # one sample per request, each once, in order
    gaps_s = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
    assert all(0.5 <= g <= 2.5 for g in gaps_s), gaps_s  # a fixed schedule: no bursts, no drift (loose for a busy CI)
    assert abs(sum(gaps_s) / len(gaps_s) - 1.0) < 0.2, gaps_s  # on average one interval apart
    body = requests[0].body
    assert body["interval_s"] == 1 and body["node"]["gpu_count"] == 4 and body["node"]["source"] == "nvml"
    assert body["processes"]["pid"] == [sleeper.pid]
    assert body["owners"][0]["kind"] in ("user", "k8s", "slurm")
    assert "counters" in err  # the drop counters, logged at exit
    assert not list((tmp_path / "spool").rglob("*.phk"))
    # Every request carries the sender's counters as they stood when it was built: the requests
    # delivered before it, nothing spooled, dropped or failed.
    sent = [r.body["counters"] for r in requests]
    assert [c["sent_batches"] for c in sent] == list(range(len(sent)))
    assert all(c["spooled_batches"] == c["dropped_samples"] == c["send_failures"] == c["internal_errors"] == 0 for c in sent)
    assert "sm_active" not in body["gpus"]  # NVML has no SM activity: no column of nulls


def test_an_outage_is_spooled_and_the_next_start_replays_it_nothing_lost(fake_server: FakeServer, tmp_path: Path) -> None:
    state = state_file(tmp_path, [])
    answered: dict[int, int] = {}

    def down(req: Recorded, index: int) -> tuple[int, dict[str, str], bytes]:
        answered[index] = 503
        return 503, {"Retry-After": "1"}, b'{"error": {"code": "unavailable", "message": "database down", "fields": {}}}'

    fake_server.script = down
    spool = tmp_path / "spool"
    args = ("--server", fake_server.url, "--token", "phk_node", "--interval", "1", "--spool", str(spool), "--print")
    first = start(tmp_path, state, *args)
    wait_for(lambda: len(list(spool.rglob("*.phk"))) >= 3)
    first.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    out, err = first.communicate(timeout=20)
    assert first.returncode == 0, err
    assert time.monotonic() - signalled < 5 + 3  # the flush keeps to --finish-timeout (5 s), then spools
    taken = [p["gpus"]["t_ns"][0] for p in printed(out)]
    assert len(taken) >= 3
    assert not ok(fake_server.requests, answered)  # nothing got through

    fake_server.script = None  # the server is back
    second = start(tmp_path, state, *args, "--once")
    out2, err2 = second.communicate(timeout=30)
    assert second.returncode == 0, err2
    taken += [p["gpus"]["t_ns"][0] for p in printed(out2)]
    delivered = [r.body["gpus"]["t_ns"][0] for r in ok(fake_server.requests, answered)]
    assert sorted(delivered) == sorted(taken)  # every sample once: none lost, none sent twice
    replayed = [t for t in delivered if t != taken[-1]]
    assert replayed == sorted(replayed)  # the backlog in the order it was taken
    assert not list(spool.rglob("*.phk"))
    # The counters rode along, as they stood when each request was built: during the outage
    # nothing sent and the failed attempts (at least the first request's, a second before the third).
    bodies = {r.body["gpus"]["t_ns"][0]: r.body["counters"] for r in ok(fake_server.requests, answered)}
    outage = [bodies[t] for t in taken[:-1]]
    assert all(c["sent_batches"] == 0 for c in outage)
    failures = [c["send_failures"] for c in outage]
    assert failures == sorted(failures) and failures[0] == 0 and failures[-1] >= 1


def test_a_request_the_server_refuses_is_dropped_and_counted_not_retried(fake_server: FakeServer, tmp_path: Path) -> None:
    def refuse(req: Recorded, index: int) -> tuple[int, dict[str, str], bytes]:
        error = {"error": {"code": "invalid", "message": "gpus.util_pct[0]: out of range", "fields": {"gpus.util_pct[0]": "x"}}}
        return 400, {}, json.dumps(error).encode()

    fake_server.script = refuse
    spool = tmp_path / "spool"
    done = subprocess.run(
        node_cmd("--server", fake_server.url, "--token", "t", "--once", "--spool", str(spool)),
        env=node_env(tmp_path, state_file(tmp_path, [])),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert len(fake_server.requests) == 1
    assert "gpus.util_pct[0]" in done.stderr and '"rejected_batches": 1' in done.stderr
    assert not list(spool.rglob("*.phk"))


def test_a_dcgm_exporter_page_is_the_source_when_named(fake_server: FakeServer, tmp_path: Path) -> None:
    import http.server
    import threading

    page = (DATA / "dcgm-exporter-h100x4.prom").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{exporter.server_address[1]}/metrics"
        done = subprocess.run(
            node_cmd(
                "--source",
                "dcgm",
                "--dcgm-url",
                url,
                "--server",
                fake_server.url,
                "--token",
                "t",
                "--once",
                "--region",
                "us-east-1",
            ),
            env=node_env(tmp_path, None),
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        exporter.shutdown()
        exporter.server_close()
    assert done.returncode == 0, done.stderr
    (request,) = fake_server.requests
    assert request.headers.get("content-encoding") == "gzip"  # bodies over 1 KiB go compressed
    body = request.body
    assert body["node"]["hostname"] == "gpu-a-17" and body["node"]["source"] == "dcgm"
    assert body["node"]["gpu_model"] == "NVIDIA H100 80GB HBM3" and body["node"]["region"] == "us-east-1"
    assert body["gpus"]["util_pct"] == [97.0, 0.0, 0.0, 43.0]
    assert body["gpus"]["sm_active"] == [0.912034, 0.0, 0.0, 0.382511]  # DCGM_FI_PROF_SM_ACTIVE
    assert body["counters"]["sent_batches"] == 0 and body["counters"]["source_errors"] == 0
    assert [o["namespace"] for o in body["owners"]] == ["ml-team", "notebooks", "serving"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source", "dcgm", "--print"], "--dcgm-url"),
        (["--interval", "0", "--print"], "--interval"),
        ([], "no server"),
        (["--server", "http://127.0.0.1:1"], "no token"),
        (["--server", "127.0.0.1:8000", "--token", "t"], "http(s) URL"),
        (["--label", "novalue", "--print"], "KEY=VALUE"),
    ],
)
def test_bad_flags_are_named_and_nothing_runs(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        node_cmd(*args), env=node_env(tmp_path, state_file(tmp_path, [])), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and message in done.stderr


def test_without_nvml_installed_the_collector_says_which_extra_to_install(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("pynvml") is not None:
        pytest.skip("nvidia-ml-py is installed here")
    env = node_env(tmp_path, None)
    env.pop("PYTHONPATH")
    done = subprocess.run(node_cmd("--print", "--once"), env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "phantomhub-agent[gpu]" in done.stderr

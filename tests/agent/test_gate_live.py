"""The CI gate (``phantomhub-agent gate``) on real CPU training runs against a live server.

A project gets three baseline runs of the same small PyTorch job, then two more: one unchanged,
one with a slower data loader (an injected sleep per batch). The gate passes the first and fails
the second, and the figures of its table are checked against an independent computation from the
stored step rows (means per step, the median over the baseline runs) and the runs' stored costs.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import phantomhub_agent as pa
from phantomhub_agent._identity import normalize_run_id

from .conftest import LiveServer, agent_cli

torch.set_num_threads(1)

STEPS = 80
PROJECT = "gate-ci"
# The GPUs the job holds: 8 H100s allocated an hour before the first step (queueing, image pull),
# so the project's recent volume is a few dozen GPU-hours, as a small project's would be.
GPUS = 8


def _batches(n: int, sleep_s: float) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for _ in range(n):
        time.sleep(sleep_s)
        yield torch.randn(16, 32), torch.randint(0, 4, (16,))


def _train(live: LiveServer, token: str, name: str, agent_kwargs: dict[str, Any], data_s: float) -> str:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = pa.init(
        project=PROJECT, team="agent-tests", name=name, gpu_model="H100-SXM", gpu_count=GPUS, dtype="fp32",
        allocation_start=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
        server=live.url, token=token, **agent_kwargs,
    )  # fmt: skip
    run.count_flops(model, torch.randn(16, 32))
    for x, y in run.data(_batches(STEPS, data_s)):
        with run.step(tokens=512, samples=16):
            with run.stage("forward"):
                loss = nn.functional.cross_entropy(model(x), y)
                time.sleep(0.010)
            with run.stage("backward"):
                loss.backward()
                time.sleep(0.015)
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()
                time.sleep(0.005)
    run.finish()
    return run.id


def _gate(live: LiveServer, token: str, run_id: str, budget: float, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [agent_cli(), "gate", "--server", live.url, "--token", token, "--project", PROJECT, "--run", run_id,
         "--max-usd-per-month", f"{budget:.4f}", "--wait", "60", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _steps(live: LiveServer, token: str, run_id: str) -> dict[str, list[Any]]:
    """Every stored step row of the (one-rank) run, read back through the steps API."""
    merged: dict[str, list[Any]] = {}
    after: int | None = None
    while True:
        query = "limit=1000" + (f"&after_step={after}" if after is not None else "")
        status, body = live.request("GET", f"/api/v1/runs/{run_id}/steps?{query}", token=token)
        assert status == 200, body
        for name, values in body["steps"].items():
            merged.setdefault(name, []).extend(values)
        after = body.get("next_after_step")
        if after is None:
            return merged


def _means_ms(live: LiveServer, token: str, run_id: str) -> dict[str, float]:
    """Mean per step of the step and of each part, from the stored step rows alone."""
    rows = _steps(live, token, run_id)
    assert len(rows["step"]) == STEPS
    dur = np.array(rows["dur_ns"], float)
    parts = {p: np.array([v or 0 for v in rows[f"{p}_ns"]], float) for p in ("data", "forward", "backward", "optimizer", "comm")}
    out = {p: float(v.mean()) / 1e6 for p, v in parts.items()}
    out["host"] = float((dur - sum(parts.values())).mean()) / 1e6
    out["step"] = float(dur.mean()) / 1e6
    return out


def _cost(live: LiveServer, token: str, run_id: str) -> float:
    status, body = live.request("GET", f"/api/v1/runs/{run_id}/analysis", token=token)
    assert status == 200, body
    return float(body["cost_usd"])


@pytest.mark.live_server
@pytest.mark.slow
def test_the_gate_fails_a_regressed_run_and_passes_an_unchanged_one(live: LiveServer, agent_kwargs: dict[str, Any]) -> None:
    token = live.manage("createtoken", "--team", "agent-tests", "--project", PROJECT).strip()
    baseline_ids = [_train(live, token, f"baseline-{i}", agent_kwargs, 0.005) for i in range(3)]
    live.manage("sweep")

    # The first run of the project has nothing to be compared with: the gate says so (exit 2).
    first = _gate(live, token, baseline_ids[0], 100)
    assert first.returncode == 2, first.stdout + first.stderr
    assert "NO BASELINE: No comparable finished runs" in first.stdout
    assert _gate(live, token, baseline_ids[0], 100, "--allow-no-baseline").returncode == 0

    clean_id = _train(live, token, "unchanged", agent_kwargs, 0.005)
    live.manage("sweep")
    # The regressed run: its loader sleeps 40 ms more per batch. The gate starts before the run is
    # analysed and waits for the analysis.
    slow_id = _train(live, token, "slow-loader", agent_kwargs, 0.045)
    waiting = subprocess.Popen(
        [agent_cli(), "gate", "--server", live.url, "--token", token, "--project", PROJECT, "--run", slow_id,
         "--max-usd-per-month", "0", "--wait", "90", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)
    live.manage("sweep")
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 1, out + err
    assert "waiting for the analysis" in err

    # The project's trailing-30-day cost, from each run's stored cost (not the RunDay rollup).
    usd_30d = sum(_cost(live, token, r) for r in [*baseline_ids, clean_id, slow_id])
    means = {r: _means_ms(live, token, r) for r in [*baseline_ids, clean_id, slow_id]}
    # What a 40% slower step across the project's work would cost: far above the noise of sleeps on
    # a busy machine (a few ms on a ~35 ms step), far below the injected +40 ms.
    budget = 0.4 * usd_30d

    for run_id, earlier, expect in ((clean_id, baseline_ids, 0), (slow_id, [*baseline_ids, clean_id], 1)):
        done = _gate(live, token, run_id, budget, "--json")
        assert done.returncode == expect, (done.stdout + done.stderr, budget, {r: m["step"] for r, m in means.items()})
        doc = json.loads(done.stdout)
        assert doc["verdict"] == ("pass" if expect == 0 else "fail")
        view = doc["baseline"]
        assert {r["id"] for r in view["baseline_runs"]} == set(earlier)
        metrics = {m["metric"]: m for m in view["metrics"]}
        for part in ("step", "data", "forward", "backward", "optimizer", "comm", "host"):
            base = statistics.median(means[r][part] for r in earlier)
            assert metrics[f"{part}_ms"]["baseline"] == pytest.approx(base, rel=0.01, abs=0.01), part
            assert metrics[f"{part}_ms"]["run"] == pytest.approx(means[run_id][part], rel=0.01, abs=0.01), part
        base_step = statistics.median(means[r]["step"] for r in earlier)
        expected_usd = (means[run_id]["step"] - base_step) / base_step * usd_30d
        assert view["volume"]["project_usd_30d"] == pytest.approx(usd_30d, abs=0.01 * 5)
        assert doc["delta_usd_per_month"] == pytest.approx(expected_usd, rel=0.02, abs=0.05)
        if expect == 1:
            assert means[slow_id]["data"] > 40  # the injected sleep is in the data wait
            assert doc["delta_usd_per_month"] > budget
        else:
            assert abs(doc["delta_usd_per_month"]) <= budget

    table = _gate(live, token, slow_id, budget)
    assert table.returncode == 1
    lines = table.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("metric"))
    assert lines[header].split() == ["metric", "baseline", "this", "run", "Δ", "$/month"]
    assert lines[header + 2].startswith("Step time") and lines[header + 3].startswith("Data wait")
    assert lines[-1].startswith("FAIL: +") and f"over the budget of ${budget:,.2f}/month" in lines[-1]


@pytest.mark.live_server
def test_gate_usage_and_server_errors_exit_2(live: LiveServer) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    done = _gate(live, live.token, unknown, 100)
    assert done.returncode == 2 and "not found" in done.stderr
    done = _gate(live, "not-a-token", unknown, 100)
    assert done.returncode == 2 and "refused" in done.stderr
    done = _gate(live, live.token, "ci-7", 100)  # the run PHANTOMHUB_RUN_ID=ci-7 would name: none here
    assert done.returncode == 2 and f"run {normalize_run_id('ci-7')} not found" in done.stderr
    done = subprocess.run([agent_cli(), "gate", "--run", unknown], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--max-usd-per-month" in done.stderr


# -- the verdict and the table, on answers shaped like the server's (no server needed) ----------


SUMMARY = "+7% step time ≈ +$4,100/month at this project's recent volume"


def _compared(usd: float | None, summary: str = SUMMARY) -> dict[str, Any]:
    return {"status": "compared", "delta_usd_per_month": usd, "summary": summary}


@pytest.mark.parametrize(
    ("baseline", "budget", "allow", "code", "starts"),
    [
        (_compared(4100.0), 500.0, False, 1, "FAIL: +7% step time"),
        (_compared(499.99), 500.0, False, 0, "PASS: "),
        (_compared(500.0), 500.0, False, 0, "PASS: "),  # at the budget is within it
        (_compared(-2500.0, "-20% step time ≈ −$2,500/month at this project's recent volume"), 0.0, False, 0, "PASS: -20%"),
        (_compared(None, "+7% step time (the project's recent volume is unpriced)"), 500.0, False, 2, "UNPRICED: "),
        ({"status": "no_baseline", "reason": "No comparable finished runs: …"}, 500.0, False, 2, "NO BASELINE: No comparable"),
        ({"status": "no_baseline", "reason": "No comparable finished runs: …"}, 500.0, True, 0, "NO BASELINE: No comparable"),
    ],
)
def test_the_verdict(baseline: dict[str, Any], budget: float, allow: bool, code: int, starts: str) -> None:
    from phantomhub_agent.gate import judge

    verdict = judge(baseline, budget, allow)
    assert verdict.code == code and verdict.text.startswith(starts), verdict


def test_the_table_lines_up_every_column() -> None:
    from phantomhub_agent.gate import table

    metrics = [
        {"metric": "step_ms", "label": "Step time", "unit": "ms", "baseline": 100.0, "run": 107.0, "delta": 7.0,
         "delta_pct": 0.07, "baseline_share": None, "run_share": None, "delta_usd_per_month": 4100.0},
        {"metric": "data_ms", "label": "Data wait", "unit": "ms", "baseline": 10.0, "run": 3.0, "delta": -7.0,
         "delta_pct": -0.7, "baseline_share": 0.1, "run_share": 3 / 107, "delta_usd_per_month": -4100.0},
        {"metric": "mfu_step_time", "label": "MFU over step time", "unit": "ratio", "baseline": 0.4, "run": 0.374,
         "delta": -0.026, "delta_pct": -0.065, "delta_usd_per_month": None},
    ]  # fmt: skip
    lines = table(metrics).splitlines()
    assert len({len(line) for line in lines[:2]}) == 1  # header and rule as wide
    assert lines[2].split() == ["Step", "time", "100.00", "ms", "107.00", "ms", "+7.00", "ms", "(+7%)", "+$4,100.00"]
    data = ["Data", "wait", "10.00", "ms", "(10%)", "3.00", "ms", "(3%)", "-7.00", "ms", "(-70%)", "-$4,100.00"]
    assert lines[3].split() == data
    assert lines[4].split() == ["MFU", "over", "step", "time", "40.0%", "37.4%", "-2.6", "pts", "(-6%)", "–"]

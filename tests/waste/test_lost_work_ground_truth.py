"""Lost work against ground truth on real training (bench/lost_work_cases.py): a CPU PyTorch job
checkpoints through the agent, dies of SIGKILL (and once of SIGTERM) at known moments and resumes
from its last checkpoint in a new process, as a launcher would. PhantomHub's rework, restart and
checkpoint dollars must equal those computed from the attempts' own timestamps within ±5%, every
billed second once; then the job runs again with the interval PhantomHub advises, under the same
failures, and the realized change of its lost dollars must be the predicted saving within ±20%."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("phantomhub_agent")

from bench import lost_work_cases as lw
from phantomhub.accounts.services import project_token_for_slugs
from tests.waste.test_savings_ground_truth import priced  # noqa: F401  # $10 a GPU-second for the L4 both use

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.alone]


def _job(key: str, interval: int, live_server: Any, tmp_path: Path) -> lw.JobRun:
    token = project_token_for_slugs(team_slug="ml", project_slug="lost-work").raw
    return lw.run_job(key=key, interval=interval, server=live_server.url, token=token, team="ml", project="lost-work",
                      workdir=tmp_path)  # fmt: skip


def test_lost_work_is_the_ground_truth_and_the_advised_interval_saves_what_it_predicts(
    live_server: Any,
    priced: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    a = _job("every-10", lw.INTERVAL, live_server, tmp_path)
    truth, ours = lw.truth(a), lw.measured(a)
    usd = lw.usd_per_s()
    print(
        "\n"
        + lw.compare_table([(c, ours.lost_usd[c], getattr(truth, f"{c}_s") * usd) for c in ("rework", "restart", "checkpoint")])
    )
    assert ours.attempts == len(a.run_ids) >= 4 and ours.failures == ours.attempts - 1
    for cause in ("rework", "restart", "checkpoint"):
        assert ours.lost_usd[cause] == pytest.approx(getattr(truth, f"{cause}_s") * usd, rel=0.05), cause
    # Every second the launcher held is billed once: the attempts' spans follow one another.
    assert ours.billed_s == pytest.approx(truth.billed_s, rel=0.02)
    spans = [(datetime.fromisoformat(s), datetime.fromisoformat(e)) for s, e in ours.spans if s and e]
    assert all(prev[1] <= nxt[0] + timedelta(milliseconds=1) for prev, nxt in itertools.pairwise(spans))

    # The advice: the job's own failures, saves every 10 steps: a longer interval.
    interval = ours.advice["interval"]
    assert ours.failure_rate["source"] == "own" and interval is not None, ours.advice
    steps = lw.steps_for(interval["optimum_s"], a)
    assert steps > lw.INTERVAL
    b = _job(f"every-{steps}", steps, live_server, tmp_path)
    after = lw.measured(b)
    realized = sum(ours.lost_usd.values()) - sum(after.lost_usd.values())
    work_s = truth.work_s
    predicted = (interval["wall_per_work_now"] - interval["wall_per_work_best"]) * work_s * usd
    print(f"interval {lw.INTERVAL} -> {steps} steps: predicted ${predicted:,.2f}, realized ${realized:,.2f}")
    assert realized == pytest.approx(predicted, rel=0.20)

"""Analysis reads raw rows back columnar: exactly what the agent sent, in key order, however the
rows were batched (a stored chunk per rank and batch, storage.py) and in whatever order the
batches came: a read after a key starts inside a chunk, on a chunk's last row, or before all of
them, and chunks stored in another order than their keys' are sorted on the way out."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phantomhub.telemetry import hot, services
from phantomhub.telemetry.models import Run, RunArchive, SampleChunk, StepChunk
from phantomhub.telemetry.retention import storage_maintain
from phantomhub.telemetry.selectors import samples_arrays, steps_arrays_after
from phantomhub.waste.models import RunAnalysisState
from phantomhub.waste.services import run_analyze
from tests import rawrows
from tests.conftest import Tenant
from tests.telemetry.storage_helpers import (
    RANKS,
    STEPS,
    T0_NS,
    later,
    run_finish,
    run_with_telemetry,
    sent_samples,
    sent_steps,
)

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _as_stored(values: list[Any], float_column: bool) -> list[Any]:
    return [(np.nan if float_column else -1) if v is None else v for v in values]


def _run_in_batches(tenant: Tenant, *, step_rows: int, sample_rows: int, backwards: bool) -> Run:
    """run_with_telemetry's run, each rank's steps and samples sent in batches of so many rows
    (stored as a chunk each), the last batch first when `backwards`."""
    allocated = datetime.fromtimestamp(T0_NS / 1e9 - 1, tz=UTC).isoformat()
    run_id = tenant.create_run(
        gpu_model="H100-SXM", gpu_count=RANKS, world_size=RANKS, allocation_start=allocated, started_at=allocated
    )
    for rank in range(RANKS):
        for kind, sent, rows in (("steps", sent_steps(rank), step_rows), ("samples", sent_samples(rank), sample_rows)):
            n = len(sent["t_start_ns" if kind == "steps" else "t_ns"])
            starts = list(range(0, n, rows))
            for start in reversed(starts) if backwards else starts:
                part = {name: values[start : start + rows] for name, values in sent.items()}
                body = {"rank": rank, "host": f"node-{rank}", kind: part}
                response = tenant.client.post(f"/api/v1/runs/{run_id}/{kind}", body, format="json")
                assert response.status_code == 200, response.content
                assert response.json()["accepted"] == min(rows, n - start)
    run = Run.objects.get(pk=uuid.UUID(run_id))
    assert StepChunk.objects.filter(run=run).count() == RANKS * math.ceil(STEPS / step_rows)
    assert SampleChunk.objects.filter(run=run).count() == RANKS * math.ceil(24 / sample_rows)
    run_finish(run, days_ago=2)
    return run


# Chunks of 7 steps (every read starts inside one), of 10 (STEPS - 11 and 59 end one, STEPS - 10
# starts one), one chunk a rank; the 7-step batches sent last first (stored out of key order).
@pytest.mark.parametrize(("step_rows", "backwards"), [(7, True), (10, False), (STEPS, False)])
# Every rank from its start or from its own step, some ranks after a step, all ranks after a
# step (only the chunks reaching past the lowest are read).
@pytest.mark.parametrize("after", [{0: -1, 1: STEPS - 10, 2: 50}, {0: 5, 2: STEPS - 30}, {1: STEPS - 11, 2: 59}])
def test_steps_read_back_equal_what_was_sent_however_they_were_batched(
    owner: Tenant, step_rows: int, backwards: bool, after: dict[int, int]
) -> None:
    run = _run_in_batches(owner, step_rows=step_rows, sample_rows=24, backwards=backwards)
    got = steps_arrays_after(run_id=run.pk, after=after, pruned=False)
    assert sorted(got) == sorted(after)
    for rank, from_step in after.items():
        sent = sent_steps(rank)
        keep = [i for i, step in enumerate(sent["step"]) if step > from_step]
        assert got[rank]["step"].tolist() == [sent["step"][i] for i in keep]
        for name in ("t_start_ns", "dur_ns", "comm_ns", "flops", "alloc_retries"):
            expected = _as_stored([sent[name][i] for i in keep], name == "flops")
            np.testing.assert_array_equal(got[rank][name], np.array(expected, dtype=got[rank][name].dtype), err_msg=name)
        assert got[rank]["step"].dtype == np.int64 and got[rank]["flops"].dtype == np.float64


# Batches of 5 samples (a chunk holding both devices; the last sent first), one batch a rank.
@pytest.mark.parametrize(("sample_rows", "backwards"), [(5, True), (5, False), (24, False)])
def test_samples_read_back_in_rank_device_time_order_however_they_were_batched(
    owner: Tenant, sample_rows: int, backwards: bool
) -> None:
    run = _run_in_batches(owner, step_rows=STEPS, sample_rows=sample_rows, backwards=backwards)
    since = int(sent_samples(0)["t_ns"][3])
    got = samples_arrays(run_id=run.pk, since_ns=since, pruned=False)
    expected: list[tuple[int, int, int, float]] = []
    for rank in range(RANKS):
        s = sent_samples(rank)
        for t, device, util in zip(s["t_ns"], s["device"], s["gpu_util_pct"], strict=True):
            if t > since:
                expected.append((rank, device, t, np.nan if util is None else util))
    expected.sort(key=lambda row: row[:3])
    assert list(zip(got["rank"].tolist(), got["device"].tolist(), got["t_ns"].tolist(), strict=True)) == [
        row[:3] for row in expected
    ]
    np.testing.assert_array_equal(got["gpu_util_pct"], np.array([row[3] for row in expected]))


def test_rows_that_come_back_out_of_key_order_are_sorted() -> None:
    rows = {"rank": np.array([1, 0, 0, 1]), "step": np.array([0, 5, 2, 1]), "v": np.array([10, 11, 12, 13])}
    out = hot._in_key_order(rows, ["rank", "step"])
    assert out["rank"].tolist() == [0, 0, 1, 1] and out["step"].tolist() == [2, 5, 0, 1] and out["v"].tolist() == [12, 11, 10, 13]
    ordered = {"rank": np.array([0, 0, 1]), "step": np.array([1, 2, 0])}
    assert hot._in_key_order(ordered, ["rank", "step"]) is ordered


def test_an_incremental_pass_over_a_pruned_run_with_late_rows_equals_a_from_scratch_one(
    owner: Tenant, settings: Any, tmp_path: Path
) -> None:
    settings.ARCHIVE_URL = str(tmp_path / "archive")
    run = run_with_telemetry(owner)
    assert run_analyze(run_id=run.pk) is not None  # the state the next pass continues from
    storage_maintain(now=later(31))
    assert RunArchive.objects.get(run=run).pruned_at is not None and rawrows.steps(run.pk) == []
    # Late rows after the pruning: steps of rank 1 and samples of rank 2 (hot, beside the archive).
    late = range(STEPS, STEPS + 10)
    late_steps = {"step": list(late), "t_start_ns": [T0_NS + i * 100_000_000 for i in late],
                  "dur_ns": [100_000_000] * 10, "comm_ns": [5_000_000] * 10}  # fmt: skip
    assert services.steps_ingest(run=run, rank=1, host="node-1", steps=late_steps).accepted == 10
    late_samples = {"t_ns": [T0_NS + (12 + i) * 10**9 for i in range(3)], "device": [2] * 3, "gpu_util_pct": [10.0, 20.0, 30.0]}
    assert services.samples_ingest(run=run, rank=2, host="node-2", samples=late_samples).accepted == 3
    incremental = run_analyze(run_id=run.pk)
    assert incremental is not None and incremental.result["steps"] == RANKS * STEPS + 10
    figures = (incremental.cost_usd, incremental.waste_usd, incremental.result["categories"], incremental.result["host"])
    assert RunAnalysisState.objects.filter(run=run).delete()[0] == 1
    scratch = run_analyze(run_id=run.pk)
    assert scratch is not None
    assert (scratch.cost_usd, scratch.waste_usd, scratch.result["categories"], scratch.result["host"]) == figures
    # The late samples count: the GPU utilisation mean moved from what the archived samples alone give.
    utils = [u for r in range(RANKS) for u in sent_samples(r)["gpu_util_pct"] if u is not None] + late_samples["gpu_util_pct"]
    assert scratch.result["host"]["gpu_util_pct_mean"] == pytest.approx(sum(utils) / len(utils))

"""The Parquet archive: what goes in comes back, bit for bit, and re-analysis reads it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from django.utils import timezone

from bench.storage import synthetic_steps
from phantomhub.telemetry import services
from phantomhub.telemetry.archive import run_archive
from phantomhub.telemetry.models import Run, RunArchive
from phantomhub.telemetry.retention import storage_maintain
from phantomhub.telemetry.selectors import samples_arrays, steps_arrays_after
from phantomhub.waste.models import RunAnalysis, RunAnalysisState
from phantomhub.waste.services import run_analyze
from tests import rawrows
from tests.conftest import Tenant
from tests.telemetry.storage_helpers import RANKS, STEPS, later, run_finish, run_with_telemetry

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


@pytest.fixture(autouse=True)
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    settings.ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive"


def _all_steps(run: Run) -> dict[int, dict[str, np.ndarray]]:
    return steps_arrays_after(run_id=run.pk, after={rank: -1 for rank in range(RANKS)})


def _stored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """rawrows' rows as the archive's records: the run is the file's, not a column."""
    return [{name: value for name, value in row.items() if name != "run_id"} for row in rows]


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)  # NaN == NaN here
        assert a[name].dtype == b[name].dtype, name


def test_a_pruned_run_reads_back_from_the_archive_exactly_as_it_was_hot(owner: Tenant, archive_dir: Path) -> None:
    run = run_with_telemetry(owner)
    hot_steps, hot_samples = _all_steps(run), samples_arrays(run_id=run.pk)
    stored_steps, stored_samples = _stored(rawrows.steps(run.pk)), _stored(rawrows.samples(run.pk))
    assert sum(len(v["step"]) for v in hot_steps.values()) == RANKS * STEPS == len(stored_steps)
    assert len(hot_samples["t_ns"]) == RANKS * 24 == len(stored_samples)

    result = storage_maintain(now=later(31))
    assert result.archived == 1 and result.archive_failed == 0
    assert rawrows.steps(run.pk) == [] and rawrows.samples(run.pk) == []
    archive = RunArchive.objects.get(run=run)
    assert archive.pruned_at is not None and archive.step_rows == RANKS * STEPS
    # The files hold every row the database held, nulls as nulls (the stored chunks decoded apart).
    assert pq.read_table(archive_dir / archive.steps_path).to_pylist() == stored_steps
    assert pq.read_table(archive_dir / archive.samples_path).to_pylist() == stored_samples

    cold_steps = _all_steps(run)
    for rank in range(RANKS):
        _assert_same(hot_steps[rank], cold_steps[rank])
    _assert_same(hot_samples, samples_arrays(run_id=run.pk))
    # The incremental read (after a step) and the JSON page read work on the archive too.
    tail = steps_arrays_after(run_id=run.pk, after={1: STEPS - 5})[1]
    assert tail["step"].tolist() == list(range(STEPS - 4, STEPS))
    page = owner.client.get(f"/api/v1/runs/{run.pk}/steps?rank=2&limit=7").json()
    assert page["steps"]["step"] == list(range(7)) and page["next_after_step"] == 6
    assert page["steps"]["comm_ns"][3] is None and page["steps"]["flops"][0] is None


def test_reanalysis_of_an_archived_run_equals_the_analysis_before_archiving(owner: Tenant) -> None:
    run = run_with_telemetry(owner)
    before = run_analyze(run_id=run.pk)
    assert before is not None and before.result["steps"] == RANKS * STEPS and before.cost_usd > 0
    expected = (before.result, before.recommendations, before.cost_usd, before.waste_usd)

    storage_maintain(now=later(31))
    assert rawrows.steps(run.pk) == []
    # A model upgrade: analyse from scratch, with no analysis and no incremental state left.
    RunAnalysis.objects.filter(run=run).delete()
    assert RunAnalysisState.objects.filter(run=run).delete()[0] == 1
    after = run_analyze(run_id=run.pk)
    assert after is not None
    assert after.result["host"]["gpu_util_pct_mean"] == before.result["host"]["gpu_util_pct_mean"] is not None
    assert (after.result, after.recommendations, after.cost_usd, after.waste_usd) == expected


def test_archiving_is_atomic_and_idempotent(owner: Tenant, archive_dir: Path) -> None:
    run = run_with_telemetry(owner)
    first = run_archive(run_id=run.pk)
    path = archive_dir / RunArchive.objects.get(run=run).steps_path
    content = path.read_bytes()
    second = run_archive(run_id=run.pk)
    assert first == second and path.read_bytes() == content
    files = sorted(p.relative_to(archive_dir).as_posix() for p in archive_dir.rglob("*") if p.is_file())
    assert files == [f"samples/project=llm-pretrain/run={run.pk}.parquet", f"steps/project=llm-pretrain/run={run.pk}.parquet"]


def test_the_layout_reads_as_a_hive_partitioned_dataset(owner: Tenant, outsider: Tenant, archive_dir: Path) -> None:
    runs = [run_with_telemetry(owner), run_with_telemetry(outsider)]
    for run in runs:
        run_archive(run_id=run.pk)
    table = ds.dataset(archive_dir / "steps", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 2 * RANKS * STEPS
    assert sorted(set(table.column("project").to_pylist())) == ["detector", "llm-pretrain"]


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_an_fsspec_url_holds_the_archive(owner: Tenant, settings: Any, tmp_path: Path, scheme: str) -> None:
    root = f"/phantomhub-{uuid.uuid4().hex}" if scheme == "memory" else str(tmp_path / "by-url")
    settings.ARCHIVE_URL = f"{scheme}://{root}"
    run = run_with_telemetry(owner)
    hot = _all_steps(run)
    storage_maintain(now=later(31))
    assert rawrows.steps(run.pk) == []
    listed = fsspec.filesystem(scheme).find(root)
    assert sorted(p.rsplit("/", 3)[-3] for p in listed) == ["samples", "steps"] and all(p.endswith(".parquet") for p in listed)
    for rank, arrays in _all_steps(run).items():
        _assert_same(hot[rank], arrays)


def test_rows_arriving_after_pruning_are_read_and_archived_with_the_old_ones(owner: Tenant) -> None:
    run = run_with_telemetry(owner)
    hot = _all_steps(run)
    storage_maintain(now=later(31))
    more = synthetic_steps(rank=0, n=10, first=STEPS)
    assert services.steps_ingest(run=run, rank=0, host="node-0", steps=more).accepted == 10
    assert [row["step"] for row in rawrows.steps(run.pk)] == list(range(STEPS, STEPS + 10))  # the only hot rows
    mixed = _all_steps(run)  # archived rows and the late hot ones, as one read
    assert mixed[0]["step"].tolist() == list(range(STEPS + 10))
    _assert_same({name: values[:STEPS] for name, values in mixed[0].items()}, hot[0])
    for rank in range(1, RANKS):
        _assert_same(mixed[rank], hot[rank])
    run_finish(run, days_ago=40)
    storage_maintain(now=timezone.now())  # archive again (stale), then prune again
    assert RunArchive.objects.get(run=run).step_rows == RANKS * STEPS + 10
    assert rawrows.steps(run.pk) == []
    archived = _all_steps(run)
    for rank in range(RANKS):
        _assert_same(archived[rank], mixed[rank])  # the same read once all of it is archived


def test_an_archived_step_row_takes_at_most_30_bytes(owner: Tenant, archive_dir: Path) -> None:
    """8 ranks x 5,000 noisy steps (bench/storage.py's generator): Parquet bytes / rows."""
    run = Run.objects.get(pk=owner.create_run(gpu_count=8, world_size=8))
    for rank in range(8):
        services.steps_ingest(run=run, rank=rank, host="n", steps=synthetic_steps(rank=rank, n=5_000))
    archived = run_archive(run_id=run.pk)
    assert archived.step_rows == 40_000
    assert archived.steps_bytes / archived.step_rows <= 30, archived
    path = archive_dir / RunArchive.objects.get(run=run).steps_path
    assert path.stat().st_size == archived.steps_bytes
    meta = pq.ParquetFile(path).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"


def test_an_unreadable_archive_is_a_503_never_missing_rows(owner: Tenant, archive_dir: Path) -> None:
    run = run_with_telemetry(owner)
    storage_maintain(now=later(31))
    (archive_dir / RunArchive.objects.get(run=run).steps_path).unlink()  # the store lost the file
    for path in (f"/api/v1/runs/{run.pk}/steps", f"/api/v1/runs/{run.pk}/steps.parquet"):
        response = owner.client.get(path)
        assert response.status_code == 503, path
        assert response.json()["error"]["code"] == "unavailable" and str(run.pk) in response.json()["error"]["message"]
    RunAnalysis.objects.filter(run=run).delete()
    from phantomhub.waste.services import run_analyze_isolated

    assert run_analyze_isolated(run_id=run.pk) is None  # a failed analysis, recorded and retried later
    assert RunAnalysis.objects.get(run=run).failures == 1


def test_a_price_change_reprices_an_archived_run(owner: Tenant) -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from phantomhub.pricing.models import PriceEntry
    from phantomhub.pricing.services import price_set
    from phantomhub.waste.scheduling import analyses_invalidate

    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("1000"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    run = run_with_telemetry(owner)
    before = run_analyze(run_id=run.pk)
    assert before is not None and before.cost_usd > 0
    storage_maintain(now=later(31))
    assert rawrows.steps(run.pk) == []
    # History re-priced: the same hours at three times the rate.
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("3000"), effective_from=datetime(2020, 1, 2, tzinfo=UTC))
    analyses_invalidate()
    after = run_analyze(run_id=run.pk)
    assert after is not None and after.result["steps"] == before.result["steps"] == RANKS * STEPS
    assert after.cost_usd == pytest.approx(3 * before.cost_usd, abs=Decimal("0.02"))

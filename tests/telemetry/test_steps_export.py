"""GET /api/v1/runs/{id}/steps.parquet and `manage.py exportsteps`: what the agent sent, as Parquet."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from phantomhub.telemetry.models import RunArchive
from phantomhub.telemetry.retention import storage_maintain
from tests import rawrows
from tests.conftest import Tenant
from tests.telemetry.storage_helpers import RANKS, later, run_with_telemetry, sent_steps

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


@pytest.fixture(autouse=True)
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    settings.ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive"


def _download(tenant: Tenant, run_id: Any, **headers: str) -> Any:
    response = tenant.client.get(f"/api/v1/runs/{run_id}/steps.parquet", **headers)
    assert response.status_code == 200, response.content if not response.streaming else response.status_code
    assert response["Content-Type"] == "application/vnd.apache.parquet"
    return pq.read_table(io.BytesIO(b"".join(response.streaming_content)))


def _assert_is_what_was_sent(table: Any) -> None:
    assert table.num_rows == RANKS * len(sent_steps(0)["step"])
    for rank in range(RANKS):
        rows = table.filter(table.column("rank").to_numpy() == rank)
        for name, values in sent_steps(rank).items():
            assert rows.column(name).to_pylist() == values, (rank, name)


def test_steps_parquet_is_what_the_agent_sent_nulls_included(owner: Tenant) -> None:
    run = run_with_telemetry(owner, finished_days_ago=None)
    table = _download(owner, run.pk)
    _assert_is_what_was_sent(table)
    assert table.schema.field("step").type == "int64" and table.schema.field("rank").type == "int32"
    assert table.schema.metadata[b"phantomhub.run_id"] == str(run.pk).encode()


def test_steps_parquet_of_a_pruned_run_comes_from_the_archive(owner: Tenant, archive_dir: Path) -> None:
    run = run_with_telemetry(owner)
    storage_maintain(now=later(31))
    assert rawrows.steps(run.pk) == [] and RunArchive.objects.get(run=run).pruned_at is not None
    archived = (archive_dir / RunArchive.objects.get(run=run).steps_path).read_bytes()
    response = owner.client.get(f"/api/v1/runs/{run.pk}/steps.parquet", HTTP_ACCEPT="application/vnd.apache.parquet")
    body = b"".join(response.streaming_content)
    assert body == archived  # streamed as stored
    _assert_is_what_was_sent(pq.read_table(io.BytesIO(body)))


def test_people_of_the_team_download_it_and_other_projects_get_404(owner: Tenant, outsider: Tenant) -> None:
    run = run_with_telemetry(owner, finished_days_ago=None)
    response = outsider.client.get(f"/api/v1/runs/{run.pk}/steps.parquet")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    from rest_framework.test import APIClient

    assert APIClient().get(f"/api/v1/runs/{run.pk}/steps.parquet").status_code == 401


def test_exportsteps_writes_the_same_file(owner: Tenant, tmp_path: Path) -> None:
    run = run_with_telemetry(owner, finished_days_ago=None)
    target = tmp_path / "steps.parquet"
    out = io.StringIO()
    call_command("exportsteps", str(run.pk), "-o", str(target), stdout=out)
    assert f"wrote {target}" in out.getvalue()
    _assert_is_what_was_sent(pq.read_table(target))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("steps.parquet")] == ["steps.parquet"]


def test_exportsteps_names_the_bad_argument(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="run_id: 'nope' is not a UUID"):
        call_command("exportsteps", "nope", "-o", str(tmp_path / "x.parquet"))
    with pytest.raises(CommandError, match="run_id: no run"):
        call_command("exportsteps", "0b7e1c9a-0000-4000-8000-000000000000", "-o", str(tmp_path / "x.parquet"))
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_steps_parquet_of_a_real_agent_run_is_what_the_agent_sent(live_server: Any, monkeypatch: Any, tmp_path: Path) -> None:
    """Real CPU PyTorch training through the agent; every step batch the server accepted off the
    wire is recorded on its way to storage (the oracle), then the export must equal it."""
    torch = pytest.importorskip("torch")
    agent = pytest.importorskip("phantomhub_agent")
    from datetime import UTC, datetime

    import numpy as np

    from phantomhub.accounts.services import project_token_for_slugs
    from phantomhub.telemetry import services as ingest
    from phantomhub.telemetry import storage
    from phantomhub.telemetry.models import Run
    from phantomhub.telemetry.storage import STEPS

    sent: dict[int, list[dict[str, Any]]] = {}
    store = storage.batches_insert

    def recording(*, kind: Any, run_id: Any, batches: Any, marks: Any) -> Any:
        results = store(kind=kind, run_id=run_id, batches=batches, marks=marks)  # raises before recording
        for (rank, batch), result in zip(batches, results, strict=True):
            if kind is not STEPS or not result.accepted:
                continue  # a batch refused whole was recorded when it was stored
            assert result.accepted == batch.n, (rank, result)  # which rows of a partial batch were new is not known here
            cols = {n: [None if batch.nulls.get(n) is not None and batch.nulls[n][i] else v for i, v in enumerate(vals.tolist())]
                    for n, vals in batch.values.items()}  # fmt: skip
            sent.setdefault(rank, []).append(cols)
        return results

    # Every ingest path (separate endpoints, a rank's combined batch, a node's) stores through
    # services' name; storage's is patched too, so a path calling it there is recorded as well.
    monkeypatch.setattr(ingest, "batches_insert", recording)
    monkeypatch.setattr(storage, "batches_insert", recording)
    token = project_token_for_slugs(team_slug="ml", project_slug="export").raw
    run = agent.init(project="export", team="ml", name="exported", gpu_model="L4", gpu_count=1, dtype="fp32",
                     server=live_server.url, token=token, debug=True, spool_dir=str(tmp_path / "spool"),
                     allocation_start=datetime.now(UTC))  # fmt: skip
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    for _ in run.data(range(30)):
        with run.step(samples=8):
            with run.stage("forward"):
                loss = model(x).pow(2).mean()
            with run.stage("backward"):
                loss.backward()
            with run.stage("optimizer"):
                opt.step()
                opt.zero_grad()
    run.finish()
    stored = Run.objects.get(name="exported")
    client = _token_client(token)
    response = client.get(f"/api/v1/runs/{stored.pk}/steps.parquet")
    table = pq.read_table(io.BytesIO(b"".join(response.streaming_content)))
    expected: dict[str, list[Any]] = {}
    for batch in sent[0]:
        for name, values in batch.items():
            expected.setdefault(name, []).extend(values)
    order = np.argsort(expected["step"], kind="stable")
    assert table.num_rows == len(order) == 30
    for name, values in expected.items():
        assert table.column(name).to_pylist() == [values[i] for i in order], name
    assert set(table.column("rank").to_pylist()) == {0}


def _token_client(token: str) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client

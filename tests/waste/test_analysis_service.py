"""Analysis on the database: exact figures from synthetic runs, idempotency, incremental == full,
piecewise prices, crash detection, rollups and the analysis API."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.telemetry.models import Run
from phantomhub.waste import services, sweeps
from phantomhub.waste.models import OrgSettings, ProjectDay, RunAnalysis, RunAnalysisState, RunDay
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
S = 10**9
T0 = datetime(2026, 9, 21, 10, 0, tzinfo=UTC)
T0_NS = int(T0.timestamp()) * S
H100_BF16 = 989.4e12  # the catalog's dense bf16 peak of H100-SXM


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def known_steps(n: int, first: int = 0, *, t0_ns: int = T0_NS, data_s: float = 0.2) -> dict[str, Any]:
    """Steps of 1 s: data 0.2, forward 0.2, backward 0.4, optimizer 0.1, host 0.1 (by default);
    FLOPs of 0.35 s at target MFU 0.5 on an H100 (so compute splits 0.35 useful / 0.35 not)."""
    data_ns = int(data_s * S)
    return {
        "rank": 0,
        "steps": {
            "step": list(range(first, first + n)),
            "t_start_ns": [t0_ns + i * S for i in range(first, first + n)],
            "dur_ns": [S] * n,
            "data_ns": [data_ns] * n,
            "forward_ns": [200_000_000] * n,
            "backward_ns": [400_000_000] * n,
            "optimizer_ns": [100_000_000] * n,
            "flops": [0.5 * H100_BF16 * 0.35] * n,
        },
    }


@pytest.fixture
def price_36(db: None) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2026, 1, 1, tzinfo=UTC))


def make_run(tenant: Tenant, **fields: Any) -> str:
    body = {
        "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "world_size": 1, "dtype": "bf16",
        "allocation_start": _iso(T0 - timedelta(seconds=10)), "started_at": _iso(T0), **fields,
    }  # fmt: skip
    return tenant.create_run(**body)


def finish(tenant: Tenant, run_id: str, at_ns: int, status: str = "finished") -> None:
    event = {"id": f"finish-{at_ns}", "kind": "finish", "t_ns": at_ns, "status": status}
    response = tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")
    assert response.status_code == 200, response.content


def test_a_run_of_known_composition_is_priced_exactly(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    assert owner.post_steps(run_id, known_steps(100)).status_code == 200
    finish(owner, run_id, T0_NS + 105 * S)  # 10 s start-up, 100 s of steps, 5 s tear-down
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None
    cents = {c["category"]: c["usd_cents"] for c in row.result["categories"]}
    assert cents == {"useful_compute": 35, "compute_inefficiency": 35, "data_stall": 20, "comm_exposed": 0,
                     "host_overhead": 10, "idle": 15}  # fmt: skip
    assert row.cost_usd == Decimal("1.15") and row.gpu_hours == pytest.approx(115 / 3600)
    assert row.mfu == pytest.approx(0.5 * 35 / 115)
    # Uniform steps, 100 of them, no other run of the project: nothing demonstrates a better
    # level, so nothing is called recoverable (tests/waste/test_waste_evidence.py prices evidence).
    assert row.recoverable_usd == Decimal("0.00")
    assert {c["category"]: c["evidence"]["kind"] for c in row.result["categories"]}["data_stall"] == "none"
    assert row.complete


def test_analysing_twice_stores_the_same_result(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(50))
    first = services.run_analyze(run_id=uuid.UUID(run_id))
    second = services.run_analyze(run_id=uuid.UUID(run_id))
    assert first is not None and second is not None
    assert first.result == second.result and first.recommendations == second.recommendations
    assert list(RunDay.objects.filter(run_id=run_id).values_list("cost_usd", flat=True)) == [second.cost_usd]


def _full_reanalysis(run_id: str) -> RunAnalysis:
    deleted, _ = RunAnalysisState.objects.filter(run_id=run_id).delete()  # forget the incremental state
    assert deleted == 1  # there was one to forget: the comparison is with a from-scratch analysis
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None
    return row


def _figures(row: RunAnalysis) -> tuple[Any, ...]:
    return (row.cost_usd, row.recoverable_usd, [(c["category"], c["usd_cents"]) for c in row.result["categories"]],
            row.result["steps"], row.result["billed_gpu_seconds"])  # fmt: skip


def test_incremental_analysis_equals_a_full_one(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(40))
    services.run_analyze(run_id=uuid.UUID(run_id))
    owner.post_steps(run_id, known_steps(60, first=40, data_s=0.5))
    finish(owner, run_id, T0_NS + 101 * S)
    incremental = services.run_analyze(run_id=uuid.UUID(run_id))
    assert incremental is not None
    assert _figures(incremental) == _figures(_full_reanalysis(run_id))


def test_a_late_batch_below_what_was_analysed_forces_a_correct_full_analysis(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(30, first=30))
    services.run_analyze(run_id=uuid.UUID(run_id))
    owner.post_steps(run_id, known_steps(30, first=0))  # a spool replayed after newer steps
    finish(owner, run_id, T0_NS + 60 * S)
    late = services.run_analyze(run_id=uuid.UUID(run_id))
    assert late is not None and late.result["steps"] == 60
    assert _figures(late) == _figures(_full_reanalysis(run_id))


def test_a_run_spanning_a_price_change_is_charged_piecewise(owner: Tenant, price_36: None) -> None:
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("72"), effective_from=T0 + timedelta(seconds=50))
    run_id = make_run(owner, allocation_start=_iso(T0))
    owner.post_steps(run_id, known_steps(100))
    finish(owner, run_id, T0_NS + 100 * S)
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None
    assert row.cost_usd == Decimal("1.50")  # 50 s at $0.01/s + 50 s at $0.02/s


def test_a_price_override_replaces_the_price_book(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner, allocation_start=_iso(T0))
    owner.post_steps(run_id, known_steps(100))
    finish(owner, run_id, T0_NS + 100 * S)
    Run.objects.filter(pk=run_id).update(price_override_usd_per_gpu_hour=Decimal("3.6"), ingest_seq=99)
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None and row.cost_usd == Decimal("0.10")


def test_a_silent_running_run_becomes_crashed_and_stops_accruing(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner, allocation_start=_iso(T0))
    owner.post_steps(run_id, known_steps(20))
    last_seen = T0 + timedelta(seconds=30)
    Run.objects.filter(pk=run_id).update(last_seen_at=last_seen)
    OrgSettings.objects.update_or_create(pk=1, defaults={"crash_after_s": 60})
    assert sweeps.runs_mark_crashed(now=last_seen + timedelta(seconds=59)) == 0
    assert sweeps.runs_mark_crashed(now=last_seen + timedelta(seconds=61)) == 1
    assert Run.objects.get(pk=run_id).status == "crashed"
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    # Billed to the last sign of life in the telemetry (the end of step 19), not to when the
    # server last heard from it.
    assert row is not None and row.cost_usd == Decimal("0.20") and row.complete
    assert Run.objects.get(pk=run_id).finished_at == T0 + timedelta(seconds=20)


def test_the_sweep_analyses_dirty_runs_and_rolls_up_by_day(owner: Tenant, outsider: Tenant, price_36: None) -> None:
    a = make_run(owner, allocation_start=_iso(T0))
    b = make_run(outsider, allocation_start=_iso(T0))
    for run_id in (a, b):
        owner_or = owner if run_id == a else outsider
        owner_or.post_steps(run_id, known_steps(100))
        finish(owner_or, run_id, T0_NS + 100 * S)
    result = sweeps.analysis_sweep(inline=True)
    assert result.analysed == 2 and result.rollup_days == 1
    assert sweeps.runs_dirty() == []
    days = {pd.project.slug: pd for pd in ProjectDay.objects.select_related("project")}
    assert days["llm-pretrain"].cost_usd == Decimal("1.00") and days["detector"].cost_usd == Decimal("1.00")
    assert days["llm-pretrain"].runs == 1
    assert sum(days["llm-pretrain"].categories_usd.values()) == pytest.approx(1.00)


def test_a_run_across_midnight_splits_its_cost_by_day(owner: Tenant, price_36: None) -> None:
    midnight = datetime(2026, 9, 22, tzinfo=UTC)
    start = midnight - timedelta(seconds=40)
    run_id = make_run(owner, allocation_start=_iso(start), started_at=_iso(start))
    owner.post_steps(run_id, known_steps(100, t0_ns=int(start.timestamp()) * S))
    finish(owner, run_id, int(start.timestamp()) * S + 100 * S)
    services.run_analyze(run_id=uuid.UUID(run_id))
    days = {d.day.isoformat(): d.cost_usd for d in RunDay.objects.filter(run_id=run_id)}
    assert days == {"2026-09-21": Decimal("0.40"), "2026-09-22": Decimal("0.60")}


def test_a_price_change_marks_analyses_stale(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(10))
    services.run_analyze(run_id=uuid.UUID(run_id))
    assert sweeps.runs_dirty() == []
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("1"), effective_from=T0 - timedelta(days=1))
    assert sweeps.runs_dirty() == [uuid.UUID(run_id)]


def test_the_analysis_api_answers_the_documented_shape(owner: Tenant, outsider: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    url = f"/api/v1/runs/{run_id}/analysis"
    assert owner.client.get(url).status_code == 202
    owner.post_steps(run_id, known_steps(100))
    finish(owner, run_id, T0_NS + 105 * S)
    services.run_analyze(run_id=uuid.UUID(run_id))
    body = owner.client.get(url).json()
    for key in ("cost_usd", "gpu_seconds", "mfu", "target_mfu", "recoverable_usd", "categories", "stragglers",
                "recommendations", "analysed_at", "complete"):  # fmt: skip
        assert key in body, key
    assert set(body["categories"]) == {"useful_compute", "compute_inefficiency", "data_stall", "comm_exposed",
                                       "host_overhead", "idle"}  # fmt: skip
    data = body["categories"]["data_stall"]
    assert data["usd"] == 0.20 and data["cap"] == 1.0
    assert data["recoverable_low_usd"] <= data["recoverable_usd"] <= data["recoverable_high_usd"]
    assert data["evidence"]["kind"] in ("none", "own_stretch", "peers") and data["evidence"]["summary"]
    assert body["dropped_rows"] == {"non_rising_start": 0, "reused_step": 0}
    assert body["cost_usd"] == 1.15 and body["complete"] is True and "explain" not in body
    explained = owner.client.get(url, {"explain": "1"}).json()["explain"]
    assert explained["cost_usd"]["formula"] and explained["cost_usd"]["inputs"]
    assert outsider.client.get(url).status_code == 404
    assert owner.client.get(f"/api/v1/runs/{run_id}/series").json()["t_start_ns"]


def test_the_per_rank_figures_are_stored_apart_and_served_with_the_analysis(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner, gpu_count=2, world_size=2)
    owner.post_steps(run_id, known_steps(100))
    owner.post_steps(run_id, {**known_steps(50, data_s=0.3), "rank": 1})
    finish(owner, run_id, T0_NS + 105 * S)
    services.run_analyze(run_id=uuid.UUID(run_id))
    row = RunAnalysis.objects.get(run_id=run_id)
    assert "ranks" not in row.result and row.rank_figures is not None
    url = f"/api/v1/runs/{run_id}/analysis"
    ranks = owner.client.get(url).json()["ranks"]
    # Each rank's figures from its own steps: 0.2 s (rank 1: 0.3 s) of each 1 s step waits on data.
    assert [(r["rank"], r["steps"]) for r in ranks] == [(0, 100), (1, 50)]
    assert ranks[0]["gpu_seconds"]["data_stall"] == pytest.approx(100 * 0.2, rel=1e-9)
    assert ranks[1]["gpu_seconds"]["data_stall"] == pytest.approx(50 * 0.3, rel=1e-9)
    assert ranks[0]["data_ns_mean"] == 0.2 * S and ranks[1]["data_ns_mean"] == 0.3 * S
    # An analysis stored before the column (the figures inside `result`) is served as it was.
    RunAnalysis.objects.filter(run_id=run_id).update(result={**row.result, "ranks": ranks[:1]}, rank_figures=None)
    assert owner.client.get(url).json()["ranks"] == ranks[:1]


def test_a_finished_peer_run_is_the_evidence_and_savings_recur_with_the_project(owner: Tenant, price_36: None) -> None:
    peer = make_run(owner, name="peer")
    owner.post_steps(peer, known_steps(100, data_s=0.05))
    finish(owner, peer, T0_NS + 105 * S)
    services.run_analyze(run_id=uuid.UUID(peer))
    run_id = make_run(owner, name="starved", allocation_start=_iso(T0 + timedelta(seconds=190)),
                      started_at=_iso(T0 + timedelta(seconds=200)))  # fmt: skip
    owner.post_steps(run_id, known_steps(100, t0_ns=T0_NS + 200 * S))
    finish(owner, run_id, T0_NS + 305 * S)
    services.run_analyze(run_id=uuid.UUID(run_id))

    body = owner.client.get(f"/api/v1/runs/{run_id}/analysis").json()
    data = body["categories"]["data_stall"]
    # 20 cents of data stall at 200 ms/step; the peer waited 50 ms: 20 x (1 - 50/200) = 15 cents.
    assert data["evidence"]["kind"] == "peers" and data["evidence"]["peer_run_ids"] == [peer]
    assert data["evidence"]["peer_runs"] == [{"id": peer, "name": "peer"}]
    assert data["recoverable_usd"] == 0.15 and data["evidence"]["reference_value"] == 50.0
    rec = next(r for r in body["recommendations"] if r["code"] == "DATA_STALL")
    assert rec["saving_usd"] == 0.15 and rec["claims"] == {"data_stall": 0.15}
    # Recurring: the project ran 2 x 115 GPU-s in the 30 days, so a month saves 0.15 x 230 / 115.
    assert rec["recurrence"]["kind"] == "recurring" and rec["recurrence"]["other_runs_30d"] == 1
    assert rec["saving_usd_per_month"] == pytest.approx(0.15 * 230 / 115)
    assert sum(r["saving_usd"] or 0 for r in body["recommendations"]) <= body["recoverable_usd"] + 1e-9
    assert RunAnalysis.objects.get(run_id=run_id).recoverable_usd == Decimal(str(body["recoverable_usd"]))
    assert sum(d.recoverable_usd for d in RunDay.objects.filter(run_id=run_id)) == Decimal(str(body["recoverable_usd"]))


def test_a_one_off_run_has_no_monthly_saving(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(100))
    finish(owner, run_id, T0_NS + 105 * S)
    services.run_analyze(run_id=uuid.UUID(run_id))
    recs = owner.client.get(f"/api/v1/runs/{run_id}/analysis").json()["recommendations"]
    assert recs and all(r["recurrence"]["kind"] == "one_off" and r["saving_usd_per_month"] is None for r in recs)


def test_rows_left_out_or_refused_are_counted_and_shown(owner: Tenant, price_36: None) -> None:
    run_id = make_run(owner)
    owner.post_steps(run_id, known_steps(20))
    # A restart whose clock went back: steps 20..29 start before step 19 did (left out by analysis)...
    owner.post_steps(run_id, known_steps(10, first=20, t0_ns=T0_NS - 25 * S))
    # ...and a restart that numbered steps from 0 again (refused at ingest as reused step numbers).
    owner.post_steps(run_id, known_steps(5, t0_ns=T0_NS + 60 * S))
    services.run_analyze(run_id=uuid.UUID(run_id))
    body = owner.client.get(f"/api/v1/runs/{run_id}/analysis").json()
    assert body["dropped_rows"] == {"non_rising_start": 10, "reused_step": 5}
    assert any("10 step row(s) were left out" in w for w in body["warnings"])
    assert any("5 step row(s) were refused" in w for w in body["warnings"])


def test_the_openapi_schema_documents_the_evidence_fields(client: Any) -> None:
    schema = client.get("/api/schema/?format=json").json()
    parts = schema["components"]["schemas"]
    assert {"recoverable_low_usd", "recoverable_high_usd", "evidence", "cap"} <= set(parts["Category"]["properties"])
    assert {"saving_usd", "saving_usd_per_month", "recurrence", "claims"} <= set(parts["Recommendation"]["properties"])
    assert "dropped_rows" in parts["Analysis"]["properties"]

"""Monthly figures follow the project's recurrence as of reading, and rates come from unrounded
dollars: a run followed by more runs of its project is not "one-off", and a run under a cent still
reads its price per GPU-hour."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import services
from phantomhub.waste.models import RunAnalysis
from phantomhub.waste.selectors import recurrence
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db]
S = 10**9


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
def price_36(db: None) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))


@pytest.fixture
def price_l4(db: None) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="L4", usd_per_gpu_hour=Decimal("0.82"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))


def starved_run(
    tenant: Tenant, start: datetime, *, n: int = 100, step_s: float = 1.0, gpu: str = "NVIDIA H100 80GB HBM3", data_div: int = 5
) -> str:
    """A run of ``n`` steps of ``step_s`` seconds, 1/``data_div`` of each waiting for data (host
    time takes the rest of that fifth), finished and analysed."""
    run_id = tenant.create_run(
        gpu_model=gpu, gpu_count=1, world_size=1, dtype="bf16",
        allocation_start=_iso(start - timedelta(seconds=1)), started_at=_iso(start),
    )  # fmt: skip
    t0 = int(start.timestamp() * S)
    step_ns = int(step_s * S)
    body: dict[str, Any] = {
        "rank": 0,
        "steps": {
            "step": list(range(n)),
            "t_start_ns": [t0 + i * step_ns for i in range(n)],
            "dur_ns": [step_ns] * n,
            "data_ns": [step_ns // data_div] * n,
            "forward_ns": [step_ns // 5] * n,
            "backward_ns": [step_ns * 2 // 5] * n,
            "optimizer_ns": [step_ns // 10] * n,
            "flops": [0.5 * 989.4e12 * 0.35 * step_s] * n,
        },
    }
    assert tenant.post_steps(run_id, body).status_code == 200
    event = {"id": "finish", "kind": "finish", "t_ns": t0 + n * step_ns, "status": "finished"}
    assert tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json").status_code == 200
    assert services.run_analyze(run_id=uuid.UUID(run_id)) is not None
    return run_id


def _recurrence_of(run_id: str) -> dict[str, Any]:
    row = RunAnalysis.objects.select_related("run").get(run_id=run_id)
    return recurrence(run=row.run, row=row)


def test_a_run_followed_by_more_runs_of_its_project_recurs_as_of_reading(owner: Tenant, price_36: None) -> None:
    now = timezone.now()
    first = starved_run(owner, now - timedelta(days=20))
    for days in (15, 10, 5):  # the project ran three more times after it, none before it
        starved_run(owner, now - timedelta(days=days))
    rec = _recurrence_of(first)
    assert rec["kind"] == "recurring" and rec["basis"] == "as_of_now"
    assert rec["other_runs_30d"] == 3
    assert rec["project_gpu_hours_30d"] == pytest.approx(4 * 101 / 3600)


def test_a_run_alone_in_its_live_project_is_one_off(owner: Tenant, price_36: None) -> None:
    run_id = starved_run(owner, timezone.now() - timedelta(days=2))
    rec = _recurrence_of(run_id)
    assert rec["kind"] == "one_off" and rec["other_runs_30d"] == 0


def test_runs_more_than_30_days_before_reading_no_longer_make_a_live_project_recur(owner: Tenant, price_36: None) -> None:
    now = timezone.now()
    old = starved_run(owner, now - timedelta(days=45))
    recent = starved_run(owner, now - timedelta(days=3))
    assert _recurrence_of(recent)["kind"] == "one_off"  # the run 45 days ago is outside the month as of now
    # ...and the old run, read today, counts the project's month as of now: the recent run recurs with it.
    assert _recurrence_of(old)["kind"] == "recurring"


def test_a_quiet_project_counts_the_30_days_before_the_run_ended(owner: Tenant, price_36: None) -> None:
    now = timezone.now()
    earlier = starved_run(owner, now - timedelta(days=70))
    later = starved_run(owner, now - timedelta(days=60))
    rec = _recurrence_of(later)
    assert rec["basis"] == "before_run_end" and rec["kind"] == "recurring" and rec["other_runs_30d"] == 1
    assert _recurrence_of(earlier)["kind"] == "one_off"  # nothing before it, and the project is quiet


def test_monthly_saving_uses_the_recurrence_as_of_reading(owner: Tenant, price_36: None) -> None:
    now = timezone.now()
    starved_run(owner, now - timedelta(days=25), data_div=20)  # a peer that waited less: the evidence
    first = starved_run(owner, now - timedelta(days=20))
    starved_run(owner, now - timedelta(days=10))
    body = owner.client.get(f"/api/v1/runs/{first}/analysis").json()
    priced = [r for r in body["recommendations"] if r["saving_usd"]]
    assert priced, body["recommendations"]
    for r in priced:
        assert r["recurrence"]["kind"] == "recurring" and r["recurrence"]["other_runs_30d"] == 2
        hours = r["recurrence"]["project_gpu_hours_30d"]
        assert r["saving_usd_per_month"] == pytest.approx(r["saving_usd"] / body["gpu_hours"] * hours)


def test_the_price_per_gpu_hour_comes_from_unrounded_dollars(owner: Tenant, price_l4: None) -> None:
    # 7 billed seconds at $0.82/h: $0.0016, which rounds to $0.00; the rate over the rounded cost
    # would read $0.00 (and $0.78 on a run of a few cents), the exact dollars give the price.
    run_id = starved_run(owner, timezone.now() - timedelta(hours=1), n=12, step_s=0.5, gpu="NVIDIA L4")
    body = owner.client.get(f"/api/v1/runs/{run_id}/analysis").json()
    assert body["cost_usd"] == 0.0
    assert body["cost_exact_usd"] == pytest.approx(0.82 * 7 / 3600)
    assert body["usd_per_gpu_hour"] == pytest.approx(0.82)
    cats = body["categories"]
    assert sum(c["usd_exact"] for c in cats.values()) == pytest.approx(body["cost_exact_usd"])
    assert cats["data_stall"]["usd_exact"] == pytest.approx(0.82 * 12 * 0.1 / 3600)


def test_a_run_under_a_cent_says_so_rather_than_nothing_spent(owner: Tenant, price_l4: None) -> None:
    # 20% of every step waits for data on a run that costs a fraction of a cent: its words must
    # follow the time spent, never "Nothing spent on data stall" beside a 20% share.
    run_id = starved_run(owner, timezone.now() - timedelta(hours=1), n=12, step_s=0.5, gpu="NVIDIA L4")
    body = owner.client.get(f"/api/v1/runs/{run_id}/analysis").json()
    data = body["categories"]["data_stall"]
    assert data["usd"] == 0.0 and data["usd_exact"] > 0
    assert "Nothing spent" not in data["evidence"]["summary"]
    assert "100.00 ms per step on waiting for data" in data["evidence"]["summary"]
    rec = next(r for r in body["recommendations"] if r["code"] == "DATA_STALL")
    assert rec["saving_usd"] is None and "under a cent" in rec["explain"]["formula"]
    texts = [e["observation"] for e in rec["evidence"]]
    assert not any("Nothing spent" in t for t in texts)
    assert "data stall, cost: under a cent" in texts


def test_the_project_rate_of_short_runs_is_the_price_not_their_rounded_cents(owner: Tenant, db: None) -> None:
    from phantomhub.waste.baseline import project_volume

    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("4.80"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    now = timezone.now()
    # Six CI runs of 8 billed seconds: $0.010667 each, rounded to $0.01; over their hours the
    # rounded cents read $4.50/GPU-h, the unrounded dollars the $4.80 price.
    ids = [starved_run(owner, now - timedelta(hours=h), n=7) for h in range(6, 0, -1)]
    row = RunAnalysis.objects.select_related("run").get(run_id=ids[-1])
    volume = project_volume(run=row.run, row=row)
    assert volume.project_usd_30d == pytest.approx(0.06)
    assert volume.project_usd_30d / volume.project_gpu_hours_30d == pytest.approx(4.50)
    assert volume.usd_per_gpu_hour_30d == pytest.approx(4.80)


def test_evidence_writes_seconds_as_the_pages_do() -> None:
    from phantomhub.waste.core.evidence import seconds_text

    # format.ts formatSeconds: never "133.5 s" in a sentence beside "2 m 14 s" on the page.
    assert seconds_text(133.5) == "2 m 14 s"
    assert seconds_text(12.34) == "12.3 s"
    assert seconds_text(4.25) == "4.25 s"
    assert seconds_text(3725) == "1 h 02 m"

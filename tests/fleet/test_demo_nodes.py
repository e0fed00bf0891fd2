"""The demo's nodes go in through the real HTTP API and fill every class of the Fleet page; a second
seeding only adds what is new; the synthetic invoice is matched to them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from phantomhub.accounts.services import project_get_or_create, team_get_or_create
from phantomhub.demo.nodes import LAYOUT, focus_invoice, nodes_seed
from phantomhub.demo.post import local_server
from phantomhub.fleet.focus import focus_import
from phantomhub.fleet.models import GpuSample, InvoiceLine
from phantomhub.fleet.selectors import fleet_summary, idle_held_now
from phantomhub.periods import range_period

NOW = datetime(2026, 11, 10, 12, 0, 7, tzinfo=UTC)


@pytest.mark.slow  # seconds: make test runs it, make check does not
@pytest.mark.django_db(transaction=True)
def test_demo_nodes_fill_the_fleet_page_and_a_second_seeding_adds_only_new_samples(
    h100_price, server_threads_close_connections
) -> None:
    for team in ("research", "vision", "recsys", "speech", "nlp"):
        team_get_or_create(slug=team)
    project_get_or_create(team=team_get_or_create(slug="speech"), slug="asr")
    project_get_or_create(team=team_get_or_create(slug="nlp"), slug="llm-pretrain")
    with local_server() as address:
        nodes_seed(address, lambda _: None, now=NOW, history=timedelta(hours=3))
        first = GpuSample.objects.count()
        nodes_seed(address, lambda _: None, now=NOW + timedelta(minutes=1), history=timedelta(hours=3))
    assert first == 24 * (3 * 3600 // 15 + 1)  # 3 nodes x 8 GPUs, three hours of 15 s samples
    assert GpuSample.objects.count() == first + 24 * 4  # one more minute
    summary = fleet_summary(period=range_period("2026-11-10..2026-11-10"))
    assert all(summary["classes"][c]["usd"] > 0 for c in ("instrumented", "busy_uninstrumented", "idle_held", "empty"))
    assert summary["coverage"] == pytest.approx(4 / 24, abs=1e-3)
    idle = idle_held_now(now=NOW + timedelta(minutes=1, seconds=5))
    assert {(r["node"], r["holder"], r["team"]) for r in idle} == {
        ("gpu-demo-02", "pod research-notebooks/jupyter-alice", "research"),
        ("gpu-demo-03", "slurm job 90177 (carol, recsys)", "recsys"),
    }
    assert len(idle) == 5 and all(r["since"] == datetime(2026, 11, 10, 9, 0, tzinfo=UTC) for r in idle)
    lines = InvoiceLine.objects.filter(resource_id__startswith="i-0demo")
    assert lines.count() == 3 and all(line.node is not None for line in lines)


def test_the_shipped_synthetic_invoice_is_what_the_generator_writes(db: None) -> None:
    from datetime import date
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "phantomhub" / "demo" / "focus_synthetic.csv"
    days = [date(2026, 11, 1) + timedelta(days=i) for i in range(3)]
    assert shipped.read_text() == focus_invoice(days)
    result = focus_import(text=shipped.read_text())
    assert result.errors == [] and result.lines == 3 * (len(LAYOUT) + 1)

"""Predictions that come true: the saving PhantomHub predicts for a fixable waste is what the fix saves.

For each case of bench/savings_cases.py (a starved input pipeline, a host sync every step, a slow
start-up, a slow rank in 2- and 4-rank DistributedDataParallel over gloo), real CPU PyTorch training
jobs run through the agent against a live server: healthy peer runs, run A with the waste, then
run B with the fix. The matching recommendation's ``saving_usd`` in A's analysis must be within
the case's band (±20%; ±15% for a straggler, whole job) of cost(A) - cost(B).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("phantomhub_agent")

from bench.savings_cases import CASES, case_prove, details, table
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.alone]


@pytest.fixture
def priced(db: None) -> None:
    PriceEntry.objects.all().delete()
    # $10 a second: a second of waste is 1,000 cents, so cents do not blur a 20% band.
    price_set(gpu="L4", usd_per_gpu_hour=Decimal("36000"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_predicted_saving_is_what_the_fix_realizes(case: str, live_server: Any, priced: None, tmp_path: Path) -> None:
    result = case_prove(case, server=live_server.url, team="ml", workdir=tmp_path)
    print("\n" + table([result]) + "\n" + details(result))
    assert result.a.steps == result.b.steps
    assert result.a.recommendation is not None, f"{result.code} did not fire on run A"
    assert result.predicted_usd is not None, f"{result.code} on run A has no saving_usd"
    # The fix must really remove most of the injected waste, or the case proves nothing.
    usd_per_s = result.a.cost_usd / result.a.billed_s
    assert result.realized_usd > 0.8 * result.a.injected_s * usd_per_s
    claimed = {r["code"]: r["claims"] for r in result.a.recommendations if r["saving_usd"]}
    assert result.predicted_usd == pytest.approx(result.realized_usd, rel=CASES[case].band), (
        f"{result.code} predicted ${result.predicted_usd:,.2f}, the fix realized ${result.realized_usd:,.2f}; "
        f"run A's recommendations claimed {claimed}"
    )

"""The demo's budgets (phantomhub/demo/budgets.py): sized from each target's last 30 days of
spend, in force from two months back, seeded once."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from phantomhub.demo.budgets import budgets_seed
from phantomhub.planning.models import Budget
from phantomhub.waste.models import ProjectDay
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db


def test_the_demo_sizes_its_budgets_from_recent_spend_and_seeds_them_once(owner: Tenant, outsider: Tenant) -> None:
    today = timezone.now().date()
    for tenant, usd in ((owner, 100), (outsider, 40)):
        project = tenant.project
        ProjectDay.objects.create(day=today - timedelta(days=3), project=project, team=project.team, cost_usd=Decimal(usd))
        ProjectDay.objects.create(day=today - timedelta(days=45), project=project, team=project.team, cost_usd=Decimal(999))
    said: list[str] = []
    budgets_seed(said.append)
    by_target = {(b.scope, b.team.slug if b.team else str(b.project), b.gpu_key): b for b in Budget.objects.all()}
    assert by_target[("team", "nlp", "")].amount_usd == Decimal(80)  # 80% of the last 30 days
    assert by_target[("team", "vision", "")].amount_usd == Decimal(60)  # 150%
    assert by_target[("project", "llm-pretrain", "H100-SXM")].amount_usd == Decimal(110)
    assert by_target[("project", "detector", "")].amount_usd == Decimal(36)
    first = (today.replace(day=1) - timedelta(days=40)).replace(day=1)
    assert {b.effective_from for b in by_target.values()} == {first} and said == [f"demo: {len(by_target)} budgets"]
    budgets_seed(said.append)  # a second seeding adds nothing
    assert Budget.objects.count() == len(by_target)

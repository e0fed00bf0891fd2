"""The demo's budgets: a few teams and projects, sized from their own spend of the last 30 days so
the Budgets page shows one over its forecast and others within (docs/budgets.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Sum
from django.utils import timezone

from phantomhub.accounts.models import Project, Team
from phantomhub.planning.models import Budget
from phantomhub.planning.services import BudgetFields, budget_create
from phantomhub.waste.models import ProjectDay

# (scope, slug, GPU model, budget as a share of the last 30 days' spend)
DEMO_BUDGETS = [
    ("team", "nlp", "", Decimal("0.8")),  # under-budgeted: over in a month like the last 30 days
    ("team", "vision", "", Decimal("1.5")),
    ("team", "research", "", Decimal("1.2")),
    ("project", "llm-pretrain", "H100-SXM", Decimal("1.1")),
    ("project", "detector", "", Decimal("0.9")),
]


def budgets_seed(say: Callable[[str], None]) -> None:
    if Budget.objects.exists():
        return
    today = timezone.now().date()
    since = today - timedelta(days=30)
    first = (today.replace(day=1) - timedelta(days=40)).replace(day=1)  # two months back: past months have figures too
    made = 0
    for scope, slug, gpu, share in DEMO_BUDGETS:
        days = ProjectDay.objects.filter(day__gte=since)
        team = Team.objects.filter(slug=slug).first() if scope == "team" else None
        project = Project.objects.filter(slug=slug).first() if scope == "project" else None
        if team is None and project is None:
            continue
        spend = days.filter(**({"project__team": team} if team else {"project": project})).aggregate(s=Sum("cost_usd"))["s"]
        amount = (Decimal(spend or 0) * share).quantize(Decimal("1"), rounding=ROUND_HALF_UP) or Decimal(1000)
        budget_create(
            fields=BudgetFields(scope=scope, team=team, project=project, gpu_key=gpu, amount_usd=amount,
                                effective_from=first, effective_to=None, note="demo"),
        )  # fmt: skip
        made += 1
    say(f"demo: {made} budgets")

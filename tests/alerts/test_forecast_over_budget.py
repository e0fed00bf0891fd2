"""The forecast_over_budget rule: a budget's month-end forecast crossing it fires once through the
webhook path to a local receiver, names the recoverable dollars that would bring it under, and
resolves once when the forecast falls back under the budget."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from phantomhub.alerts import services
from phantomhub.alerts.models import AlertRule, AlertState
from phantomhub.alerts.rules import params_clean
from phantomhub.errors import ApiError
from phantomhub.planning.models import Budget
from phantomhub.waste.models import ProjectDay
from tests.alerts.conftest import Receiver
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 15, 12, tzinfo=UTC)  # 14 closed days, 16 whole days left after today


def _days(owner: Tenant, usd: int, recoverable: int) -> None:
    project = owner.project
    for i in range(14):
        ProjectDay.objects.update_or_create(
            day=date(2026, 3, 1) + timedelta(days=i),
            project=project,
            defaults={"team": project.team, "cost_usd": Decimal(usd), "recoverable_usd": Decimal(recoverable)},
        )


def test_a_forecast_over_budget_fires_once_and_resolves_once_through_the_webhook(owner: Tenant, receiver: Receiver) -> None:
    budget = Budget.objects.create(scope="project", project=owner.project, amount_usd=1000, effective_from=date(2026, 1, 1))
    rule = AlertRule.objects.create(
        name="over budget", kind="forecast_over_budget", scope="project", project=owner.project, for_s=60,
        webhook_url=receiver.url,
    )  # fmt: skip
    _days(owner, usd=10, recoverable=4)  # forecast 30 days x $10 = $300: under
    services.alerts_evaluate(now=NOW)
    assert not AlertState.objects.exists() and receiver.got == []

    _days(owner, usd=50, recoverable=20)  # forecast $700 spent + 16 x $50 = $1,500: over by $500
    services.alerts_evaluate(now=NOW)
    assert AlertState.objects.get().state == "pending" and receiver.got == []
    services.alerts_evaluate(now=NOW + timedelta(seconds=61))
    services.alerts_evaluate(now=NOW + timedelta(seconds=120))
    [fired] = receiver.wait_for(1, timeout_s=5)
    body = fired.json
    assert body["event"] == "firing" and body["rule"]["kind"] == "forecast_over_budget"
    assert body["subject"]["key"] == f"budget:{budget.pk}:2026-03"
    assert body["figure"] == {"name": "forecast_usd", "value": 1500.0, "threshold": 1000.0}
    evidence = body["evidence"]
    assert (evidence["spent_usd"], evidence["over_by_usd"]) == (700.0, 500.0)
    # The rest of the month's $800 at the month's recoverable share (20/50) is $320: all of it, not enough.
    assert (evidence["recoverable_usd"], evidence["recoverable_ahead_usd"], evidence["cut_usd"]) == (280.0, 320.0, 320.0)
    assert evidence["cut_enough"] is False
    assert evidence["forecast_p10_usd"] <= 1500.0 <= evidence["forecast_p90_usd"]
    assert "recovering $320.00 of recoverable spend" in body["summary"]

    budget.amount_usd = Decimal(1400)  # the recoverable $320 of the rest would now bring it under
    budget.save()
    services.alerts_evaluate(now=NOW + timedelta(seconds=180))
    assert len(receiver.got) == 1  # still firing, told once (deliveries are attempted inside the evaluation)
    budget.amount_usd = Decimal(2000)
    budget.save()
    services.alerts_evaluate(now=NOW + timedelta(seconds=240))
    services.alerts_evaluate(now=NOW + timedelta(seconds=300))
    got = receiver.wait_for(2, timeout_s=5)
    assert [g.json["event"] for g in got] == ["firing", "resolved"]
    assert AlertState.objects.get().state == "resolved"
    assert rule.deliveries.count() == 2


def test_a_team_rule_covers_the_teams_budget_and_its_projects_not_anothers(owner: Tenant, outsider: Tenant) -> None:
    nlp = owner.project.team
    Budget.objects.create(scope="team", team=nlp, amount_usd=1, effective_from=date(2026, 3, 1))
    Budget.objects.create(scope="project", project=owner.project, amount_usd=1, effective_from=date(2026, 3, 1))
    Budget.objects.create(scope="project", project=outsider.project, amount_usd=1, effective_from=date(2026, 3, 1))
    _days(owner, usd=50, recoverable=0)
    AlertRule.objects.create(name="nlp", kind="forecast_over_budget", scope="team", team=nlp, for_s=0)
    services.alerts_evaluate(now=NOW)
    states = AlertState.objects.filter(state="firing")
    assert sorted(s.subject_label for s in states) == ["project llm-pretrain budget for 2026-03", "team nlp budget for 2026-03"]


def test_over_pct_is_a_bounded_threshold_of_the_kind() -> None:
    assert params_clean("forecast_over_budget", {"over_pct": 10}) == {"over_pct": 10.0}
    with pytest.raises(ApiError) as refused:
        params_clean("forecast_over_budget", {"over_pct": -1})
    assert "params.over_pct" in refused.value.fields

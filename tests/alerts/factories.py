"""Objects the access matrix (tests/test_access_matrix.py) needs for the alerts endpoints."""

from __future__ import annotations

from typing import Any

from phantomhub.accounts.models import Team
from phantomhub.alerts.models import AlertRule, AlertState, RuleKind, Scope

MATRIX_RULE = {"name": "matrix", "kind": "waste_rate", "scope": "project", "project": "llm-pretrain", "params": {"share": 0.5}}


def matrix_kwargs(name: str) -> dict[str, Any]:
    """URL kwargs of the alerts endpoints: a rule of the owner's team (nlp) and one alert of it."""
    if name not in ("alerts-rule", "alerts-rule-test", "alerts-state"):
        return {}
    rule = AlertRule.objects.create(
        name="matrix", kind=RuleKind.WASTE_RATE, scope=Scope.TEAM, team=Team.objects.get(slug="nlp"), params={"share": 0.5}
    )
    if name == "alerts-state":
        state = AlertState.objects.create(rule=rule, subject="run:matrix", subject_label="matrix", state="firing")
        return {"state_id": state.pk}
    return {"rule_id": rule.pk}

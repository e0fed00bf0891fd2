"""The idle-GPU rule on the fleet collector's own classification: a node posts an hour of samples
(tests/fleet/test_ground_truth.py: GPU 2 held by a Slurm job of team vision without computing)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from phantomhub.accounts.models import Team
from phantomhub.alerts import services
from phantomhub.alerts.models import AlertRule, AlertState
from phantomhub.fleet.services import rules_replace
from tests.fleet.conftest import HOUR_START, h100_price, node_client, raw_days_for_fixed_dates, teams  # noqa: F401
from tests.fleet.test_ground_truth import post_hour, rules

pytestmark = pytest.mark.django_db


def test_a_gpu_idle_held_longer_than_n_minutes_fires_for_its_team(node_client, h100_price, teams) -> None:  # noqa: F811
    rules_replace(rules=rules(teams))
    post_hour(node_client)
    now = HOUR_START + timedelta(hours=1, seconds=10)  # GPU 2 idle-held since HOUR_START + 15 s
    vision = AlertRule.objects.create(
        name="idle", kind="idle_gpu", scope="team", team=Team.objects.get(slug="vision"), for_s=30 * 60
    )
    nlp = AlertRule.objects.create(name="idle nlp", kind="idle_gpu", scope="team", team=Team.objects.get(slug="nlp"), for_s=60)
    longer = AlertRule.objects.create(name="idle 2h", kind="idle_gpu", for_s=2 * 3600)
    services.alerts_evaluate(now=now)
    s = AlertState.objects.get(rule=vision)
    assert (s.subject, s.state, s.usd_per_hour) == ("gpu:gpu-a-17:2", "firing", 3.6)
    assert s.value == pytest.approx(3600 - 5, abs=1) and s.pending_since == HOUR_START + timedelta(seconds=15)
    assert "slurm job 12345" in s.subject_label
    assert not AlertState.objects.filter(rule=nlp).exists()  # not the nlp team's GPU
    assert AlertState.objects.get(rule=longer).state == "pending"
    services.alerts_evaluate(now=now + timedelta(hours=1))  # the node stopped reporting: released
    assert AlertState.objects.get(rule=vision).state == "resolved"

"""GET /metrics: Prometheus text computed from the database."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

from phantomhub.telemetry.models import RunRank
from phantomhub.waste.sweeps import analysis_sweep
from tests.conftest import Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _values(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(phantomhub_[a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)}


def test_metrics_follow_the_stored_state(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(25))
    RunRank.objects.filter(run_id=run_id).update(counters={"dropped_steps": 3})
    response = Client().get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=0.0.4")
    before = _values(response.content.decode())
    assert before['phantomhub_runs{status="running"}'] == 1
    assert before["phantomhub_runs_dirty"] == 1 and before["phantomhub_analysis_lag_seconds"] > 0
    assert before["phantomhub_step_rows_total"] == 25 and before["phantomhub_agent_dropped_steps_total"] == 3
    analysis_sweep(inline=True)
    after = _values(Client().get("/metrics").content.decode())
    assert after["phantomhub_runs_dirty"] == 0 and after["phantomhub_analysis_lag_seconds"] == 0
    assert after["phantomhub_rollup_days_pending"] == 0


@override_settings(METRICS_TOKEN="s3cret")
def test_metrics_can_require_a_token(db: None) -> None:
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_one_absurd_stored_counter_does_not_break_every_scrape(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.post_steps(run_id, steps_body(3))
    other = owner.create_run()
    owner.post_steps(other, steps_body(3))
    RunRank.objects.filter(run_id=run_id).update(counters={"dropped_steps": 10**400})
    RunRank.objects.filter(run_id=other).update(counters={"dropped_steps": 7})
    response = Client().get("/metrics")
    assert response.status_code == 200
    assert _values(response.content.decode())["phantomhub_agent_dropped_steps_total"] == 7

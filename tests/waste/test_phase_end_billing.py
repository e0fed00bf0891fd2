"""A run's last sign of life is where its last phase ends, not where it starts: a run killed while
(or right after) saving a checkpoint is billed through the save, which is checkpoint time, not the
next attempt's restart (tests/waste/test_lost_work_ground_truth.py found it)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from phantomhub.waste import services
from phantomhub.waste.sweeps import runs_mark_crashed
from tests.conftest import Tenant
from tests.waste.test_analysis_service import T0_NS, known_steps, make_run, price_36  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
S = 10**9


def test_a_silent_run_is_billed_through_its_last_phases_end(owner: Tenant, price_36: None) -> None:  # noqa: F811
    run_id = make_run(owner)
    assert owner.post_steps(run_id, known_steps(5)).status_code == 200  # steps end at T0 + 5 s
    save = {"id": "save", "kind": "phase", "name": "checkpoint", "t_ns": T0_NS + 5 * S, "t_start_ns": T0_NS + 5 * S,
            "dur_ns": 3 * S, "data": {"step": 4}}  # fmt: skip
    assert owner.client.post(f"/api/v1/runs/{run_id}/events", {"events": [save]}, format="json").status_code == 200
    runs_mark_crashed(now=timezone.now() + timedelta(days=1))
    row = services.run_analyze(run_id=uuid.UUID(run_id))
    assert row is not None
    assert row.result["end_ns"] == T0_NS + 8 * S  # the save's end, not its start
    idle = {f["label"]: f["gpu_seconds"] for f in row.result["idle"] if f["gpu_seconds"]}
    assert idle == {"startup": 10.0, "phase:checkpoint": 3.0}

"""Deriving as samples arrive gives the same rows, to the nanosecond and the cent, as deriving once
from every raw sample; a late sample (older than what is derived) rebuilds the node-day."""

from __future__ import annotations

from typing import Any

import pytest

from phantomhub.fleet.derive import fleet_derive_pending, node_day_derive
from phantomhub.fleet.models import DayDerived, FleetDay, Node
from tests.fleet.conftest import NS, T0, node_body, node_meta
from tests.fleet.test_ground_truth import OWNERS

pytestmark = pytest.mark.django_db


def varied(gpu: int, t: int) -> tuple[float, int, list[tuple[int, int, int | None]]]:
    """Each GPU changes class every few minutes, so rows split and prices fall on odd cents."""
    phase = (t // (240 * NS) + gpu) % 4
    if phase == 0:
        return 90.0, 2**34, [(100 + gpu, 2**34, 0)]
    if phase == 1:
        return 40.0, 2**34, [(200 + gpu, 2**34, 1)]
    if phase == 2:
        return 1.0, 2**34, [(300 + gpu, 2**34, 2)]
    return 0.0, 0, []


def snapshot() -> list[tuple[Any, ...]]:
    return sorted(FleetDay.objects.values_list("day", "cls", "holder_id", "gpu_ns", "exact_units", "cost_cents"))


def post(client: Any, times: list[int]) -> None:
    body = node_body(t_ns=times, activity=varied, owners=OWNERS, node=node_meta())
    assert client.post("/api/v1/nodes/samples", body, format="json").status_code == 200


def test_deriving_as_samples_arrive_equals_deriving_once(node_client: Any, h100_price: Any, teams: Any) -> None:
    times = [T0 + (i + 1) * 15 * NS for i in range(200)]
    times[120:] = [t + 700 * NS for t in times[120:]]  # a gap: "not reporting"
    for start in range(0, len(times), 17):
        post(node_client, times[start : start + 17])
        fleet_derive_pending()
    as_they_came = snapshot()
    node = Node.objects.get()
    DayDerived.objects.all().delete()
    node_day_derive(node=node, day=FleetDay.objects.first().day)  # from every raw sample
    assert snapshot() == as_they_came
    assert sum(r[-1] for r in as_they_came) > 0


def test_a_late_sample_rebuilds_the_day(node_client: Any, h100_price: Any, teams: Any) -> None:
    every = [T0 + (i + 1) * 15 * NS for i in range(80)]
    post(node_client, every[:30] + every[40:])  # ten samples missing, sent later (from a spool)
    fleet_derive_pending()
    post(node_client, every[30:40])
    fleet_derive_pending()
    late = snapshot()
    FleetDay.objects.all().delete()
    DayDerived.objects.all().delete()
    node_day_derive(node=Node.objects.get(), day=late[0][0])
    assert snapshot() == late
    assert sum(r[3] for r in late if r[1] != 9) == 4 * 80 * 15 * NS  # the gap is filled: every second priced once


def test_raw_samples_past_retention_are_purged_and_their_days_stay(
    node_client: Any, h100_price: Any, teams: Any, settings: Any
) -> None:
    from phantomhub.fleet.models import GpuSample, ProcessSample
    from phantomhub.fleet.services import raw_samples_purge

    post(node_client, [T0 + (i + 1) * 15 * NS for i in range(40)])
    fleet_derive_pending()
    before = snapshot()
    settings.FLEET_RAW_DAYS = 1
    assert raw_samples_purge(now_ns=T0 + 86_400 * NS) == 0  # a day later: still within the day kept
    raw = GpuSample.objects.count() + ProcessSample.objects.count()
    assert raw == 4 * 40 + 3 * 40  # in `varied`, three GPUs of four hold a process at any time
    assert raw_samples_purge(now_ns=T0 + 3 * 86_400 * NS) == raw
    assert not GpuSample.objects.exists() and not ProcessSample.objects.exists()
    assert snapshot() == before  # the derived rows stay

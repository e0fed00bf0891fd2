"""Ground truth: a node with four GPUs whose classes over an hour are known, one per class, comes
back priced exactly per class and per team; what it does now is what the Fleet page shows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from phantomhub.accounts.models import Team
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import FleetDay, GpuClass
from phantomhub.fleet.selectors import fleet_summary, idle_held_now
from phantomhub.fleet.services import RuleInput, rules_replace
from phantomhub.periods import range_period
from tests.fleet.conftest import GIB, HOUR_START, NS, T0, node_body, node_meta

pytestmark = pytest.mark.django_db

OWNERS = [
    {"kind": "run", "project": "llm-pretrain", "run_id": "r-1", "server_run_id": None},
    {"kind": "k8s", "namespace": "ml-team", "pod": "train-abc", "labels": {"team": "nlp"}},
    {"kind": "slurm", "job_id": "12345", "account": "vision", "partition": "gpu", "user": "alice"},
]


def one_per_class(gpu: int, t: int) -> tuple[float, int, list[tuple[int, int, int | None]]]:
    if gpu == 0:  # a PhantomHub run: instrumented
        return 90.0, 60 * GIB, [(1000, 60 * GIB, 0)]
    if gpu == 1:  # a pod computing without the agent
        return 70.0, 40 * GIB, [(2000, 40 * GIB, 1)]
    if gpu == 2:  # a Slurm job holding memory, not computing
        return 0.0, 20 * GIB, [(3000, 20 * GIB, 2)]
    return 0.0, 5 * 2**20, []  # nothing on it


def post_hour(client: APIClient, *, chunk: int = 20) -> list[dict[str, Any]]:
    times = [T0 + (i + 1) * 15 * NS for i in range(240)]  # 240 samples of 15 s cover the hour exactly
    answers = []
    for start in range(0, len(times), chunk):
        body = node_body(t_ns=times[start : start + chunk], activity=one_per_class, owners=OWNERS, node=node_meta())
        response = client.post("/api/v1/nodes/samples", body, format="json")
        assert response.status_code == 200, response.content
        answers.append(response.json())
    return answers


def rules(teams: dict[str, Team]) -> list[RuleInput]:
    return [
        RuleInput("k8s_label", "team", "nlp", teams["nlp"], None),
        RuleInput("slurm_account", "", "vis*", teams["vision"], None),
    ]


def cents_by(field: str) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for row in FleetDay.objects.all():
        key = getattr(row, field)
        out[key] = out.get(key, 0) + row.cost_cents
    return out


def test_four_gpus_one_per_class_are_priced_exactly_per_class_and_team(node_client, h100_price, teams) -> None:
    rules_replace(rules=rules(teams))
    answers = post_hour(node_client)
    assert sum(a["stored"]["gpu"] for a in answers) == 4 * 240
    assert fleet_derive_pending() >= 1
    by_class = cents_by("cls")
    # $3.60 per GPU-hour, one GPU-hour each: exactly 360 cents per class, none unknown.
    assert by_class == {
        GpuClass.INSTRUMENTED: 360,
        GpuClass.BUSY_UNINSTRUMENTED: 360,
        GpuClass.IDLE_HELD: 360,
        GpuClass.EMPTY: 360,
    }
    assert {r.cls: r.gpu_ns for r in FleetDay.objects.all()} == dict.fromkeys(by_class, 3600 * NS)
    per_team = {}
    for row in FleetDay.objects.all():
        per_team[(row.team.slug if row.team else None, row.cls)] = row.cost_cents
    assert per_team == {
        ("nlp", GpuClass.INSTRUMENTED): 360,  # the run's project is nlp's
        ("nlp", GpuClass.BUSY_UNINSTRUMENTED): 360,  # by the k8s label rule
        ("vision", GpuClass.IDLE_HELD): 360,  # by the Slurm account rule
        (None, GpuClass.EMPTY): 360,  # nobody holds an empty GPU
    }
    summary = fleet_summary(period=range_period("2026-09-21..2026-09-21"))
    assert summary["coverage"] == 0.25
    assert summary["billed_gpu_hours"] == 4.0
    assert summary["cost_usd"] == 14.40
    assert {k: v["usd"] for k, v in summary["classes"].items()} == {
        "instrumented": 3.6, "busy_uninstrumented": 3.6, "idle_held": 3.6, "empty": 3.6, "unknown": 0.0,
    }  # fmt: skip
    assert summary["nodes"][0]["cost_usd"] == 14.40


def test_a_replayed_request_changes_nothing(node_client, h100_price, teams) -> None:
    post_hour(node_client)
    again = post_hour(node_client)
    assert all(a["stored"] == {"gpu": 0, "processes": 0} for a in again)
    assert sum(a["duplicates"] for a in again) == 4 * 240 + 3 * 240  # GPU rows and process rows
    fleet_derive_pending()
    assert sum(cents_by("cls").values()) == 4 * 360


def test_changing_rules_re_attributes_without_rescanning(node_client, h100_price, teams) -> None:
    post_hour(node_client)
    fleet_derive_pending()
    assert cents_by("team_id") == {None: 3 * 360, teams["nlp"].pk: 360}  # only the run is attributed
    rules_replace(rules=rules(teams))
    assert cents_by("team_id") == {None: 360, teams["nlp"].pk: 720, teams["vision"].pk: 360}
    rules_replace(rules=[])
    assert cents_by("team_id") == {None: 3 * 360, teams["nlp"].pk: 360}


def test_idle_held_now_names_the_holder_and_since_when(node_client, h100_price, teams) -> None:
    rules_replace(rules=rules(teams))
    post_hour(node_client)
    now = HOUR_START + timedelta(hours=1, seconds=10)
    rows = idle_held_now(now=now)
    assert rows == [
        {
            "node": "gpu-a-17", "gpu_index": 2, "holder": "slurm job 12345 (alice, vision)", "team": "vision",
            "project": None, "since": HOUR_START + timedelta(seconds=15), "usd_per_hour": 3.6,
        }
    ]  # fmt: skip
    assert idle_held_now(now=now, min_minutes=60) == []  # held 59.9 minutes
    assert idle_held_now(now=now + timedelta(hours=1)) == []  # the node stopped reporting: not "now"


def test_a_gap_is_unknown_and_not_priced(node_client, h100_price, teams) -> None:
    times = [T0 + 15 * NS, T0 + 30 * NS, T0 + 630 * NS]  # a 600 s silence after the second sample
    body = node_body(t_ns=times, activity=one_per_class, owners=OWNERS, node=node_meta())
    assert node_client.post("/api/v1/nodes/samples", body, format="json").status_code == 200
    fleet_derive_pending()
    unknown = FleetDay.objects.filter(cls=GpuClass.UNKNOWN)
    assert sum(r.gpu_ns for r in unknown) == 4 * (600 - 30) * NS
    assert sum(r.cost_cents for r in unknown) == 0
    # each GPU: 15 + 15 + 30 (capped at twice the interval) seconds priced: 60 GPU-s = 6 cents
    assert sum(r.cost_cents for r in FleetDay.objects.exclude(cls=GpuClass.UNKNOWN)) == 4 * 6

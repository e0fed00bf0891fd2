"""GET /api/v1/portal/compare?runs=a,b: runs side by side, and the config/environment diff."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.portal.compare import flatten, key_diff
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import sweeps
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
S = 10**9
MS = 10**6
H100_BF16 = 989.4e12
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def price_36(db: None) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))


def _run(tenant: Tenant, name: str, start: datetime, data_ms: int, *, config: Any, environment: Any, n: int = 200) -> str:
    run_id = tenant.create_run(
        name=name, gpu_model="H100-SXM", gpu_count=8, dtype="bf16", config=config, environment=environment,
        allocation_start=(start - timedelta(seconds=5)).isoformat(), started_at=start.isoformat(),
    )  # fmt: skip
    dur = (data_ms + 20 + 40 + 10 + 4) * MS
    t0 = int(start.timestamp()) * S
    steps = {
        "step": list(range(n)),
        "t_start_ns": [t0 + i * dur for i in range(n)],
        "dur_ns": [dur] * n,
        "data_ns": [data_ms * MS] * n,
        "forward_ns": [20 * MS] * n,
        "backward_ns": [40 * MS] * n,
        "optimizer_ns": [10 * MS] * n,
        "flops": [0.25 * H100_BF16 * 0.07] * n,
        "mem_allocated": [20 * 2**30] * n,
        "mem_reserved": [25 * 2**30] * n,
        "mem_peak": [22 * 2**30] * n,
    }
    assert tenant.post_steps(run_id, {"rank": 0, "steps": steps}).status_code == 200
    end = {"id": "end", "kind": "finish", "t_ns": t0 + n * dur, "status": "finished"}
    assert tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [end]}, format="json").status_code == 200
    return run_id


def _person(name: str, *, team: Any = None, finance: bool = False, admin: bool = False) -> APIClient:
    user = User.objects.create_user(name, password="pw")
    if team is not None:
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    if finance or admin:
        Profile.objects.create(user=user, is_finance=finance, is_org_admin=admin)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def world(owner: Tenant, outsider: Tenant, price_36: None) -> dict[str, Any]:
    start = NOW - timedelta(days=1)
    runs = {
        "a": _run(owner, "a", start, 10, config={"optimizer": {"lr": 0.1, "name": "adam"}, "batch": 32},
                  environment={"torch": "2.4.0", "cuda": {"version": "12.4"}}),
        "b": _run(owner, "b", start + timedelta(hours=1), 30,
                  config={"optimizer": {"lr": 0.2, "name": "adam"}, "batch": 32, "amp": True},
                  environment={"torch": "2.5.1", "cuda": {"version": "12.4"}}),
        "c": _run(owner, "c", start + timedelta(hours=2), 5, config={}, environment={}),
        "theirs": _run(outsider, "theirs", start, 10, config={}, environment={}),
    }  # fmt: skip
    sweeps.analysis_sweep(inline=True)
    member = _person("member", team=owner.project.team)
    return {"runs": runs, "member": member, "owner": owner, "outsider": outsider}


def _compare(client: APIClient, *ids: str) -> Any:
    return client.get("/api/v1/portal/compare", {"runs": ",".join(ids)})


def test_two_runs_side_by_side_with_their_config_differences(world: dict[str, Any]) -> None:
    runs, member = world["runs"], world["member"]
    response = _compare(member, runs["a"], runs["b"])
    assert response.status_code == 200, response.content
    body = response.json()
    a, b = body["runs"]
    assert [a["run"]["name"], b["run"]["name"]] == ["a", "b"]
    assert a["analysis_status"] == b["analysis_status"] == "analysed"
    for side, data_ms in ((a, 10), (b, 30)):
        comp = side["analysis"]["composition"]
        step = data_ms + 74
        assert comp["step_ms"] == pytest.approx(step, rel=1e-6)
        assert comp["parts_ms"]["data"] == pytest.approx(data_ms, rel=1e-6)
        assert comp["parts_ms"]["forward"] == pytest.approx(20, rel=1e-6)
        assert comp["parts_ms"]["host"] == pytest.approx(4, rel=1e-6)
        assert comp["shares"]["data"] == pytest.approx(data_ms / step, rel=1e-6)
        assert side["analysis"]["memory"]["peak_bytes_max"] == 22 * 2**30
    # Category dollars are the analysis' own (the run's analysis API), and add up to the cost.
    for side in (a, b):
        analysis = member.get(f"/api/v1/runs/{side['run']['id']}/analysis").json()
        cats = side["analysis"]["categories"]
        assert {c: cats[c]["usd"] for c in cats} == {c: v["usd"] for c, v in analysis["categories"].items()}
        assert sum(v["usd"] for v in cats.values()) == pytest.approx(side["analysis"]["cost_usd"], abs=0.005)
        assert side["analysis"]["mfu"] == analysis["mfu"]
    config = {d["key"]: d["values"] for d in body["config"]["differences"]}
    assert config == {
        "amp": [{"present": False, "value": None}, {"present": True, "value": True}],
        "optimizer.lr": [{"present": True, "value": 0.1}, {"present": True, "value": 0.2}],
    }
    assert body["config"]["same"] == 2  # batch, optimizer.name
    env = {d["key"]: d["values"] for d in body["environment"]["differences"]}
    assert env == {"torch": [{"present": True, "value": "2.4.0"}, {"present": True, "value": "2.5.1"}]}
    assert body["environment"]["same"] == 1


def test_four_runs_and_a_pending_one(world: dict[str, Any], owner: Tenant) -> None:
    runs = world["runs"]
    fresh = owner.create_run(name="fresh")
    body = _compare(world["member"], runs["c"], runs["a"], runs["b"], fresh).json()
    assert [r["run"]["name"] for r in body["runs"]] == ["c", "a", "b", "fresh"]
    assert body["runs"][3]["analysis_status"] == "pending" and body["runs"][3]["analysis"] is None


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ("", "required"),
        ("one", "is not a run id"),
        ("{a}", "compares 2 to 4 runs, not 1"),
        ("{a},{a}", "twice"),
        ("{a},{b},{c},{x},{y}", "compares 2 to 4 runs, not 5"),
    ],
)
def test_a_bad_runs_parameter_is_a_400_naming_it(world: dict[str, Any], runs: str, message: str) -> None:
    ids = world["runs"] | {"x": str(uuid.uuid4()), "y": str(uuid.uuid4())}
    response = world["member"].get("/api/v1/portal/compare", {"runs": runs.format(**ids)})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert set(error["fields"]) == {"runs"} and message in error["fields"]["runs"]


def test_unknown_and_invisible_runs_answer_alike(world: dict[str, Any]) -> None:
    runs, member = world["runs"], world["member"]
    unknown = str(uuid.uuid4())
    for other in (unknown, runs["theirs"]):
        response = _compare(member, runs["a"], other)
        assert response.status_code == 404
        assert response.json()["error"]["fields"] == {"runs": f"run {other} not found"}
    admin = _person("root", admin=True)
    assert _compare(admin, runs["a"], runs["theirs"]).status_code == 200
    assert _compare(_person("fin", finance=True), runs["a"], runs["theirs"]).status_code == 200
    stranger = _person("stranger", team=world["outsider"].project.team)
    assert _compare(stranger, runs["theirs"], runs["a"]).status_code == 404
    assert _compare(world["owner"].client, runs["a"], runs["b"]).status_code == 403  # a project token


def test_flatten_and_key_diff() -> None:
    assert flatten({"a": {"b": {"c": 1}, "d": []}, "e": {}}) == {"a.b.c": 1, "a.d": [], "e": {}}
    diff = key_diff([{"x": [1, 2], "y": 1}, {"x": [1, 2], "y": 1.5}, None])
    assert diff["same"] == 0
    assert [d["key"] for d in diff["differences"]] == ["x", "y"]
    assert diff["differences"][0]["values"][2] == {"present": False, "value": None}

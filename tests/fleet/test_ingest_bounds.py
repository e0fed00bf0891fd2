"""Node telemetry ingest: bad input is a 4xx naming the field and writes nothing; gzip; scopes."""

from __future__ import annotations

import copy
import gzip
import json
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from phantomhub.fleet.models import GpuSample, Node, Owner, ProcessSample
from tests.fleet.conftest import NS, T0, node_body, node_meta
from tests.fleet.test_ground_truth import OWNERS, one_per_class

pytestmark = pytest.mark.django_db
URL = "/api/v1/nodes/samples"


def good() -> dict[str, Any]:
    return node_body(t_ns=[T0 + 15 * NS, T0 + 30 * NS], activity=one_per_class, owners=OWNERS, node=node_meta())


def mutate(path: str, value: Any) -> dict[str, Any]:
    body = copy.deepcopy(good())
    target: Any = body
    *parents, last = path.split(".")
    for part in parents:
        target = target[part]
    if "[" in last:
        name, index = last[:-1].split("[")
        target[name][int(index)] = value
    elif value is KeyError:
        del target[last]
    else:
        target[last] = value
    return body


CASES = [
    ("node", KeyError, "node"),
    ("node.hostname", "", "node.hostname"),
    ("node.gpu_count", -1, "node.gpu_count"),
    ("node.source", "smi", "node.source"),
    ("node.colour", "red", "node.colour"),
    ("interval_s", 0, "interval_s"),
    ("gpus.util_pct[1]", 140.0, "gpus.util_pct[1]"),
    ("gpus.util_pct[0]", "high", "gpus.util_pct[0]"),
    ("gpus.gpu_index[2]", 4, "gpus.gpu_index[2]"),  # the node has 4 GPUs: 0..3
    ("gpus.t_ns[0]", 5, "gpus.t_ns[0]"),
    ("gpus.mem_used_bytes", [1], "gpus.mem_used_bytes"),  # length differs from t_ns
    ("processes.owner[0]", 7, "processes.owner[0]"),  # no such owner
    ("processes.pid[0]", -3, "processes.pid[0]"),
    ("owners", [{"kind": "pet"}], "owners[0].kind"),
    ("owners", [{"kind": "run", "project": "p"}], "owners[0].run_id"),
    ("counters", [1], "counters"),
    ("counters", {f"c{i}": 1 for i in range(33)}, "counters"),
    ("counters", {"sent_batches": -1}, "counters.sent_batches"),
    ("counters", {"sent_batches": 2**63}, "counters.sent_batches"),  # past int64
    ("counters", {"sent_batches": 1.5}, "counters.sent_batches"),
    ("counters", {"sent_batches": True}, "counters.sent_batches"),
    ("counters", {"sent_batches": "3"}, "counters.sent_batches"),
    ("counters", {"Sent-Batches": 3}, "counters.Sent-Batches"),
    ("counters", {"": 3}, "counters."),
    ("gpus.sm_active", [0.5] * 7 + [1.5], "gpus.sm_active[7]"),  # a ratio: at most 1
    ("gpus.sm_active", [-0.1] + [0.5] * 7, "gpus.sm_active[0]"),
    ("gpus.sm_active", [0.5] * 7 + ["busy"], "gpus.sm_active[7]"),
    ("gpus.sm_active", [0.5] * 3, "gpus.sm_active"),  # length differs from t_ns
]


@pytest.mark.parametrize(("path", "value", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(
    node_client: APIClient, path: str, value: Any, field: str
) -> None:
    response = node_client.post(URL, mutate(path, value), format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not Node.objects.exists() and not GpuSample.objects.exists() and not Owner.objects.exists()


def test_counters_at_their_bounds_are_accepted(node_client: APIClient) -> None:
    body = good()
    body["counters"] = {f"counter_{i}": 2**63 - 1 if i == 0 else 0 for i in range(32)}
    body["gpus"]["sm_active"] = [0.0, 1.0, None, 0.05] * 2
    assert node_client.post(URL, body, format="json").status_code == 200
    assert Node.objects.get().counters["counter_0"] == 2**63 - 1
    assert sorted(GpuSample.objects.values_list("sm_active", flat=True), key=str) == [0.0, 0.0, 0.05, 0.05, 1.0, 1.0, None, None]


def test_a_gzipped_body_is_stored_like_a_plain_one(node_client: APIClient) -> None:
    raw = gzip.compress(json.dumps(good()).encode())
    response = node_client.generic("POST", URL, raw, content_type="application/json", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.content
    assert response.json() == {"node": "gpu-a-17", "stored": {"gpu": 8, "processes": 6}, "duplicates": 0}
    assert GpuSample.objects.count() == 8 and ProcessSample.objects.count() == 6


def test_a_gzip_bomb_is_refused_before_it_is_parsed(node_client: APIClient, settings: Any) -> None:
    bomb = gzip.compress(b"[" + b"0," * (20 * 2**20) + b"0]")
    response = node_client.generic("POST", URL, bomb, content_type="application/json", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert not GpuSample.objects.exists()


def test_only_a_node_token_writes_node_telemetry(owner: Any) -> None:
    response = owner.client.post(URL, good(), format="json")  # a project token
    assert response.status_code == 403
    assert not Node.objects.exists()


def test_a_node_token_reads_nothing(node_client: APIClient) -> None:
    for path in ("/api/v1/fleet/summary", "/api/v1/portal/overview", "/api/v1/pricing/prices", "/api/v1/runs"):
        assert node_client.get(path).status_code in (403, 405), path


def test_createtoken_node_prints_a_working_node_token(db: None, capsys: Any) -> None:
    call_command("createnodetoken", "--hostname", "gpu-a-*", "--name", "rack-7")
    raw = capsys.readouterr().out.strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post(URL, good(), format="json").status_code == 200


def test_organization_admins_create_list_and_revoke_node_tokens_in_settings(db: None) -> None:
    from django.contrib.auth.models import User

    from phantomhub.accounts.models import Profile

    admin, member = User.objects.create_user("root"), User.objects.create_user("m")
    Profile.objects.create(user=admin, is_org_admin=True)
    clients = {}
    for name, user in (("admin", admin), ("member", member)):
        clients[name] = APIClient()
        clients[name].force_authenticate(user)
    refused = clients["member"].post("/api/v1/portal/tokens", {"kind": "node", "name": "rack"}, format="json")
    assert refused.status_code == 403 and "kind" in refused.json()["error"]["fields"]
    nameless = clients["admin"].post("/api/v1/portal/tokens", {"kind": "node", "name": "rack"}, format="json")
    assert nameless.status_code == 400 and "hostnames" in nameless.json()["error"]["fields"]  # a node token names its nodes
    body = {"kind": "node", "name": "rack", "hostnames": ["gpu-a-17"]}
    issued = clients["admin"].post("/api/v1/portal/tokens", body, format="json")
    assert issued.status_code == 201 and issued.json()["kind"] == "node"
    assert issued.json()["hostnames"] == ["gpu-a-17"]
    collector = APIClient()
    collector.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.json()['token']}")
    assert collector.post(URL, good(), format="json").status_code == 200
    assert [t["kind"] for t in clients["admin"].get("/api/v1/portal/tokens").json()] == ["node"]
    assert clients["member"].get("/api/v1/portal/tokens").json() == []
    assert clients["member"].delete(f"/api/v1/portal/tokens/{issued.json()['id']}").status_code == 404
    assert clients["admin"].delete(f"/api/v1/portal/tokens/{issued.json()['id']}").status_code == 204
    assert collector.post(URL, good(), format="json").status_code == 401


def test_a_sample_older_than_the_raw_retention_is_refused(node_client: APIClient, settings: Any) -> None:
    settings.FLEET_RAW_DAYS = 14  # the samples are from 2026-09-21, long before that
    response = node_client.post(URL, good(), format="json")
    assert response.status_code == 400
    assert "gpus.t_ns[0]" in response.json()["error"]["fields"]
    assert not GpuSample.objects.exists()

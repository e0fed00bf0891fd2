"""The collector's sender counters on the node: the latest kept (a replay never wins), shown in the
nodes API and CSV, and the requests it dropped in /metrics."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import Node
from tests.fleet.conftest import NS, T0, node_body, node_meta
from tests.fleet.test_ground_truth import OWNERS, one_per_class

pytestmark = pytest.mark.django_db
URL = "/api/v1/nodes/samples"


def counters(**values: int) -> dict[str, int]:
    base = {"sent_batches": 0, "spooled_batches": 0, "replayed_batches": 0, "dropped_samples": 0, "spool_dropped_batches": 0}
    return {**base, **values}


def request(times_s: list[int], sent: dict[str, int] | None, hostname: str = "gpu-a-17") -> dict[str, Any]:
    body = node_body(
        t_ns=[T0 + t * NS for t in times_s], activity=one_per_class, owners=OWNERS, node=node_meta(hostname=hostname)
    )
    if sent is not None:
        body["counters"] = sent
    return body


def post(client: APIClient, body: dict[str, Any]) -> None:
    response = client.post(URL, body, format="json")
    assert response.status_code == 200, response.content


def kept(hostname: str = "gpu-a-17") -> tuple[dict[str, Any], int | None]:
    node = Node.objects.get(hostname=hostname)
    assert (node.counters_at is None) == (node.counters_t_ns is None)
    return node.counters, node.counters_t_ns


def test_the_latest_requests_counters_are_kept_and_a_replayed_older_one_does_not_overwrite_them(node_client) -> None:
    early = request([15, 30], counters(sent_batches=1))
    late = request([45], counters(sent_batches=2, spooled_batches=3, replayed_batches=3))
    post(node_client, early)
    assert kept() == (counters(sent_batches=1), T0 + 30 * NS)
    post(node_client, late)
    post(node_client, early)  # replayed from the spool after the later one was delivered
    assert kept() == (counters(sent_batches=2, spooled_batches=3, replayed_batches=3), T0 + 45 * NS)
    # A never-seen older request (spooled, delivered late) stores its samples, not its counters.
    answer = node_client.post(URL, request([0], counters(sent_batches=0)), format="json").json()
    assert answer["stored"]["gpu"] == 4
    assert kept()[1] == T0 + 45 * NS
    # A request without counters (an older collector) leaves them as they are.
    post(node_client, request([60], None))
    assert kept() == (counters(sent_batches=2, spooled_batches=3, replayed_batches=3), T0 + 45 * NS)
    post(node_client, request([75], counters(sent_batches=5, dropped_samples=1)))
    assert kept() == (counters(sent_batches=5, dropped_samples=1), T0 + 75 * NS)


def test_a_node_that_never_sent_counters_has_none(node_client) -> None:
    post(node_client, request([15], None))
    assert kept() == ({}, None)


@pytest.fixture
def reader(db: None) -> APIClient:
    user = User.objects.create_user("root")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_nodes_table_and_its_csv_show_sent_spooled_and_dropped(node_client, reader, h100_price) -> None:
    post(node_client, request([15, 30], counters(sent_batches=7, spooled_batches=2, dropped_samples=3, spool_dropped_batches=1)))
    post(node_client, request([15, 30], None, hostname="gpu-b-01"))
    fleet_derive_pending()
    rows = {r["node"]: r for r in reader.get("/api/v1/fleet/summary?period=2026-09-21..2026-09-21").json()["nodes"]}
    a, b = rows["gpu-a-17"], rows["gpu-b-01"]
    assert (a["collector_sent"], a["collector_spooled"], a["collector_dropped"]) == (7, 2, 3 + 1)
    assert a["counters"]["spool_dropped_batches"] == 1 and a["counters_at"] is not None
    assert (b["collector_sent"], b["collector_spooled"], b["collector_dropped"], b["counters_at"]) == (None, None, None, None)
    response = reader.get("/api/v1/fleet/nodes.csv?period=2026-09-21..2026-09-21")
    assert response.status_code == 200
    table = {r["node"]: r for r in csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))}
    assert (table["gpu-a-17"]["collector_sent"], table["gpu-a-17"]["collector_dropped"]) == ("7", "4")
    assert table["gpu-b-01"]["collector_dropped"] == ""


def test_metrics_show_each_nodes_dropped_requests(node_client) -> None:
    post(node_client, request([15], counters(dropped_samples=2, spool_dropped_batches=5), hostname='rack"7'))
    post(node_client, request([15], counters(sent_batches=9), hostname="gpu-b-01"))
    post(node_client, request([15], None, hostname="gpu-c-02"))
    text = Client().get("/metrics").content.decode()
    lines = [line for line in text.splitlines() if line.startswith("phantomhub_node_collector_dropped_total{")]
    assert lines == [
        'phantomhub_node_collector_dropped_total{node="gpu-b-01"} 0',
        'phantomhub_node_collector_dropped_total{node="rack\\"7"} 7',
    ]
    assert "# TYPE phantomhub_node_collector_dropped_total counter" in text

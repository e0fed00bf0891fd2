"""Node telemetry under arbitrary input, sent with a node token (the API fuzzer has none): any
leaf of a valid request replaced by any JSON value is stored whole or refused whole with a 400
naming a field, never a 500 and never a partial write."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from phantomhub.fleet.models import GpuSample, ProcessSample
from tests.examples import examples
from tests.fleet.conftest import NS, T0, node_body, node_meta
from tests.fleet.test_ground_truth import OWNERS, one_per_class

pytestmark = pytest.mark.django_db
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [path] + [p for k, v in value.items() for p in leaves(v, (*path, k))]
    if isinstance(value, list):
        return [path] + [p for i, v in enumerate(value) for p in leaves(v, (*path, i))]
    return [path]


BASE = node_body(t_ns=[T0 + 15 * NS, T0 + 30 * NS], activity=one_per_class, owners=OWNERS, node=node_meta())
PATHS = [p for p in leaves(BASE) if p]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(PATHS), value=JSON)
def test_any_value_anywhere_is_stored_whole_or_refused_whole(node_client: APIClient, where: tuple[Any, ...], value: Any) -> None:
    body = copy.deepcopy(BASE)
    target: Any = body
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    GpuSample.objects.all().delete()
    ProcessSample.objects.all().delete()
    response = node_client.post("/api/v1/nodes/samples", body, format="json")
    assert response.status_code in (200, 400), (where, value, response.content[:300])
    if response.status_code == 400:
        assert response.json()["error"]["fields"], response.json()
        assert not GpuSample.objects.exists() and not ProcessSample.objects.exists()
    else:
        stored = response.json()["stored"]
        assert GpuSample.objects.count() == stored["gpu"] and ProcessSample.objects.count() == stored["processes"]

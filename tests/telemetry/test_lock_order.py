"""Every writer of a run takes its ranks' rows before the run's row.

A counters event touches its rank's row and the run's; a rank's own batch touches the same two.
Taken in opposite orders, the two deadlock on PostgreSQL (one of them aborted after
deadlock_timeout, a 500); taken in one order, the second simply waits for the first.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connections

from phantomhub.telemetry.models import RunRank
from tests import rawrows
from tests.conftest import T0_NS, Tenant, steps_body

ROUNDS = 12


def _race(tenant: Tenant, posts: list[tuple[str, Any]]) -> list[Any]:
    """Each (url, body) posted by its own thread at the same moment: the responses."""
    barrier = threading.Barrier(len(posts))
    answers: list[Any] = [None] * len(posts)
    errors: list[BaseException] = []

    def post(i: int, url: str, body: Any) -> None:
        try:
            barrier.wait()
            answers[i] = tenant.client.post(url, body, format="json")
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(i, *p)) for i, p in enumerate(posts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return answers


@pytest.mark.django_db(transaction=True)
def test_counters_events_and_a_ranks_batch_at_once_both_land(owner: Tenant) -> None:
    run_id = owner.create_run(world_size=2)
    for i in range(ROUNDS):
        counters = {"id": f"c{i}", "kind": "counters", "t_ns": T0_NS, "rank": 0, "data": {"dropped_steps": i}}
        answers = _race(
            owner,
            [
                (f"/api/v1/runs/{run_id}/events", {"events": [counters]}),
                (f"/api/v1/runs/{run_id}/batch", steps_body(5, rank=0, first=5 * i)),
            ],
        )
        assert [a.status_code for a in answers] == [200, 200], [a.content for a in answers]
        assert answers[0].json() == {"accepted": 1, "duplicates": 0}
    assert RunRank.objects.get(run_id=run_id, rank=0).counters == {"dropped_steps": ROUNDS - 1}
    assert len(rawrows.steps(run_id)) == 5 * ROUNDS

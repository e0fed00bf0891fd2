"""Jobs and attempts at ingest: a run joins its job at registration (every rank, any order), never
moves to another job, announces the job's other attempts as changed; finish events set the end
cause; checkpoint and restore phases carry a checked step."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import TestCase

from phantomhub.telemetry.models import Job, Run
from phantomhub.telemetry.signals import run_changed
from tests.conftest import T0_NS, Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def register(tenant: Tenant, run_id: str, **fields: Any) -> Any:
    return tenant.client.post("/api/v1/runs", {"id": run_id, "name": "r", **fields}, format="json")


def events(tenant: Tenant, run_id: str, *sent: dict[str, Any]) -> Any:
    return tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": list(sent)}, format="json")


def finish(rank: int, status: str, **data: Any) -> dict[str, Any]:
    event = {"id": uuid.uuid4().hex, "kind": "finish", "rank": rank, "t_ns": T0_NS + 10**10, "status": status}
    return {**event, "data": data} if data else event


def phase(name: str, **data: Any) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "kind": "phase", "name": name, "t_ns": T0_NS, "t_start_ns": T0_NS, "dur_ns": 10**9,
            "data": data}  # fmt: skip


def test_attempts_join_one_job_and_every_rank_registering_again_changes_nothing(owner: Tenant) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    job = {"key": "torchelastic/abc", "attempt": 0, "source": "torchelastic"}
    for _ in range(2):  # two ranks register the first attempt
        assert register(owner, first, job=job).status_code in (200, 201)
    response = register(owner, second, job={**job, "attempt": 1})
    assert response.status_code == 201, response.content
    body = response.json()
    stored = Job.objects.get()
    assert body["job"] == {"id": str(stored.pk), "key": "torchelastic/abc", "source": "torchelastic"}
    assert body["attempt"] == 1 and body["end_cause"] == ""
    assert sorted(Run.objects.filter(job=stored).values_list("attempt", flat=True)) == [0, 1]
    assert register(owner, first).json()["job"]["key"] == "torchelastic/abc"  # a registration without a job keeps it


def test_the_same_key_in_two_projects_is_two_jobs(owner: Tenant, outsider: Tenant) -> None:
    for tenant in (owner, outsider):
        assert register(tenant, str(uuid.uuid4()), job={"key": "nightly"}).status_code == 201
    assert Job.objects.filter(key="nightly").count() == 2


def test_a_run_never_moves_to_another_job(owner: Tenant) -> None:
    run_id = str(uuid.uuid4())
    register(owner, run_id, job={"key": "a"})
    response = register(owner, run_id, job={"key": "b"})
    assert response.status_code == 409
    assert "job.key" in response.json()["error"]["fields"]
    assert Run.objects.get(client_id=run_id).job.key == "a"
    assert not Job.objects.filter(key="b").exists()  # all or nothing


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"key": ""}, "key"),
        ({"key": "x" * 201}, "key"),
        ({"key": "bad\nkey"}, "key"),
        ({"attempt": 1}, "key"),
        ({"key": "k", "attempt": -1}, "attempt"),
        ({"key": "k", "source": "lsf"}, "source"),
        ({"key": "k", "extra": 1}, "extra"),
    ],
)
def test_bad_job_fields_are_named_and_nothing_is_stored(owner: Tenant, job: dict[str, Any], field: str) -> None:
    response = register(owner, str(uuid.uuid4()), job=job)
    assert response.status_code == 400, response.content
    assert field in str(response.json()["error"]["fields"])
    assert not Run.objects.exists() and not Job.objects.exists()


class JoiningAnnouncesTheOtherAttempts(TestCase):
    """On commit (a TestCase runs on_commit callbacks it captures)."""

    def test_a_new_attempt_marks_the_earlier_ones_changed(self) -> None:
        from tests.conftest import tenant_for

        owner = tenant_for("nlp", "llm-pretrain")
        seen: list[Any] = []

        def receiver(sender: Any, run_id: Any, **_: Any) -> None:
            seen.append(run_id)

        run_changed.connect(receiver, weak=False, dispatch_uid="test-jobs")
        try:
            first = str(uuid.uuid4())
            with self.captureOnCommitCallbacks(execute=True):
                register(owner, first, job={"key": "j"})
            assert seen == []
            with self.captureOnCommitCallbacks(execute=True):
                register(owner, str(uuid.uuid4()), job={"key": "j"})
            assert [str(r) for r in seen] == [str(Run.objects.get(client_id=first).pk)]
        finally:
            run_changed.disconnect(dispatch_uid="test-jobs")


def test_finish_events_set_the_end_cause_the_most_specific_rank_wins(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert events(owner, run_id, finish(1, "failed")).status_code == 200
    run = Run.objects.get(client_id=run_id)
    assert (run.end_cause, run.end_detail) == ("exception", "")
    assert events(owner, run_id, finish(0, "failed", cause="oom", exception="torch.OutOfMemoryError")).status_code == 200
    run.refresh_from_db()
    assert (run.end_cause, run.end_detail) == ("oom", "torch.OutOfMemoryError")
    events(owner, run_id, finish(2, "finished"))
    run.refresh_from_db()
    assert run.end_cause == "oom"  # a rank that finished cleanly does not hide the OOM


def test_a_clean_finish_is_finished(owner: Tenant) -> None:
    run_id = owner.create_run()
    events(owner, run_id, finish(0, "finished"))
    assert Run.objects.get(client_id=run_id).end_cause == "finished"


@pytest.mark.parametrize(
    ("data", "field"),
    [({"cause": "meteor"}, "data.cause"), ({"cause": "silent"}, "data.cause"), ({"exception": "x" * 201}, "data.exception")],
)
def test_bad_finish_data_is_named(owner: Tenant, data: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    response = events(owner, run_id, finish(0, "failed", **data))
    assert response.status_code == 400 and field in str(response.json()["error"]["fields"]), response.content
    assert Run.objects.get(client_id=run_id).end_cause == ""


def test_checkpoint_and_restore_phases_are_stored_with_their_step(owner: Tenant) -> None:
    run_id = owner.create_run()
    response = events(owner, run_id, phase("checkpoint", step=100, bytes=2**31, **{"async": False}), phase("restore", step=100))
    assert response.status_code == 200 and response.json()["accepted"] == 2


@pytest.mark.parametrize(
    ("data", "field"),
    [({"step": None}, "data.step"), ({"step": -1}, "data.step"), ({"step": "7"}, "data.step"), ({"step": 1.5}, "data.step"),
     ({"step": 1, "bytes": -5}, "data.bytes"), ({"step": 1, "async": "yes"}, "data.async")],
)  # fmt: skip
def test_a_checkpoint_without_a_good_step_is_refused(owner: Tenant, data: dict[str, Any], field: str) -> None:
    run_id = owner.create_run()
    response = events(owner, run_id, phase("checkpoint", **data))
    assert response.status_code == 400 and field in str(response.json()["error"]["fields"]), response.content


def test_other_phases_keep_free_data_and_a_checkpoint_may_come_without_any(owner: Tenant) -> None:
    run_id = owner.create_run()
    assert events(owner, run_id, phase("eval", step="any")).status_code == 200
    assert events(owner, run_id, phase("checkpoint")).status_code == 200  # an older agent's phase("checkpoint")


def test_a_checkpoint_for_an_unknown_run_is_404(owner: Tenant) -> None:
    assert events(owner, str(uuid.uuid4()), phase("checkpoint", step=1)).status_code == 404


def test_an_earlier_attempt_still_running_is_marked_crashed_when_the_next_one_joins(owner: Tenant) -> None:
    from datetime import timedelta

    from django.utils import timezone

    first, later = str(uuid.uuid4()), str(uuid.uuid4())
    now = timezone.now()
    register(owner, first, job={"key": "j"}, started_at=(now - timedelta(minutes=10)).isoformat())
    register(owner, str(uuid.uuid4()), job={"key": "j"}, started_at=now.isoformat())
    # an attempt that started after the joining one (registered late) is not its predecessor
    register(owner, later, job={"key": "j"}, started_at=(now + timedelta(minutes=1)).isoformat())
    statuses = dict(Run.objects.values_list("client_id", "status"))
    assert statuses[uuid.UUID(first)] == "crashed" and statuses[uuid.UUID(later)] == "running"
    # provisional: the crashed attempt's own telemetry, if it is alive after all, reopens it
    assert events(owner, first, phase("eval")).status_code == 200
    assert Run.objects.get(client_id=first).status == "running"

"""Run ids are scoped to the project: runs are keyed by (project, the id the client chose), so no
project can take, probe or collide with the ids another project's agents derive, and agents that
derive ids the old way keep working."""

from __future__ import annotations

import threading
import uuid
from importlib import import_module
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.telemetry.models import Run
from phantomhub_agent._identity import NAMESPACE
from tests import rawrows
from tests.conftest import T0_NS, Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def torchrun_id(rdzv_id: str) -> str:
    """The id an agent without team or project derives for a torchrun job: a published recipe."""
    return str(uuid.uuid5(NAMESPACE, f"torchelastic/{rdzv_id}/0"))


def register(tenant: Tenant, run_id: str, **fields: Any) -> Any:
    return tenant.client.post("/api/v1/runs", {"id": run_id, "name": "r", **fields}, format="json")


def finish(tenant: Tenant, run_id: str) -> Any:
    event = {"id": uuid.uuid4().hex, "kind": "finish", "rank": 0, "t_ns": T0_NS + 10**10, "status": "finished"}
    return tenant.client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")


def test_an_id_squatted_by_another_project_blocks_nothing(owner: Tenant, outsider: Tenant) -> None:
    derived = torchrun_id("train-42")
    assert register(outsider, derived, name="squat").status_code == 201  # taken before the job starts

    created = register(owner, derived, name="pretrain", gpu_count=8)
    assert created.status_code == 201, created.content
    run = created.json()
    assert run["project"] == "llm-pretrain" and run["client_id"] == derived and run["id"] != derived
    assert run["name"] == "pretrain" and run["ranks"] == []
    stored = owner.post_steps(derived, steps_body(10))
    assert stored.status_code == 200 and stored.json()["accepted"] == 10
    assert finish(owner, derived).status_code == 200
    assert register(owner, derived, name="pretrain").status_code == 200  # a restarted rank resumes it

    mine = owner.client.get(f"/api/v1/runs/{derived}").json()
    assert mine["id"] == run["id"] and mine["status"] == "finished" and mine["gpu_count"] == 8
    assert len(rawrows.steps(run["id"])) == 10
    squat = outsider.client.get(f"/api/v1/runs/{derived}").json()
    assert squat["id"] == derived and squat["name"] == "squat" and squat["status"] == "running"
    assert rawrows.steps(derived) == []


def _answer(response: Any) -> tuple[int, Any]:
    return response.status_code, response.json()


def test_another_projects_run_answers_exactly_as_a_missing_one(owner: Tenant, outsider: Tenant) -> None:
    run_id = owner.create_run(name="secret", config={"lr": 3e-4})
    owner.post_steps(run_id, steps_body(5))
    missing = str(uuid.uuid4())
    for path in ("", "/steps", "/analysis", "/series"):
        assert _answer(outsider.client.get(f"/api/v1/runs/{run_id}{path}")) == _answer(
            outsider.client.get(f"/api/v1/runs/{missing}{path}")
        ), path
    for path, body in (
        ("/steps", steps_body(3)),
        ("/samples", {"rank": 0, "samples": {"t_ns": [T0_NS]}}),
        ("/events", {"events": [{"id": "e", "kind": "oom", "t_ns": T0_NS}]}),
    ):
        hidden = outsider.client.post(f"/api/v1/runs/{run_id}{path}", body, format="json")
        assert _answer(hidden) == _answer(outsider.client.post(f"/api/v1/runs/{missing}{path}", body, format="json"))
        assert hidden.status_code == 404

    # Registering the id creates the outsider's own run: nothing of the owner's shows or changes.
    taken = register(outsider, run_id)
    assert taken.status_code == 201
    assert taken.json()["config"] == {} and taken.json()["ranks"] == [] and taken.json()["project"] == "detector"
    kept = Run.objects.get(pk=run_id)
    assert kept.name == "secret" and kept.config == {"lr": 3e-4} and kept.project_id == owner.project.pk


def test_two_teams_reusing_a_rendezvous_id_get_a_run_each(owner: Tenant, outsider: Tenant) -> None:
    shared = torchrun_id("job-0")  # both launchers left the rendezvous id at a common value
    first, second = register(owner, shared), register(outsider, shared)
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] == shared  # the first keeps the id it chose: older agents' ids are unchanged
    assert owner.post_steps(shared, steps_body(4)).json()["accepted"] == 4
    assert outsider.post_steps(shared, steps_body(6, dur_ns=[7] * 6)).json()["accepted"] == 6
    assert owner.client.get(f"/api/v1/runs/{shared}/steps").json()["steps"]["dur_ns"] == [100_000_000] * 4
    assert outsider.client.get(f"/api/v1/runs/{shared}/steps").json()["steps"]["dur_ns"] == [7] * 6
    assert Run.objects.filter(client_id=shared).count() == 2


def test_an_agent_may_also_address_its_run_by_the_servers_id(owner: Tenant, outsider: Tenant) -> None:
    shared = torchrun_id("job-0")
    register(outsider, shared)
    public = register(owner, shared).json()["id"]
    assert owner.post_steps(public, steps_body(2)).json()["accepted"] == 2
    assert register(owner, public).status_code == 200  # the same run, not a new one
    assert Run.objects.filter(project=owner.project).count() == 1


def _person(username: str, *teams: Any) -> APIClient:
    user = User.objects.create_user(username)
    Profile.objects.create(user=user)
    for team in teams:
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_people_read_a_run_by_its_id_or_by_the_id_its_agent_chose(owner: Tenant, outsider: Tenant) -> None:
    shared = torchrun_id("job-0")
    register(owner, shared)
    theirs = register(outsider, shared).json()["id"]
    vision = _person("vi", outsider.project.team)
    assert vision.get(f"/api/v1/runs/{shared}").json()["id"] == theirs  # the one run of theirs with it
    assert vision.get(f"/api/v1/portal/runs/{shared}").status_code == 200
    both = _person("bo", owner.project.team, outsider.project.team)
    assert both.get(f"/api/v1/runs/{shared}").json()["project"] == "llm-pretrain"  # the run whose id it is
    assert both.get(f"/api/v1/runs/{theirs}").json()["project"] == "detector"
    nlp = _person("nl", owner.project.team)
    assert nlp.get(f"/api/v1/runs/{theirs}").status_code == 404


def register_at_once(calls: list[tuple[Tenant, str]]) -> list[tuple[str, int]]:
    """Every call posts its registration at the same moment: (project, status) of each."""
    results: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(calls))

    def post(tenant: Tenant, run_id: str) -> None:
        try:
            barrier.wait()
            results.append((tenant.project.slug, register(tenant, run_id).status_code))
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_ranks_of_two_jobs_registering_one_id_at_once_get_a_run_per_project(owner: Tenant, outsider: Tenant) -> None:
    for attempt in range(3):  # the race is timing-dependent: several rounds
        shared = torchrun_id(f"race-{attempt}")
        results = register_at_once([(owner, shared), (outsider, shared)] * 4)
        for slug in ("llm-pretrain", "detector"):
            assert sorted(status for project, status in results if project == slug) == [200, 200, 200, 201]
        assert sorted(Run.objects.filter(client_id=shared).values_list("project__slug", flat=True)) == [
            "detector",
            "llm-pretrain",
        ]


def test_runs_made_outside_the_api_answer_to_their_id(owner: Tenant) -> None:
    run_id = owner.create_run()
    Run.objects.filter(pk=run_id).update(client_id=None)  # as fixtures and benchmarks make them
    assert owner.post_steps(run_id, steps_body(2)).json()["accepted"] == 2
    again = register(owner, run_id)
    assert again.status_code == 200 and again.json()["client_id"] == run_id
    assert Run.objects.count() == 1


def test_the_migration_gives_stored_runs_their_id_as_client_id(owner: Tenant) -> None:
    migration = import_module("phantomhub.telemetry.migrations.0005_run_client_id")
    run_id = owner.create_run()
    Run.objects.filter(pk=run_id).update(client_id=None)
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL_CLIENT_ID)
    assert str(Run.objects.get(pk=run_id).client_id) == run_id

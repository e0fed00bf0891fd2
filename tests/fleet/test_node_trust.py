"""What a node token may make the server do: report only for its hostnames, change a node's spec
only forward in time, replay only within the window, create owners only within their bounds; and a
rule save that answers at once while a job re-attributes the owners."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile, Team
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.models import AttributionJob, FleetDay, GpuSample, Node, NodeSpec, Owner
from phantomhub.fleet.services import attribution_job_run, node_token_create
from phantomhub.pricing.models import PriceEntry
from tests.fleet.conftest import NS, T0, node_body, node_meta
from tests.fleet.test_ground_truth import OWNERS, one_per_class, post_hour

pytestmark = pytest.mark.django_db

URL = "/api/v1/nodes/samples"
HOUR_NS = 3600 * NS


def client_for(*hostnames: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {node_token_create(name='rack', hostnames=list(hostnames)).raw}")
    return client


def body(times: list[int], *, hostname: str = "gpu-a-17", owners: list[dict[str, Any]] | None = None, **node: Any) -> Any:
    return node_body(
        t_ns=times, activity=one_per_class, owners=OWNERS if owners is None else owners, node=node_meta(hostname, **node)
    )


def day_cents(day: str) -> int:
    return sum(FleetDay.objects.filter(day=day).values_list("cost_cents", flat=True))


# --- node tokens bound to their nodes ------------------------------------------------------------


def test_a_node_token_posting_another_hostname_is_refused_and_nothing_is_stored(h100_price: Any) -> None:
    mine, other = client_for("gpu-a-17"), client_for("gpu-demo-01")
    assert other.post(URL, body([T0 + 15 * NS], hostname="gpu-demo-01"), format="json").status_code == 200
    response = mine.post(URL, body([T0 + 30 * NS], hostname="gpu-demo-01", gpu_model="T4", provider="spoofed"), format="json")
    assert response.status_code == 403, response.content
    assert "node.hostname" in response.json()["error"]["fields"]
    node = Node.objects.get(hostname="gpu-demo-01")
    assert (node.gpu_model, node.provider) == ("H100-SXM", "aws")  # the victim's description is untouched
    assert GpuSample.objects.filter(node=node).count() == 4  # only its own token's samples
    assert mine.post(URL, body([T0 + 15 * NS]), format="json").status_code == 200  # its own node still works


def test_a_glob_names_a_rack_and_nothing_outside_it() -> None:
    rack = client_for("gpu-a-*")
    assert rack.post(URL, body([T0 + 15 * NS], hostname="gpu-a-03"), format="json").status_code == 200
    assert rack.post(URL, body([T0 + 15 * NS], hostname="gpu-b-03"), format="json").status_code == 403
    assert not Node.objects.filter(hostname="gpu-b-03").exists()


def test_a_node_token_names_its_hostnames_when_it_is_made(capsys: Any) -> None:
    with pytest.raises(ValueError):
        node_token_create(name="x", hostnames=[])
    with pytest.raises(ValueError):
        node_token_create(name="x", hostnames=["gpu a"])
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--hostname"):
        call_command("createnodetoken", "--name", "rack-7")
    call_command("createnodetoken", "--hostname", "gpu-a-17", "--hostname", "gpu-a-18", "--name", "rack-7")
    raw = capsys.readouterr().out.strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post(URL, body([T0 + 15 * NS], hostname="gpu-a-18"), format="json").status_code == 200
    assert client.post(URL, body([T0 + 15 * NS], hostname="gpu-a-19"), format="json").status_code == 403


# --- a spec changes only forward in time ---------------------------------------------------------


def test_a_spec_change_posted_now_does_not_reprice_yesterdays_fleet_days(node_client: APIClient, h100_price: Any) -> None:
    PriceEntry.objects.create(gpu="T4", usd_per_gpu_hour=Decimal("0.3600"), effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    post_hour(node_client)  # 2026-09-21, 10:00 to 11:00, an H100 node on aws at $3.60
    fleet_derive_pending()
    before = day_cents("2026-09-21")
    assert before == 4 * 360
    # The next morning the node reports a T4 on another provider, with one late sample of yesterday
    # (between two stored ones, so yesterday is rebuilt from its raw samples).
    next_day = T0 + 23 * HOUR_NS
    late = T0 + 30 * 60 * NS + 7 * NS
    for times in ([late], [next_day + 15 * NS * (i + 1) for i in range(240)]):
        response = node_client.post(URL, body(times, gpu_model="T4", provider="spoofed"), format="json")
        assert response.status_code == 200, response.content
    fleet_derive_pending()
    assert day_cents("2026-09-21") == before  # yesterday keeps the H100 it was priced with
    # The new spec from its first new sample, at $0.36: the first covers 30 s (the cap after a gap), the rest 15 s.
    assert day_cents("2026-09-22") == round(4 * (30 + 239 * 15) * 36 / 3600)
    specs = list(NodeSpec.objects.order_by("valid_from_ns").values_list("valid_from_ns", "gpu_model", "provider"))
    assert specs == [(0, "H100-SXM", "aws"), (next_day + 15 * NS, "T4", "spoofed")]
    node = Node.objects.get()
    assert (node.gpu_model, node.provider, node.last_t_ns) == ("T4", "spoofed", next_day + 240 * 15 * NS)


def test_a_replayed_older_request_changes_neither_the_spec_nor_the_description(node_client: APIClient) -> None:
    assert node_client.post(URL, body([T0 + 60 * NS]), format="json").status_code == 200
    replay = body([T0 + 30 * NS], gpu_model="T4", provider="spoofed", resource_id="i-other")
    assert node_client.post(URL, replay, format="json").status_code == 200  # stored: an older sample, in the window
    node = Node.objects.get()
    assert (node.gpu_model, node.provider, node.resource_id, node.last_t_ns) == ("H100-SXM", "aws", "i-gpu-a-17", T0 + 60 * NS)
    assert NodeSpec.objects.count() == 1


# --- the replay window ---------------------------------------------------------------------------


def test_a_sample_older_than_the_replay_window_is_refused_naming_it(node_client: APIClient, settings: Any) -> None:
    assert settings.FLEET_REPLAY_WINDOW_S == 72 * 3600
    newest = T0 + 80 * HOUR_NS
    assert node_client.post(URL, body([newest]), format="json").status_code == 200
    within = newest - 72 * HOUR_NS
    assert node_client.post(URL, body([within]), format="json").status_code == 200
    stored = GpuSample.objects.count()
    response = node_client.post(URL, body([within + NS, within - NS]), format="json")
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert "gpus.t_ns[4]" in fields and "replay window" in fields["gpus.t_ns[4]"]  # GPU 0 of the second time
    assert GpuSample.objects.count() == stored  # nothing of the request


def test_a_request_spanning_more_than_the_window_is_refused(node_client: APIClient, settings: Any) -> None:
    settings.FLEET_REPLAY_WINDOW_S = 3600
    response = node_client.post(URL, body([T0 + 2 * HOUR_NS, T0]), format="json")
    assert response.status_code == 400 and "gpus.t_ns[4]" in response.json()["error"]["fields"]
    assert not Node.objects.exists()


# --- owners within bounds ------------------------------------------------------------------------


def slurm_jobs(first: int, n: int) -> list[dict[str, Any]]:
    return [{"kind": "slurm", "job_id": str(first + i), "account": "nlp", "user": "bob"} for i in range(n)]


def test_owners_over_the_request_bound_are_refused(node_client: APIClient, settings: Any) -> None:
    assert settings.FLEET_MAX_OWNERS_PER_REQUEST == 256
    response = node_client.post(URL, body([T0 + 15 * NS], owners=OWNERS + slurm_jobs(0, 254)), format="json")
    assert response.status_code == 400 and "owners" in response.json()["error"]["fields"]
    assert not Owner.objects.exists() and not GpuSample.objects.exists()
    assert node_client.post(URL, body([T0 + 15 * NS], owners=OWNERS + slurm_jobs(0, 253)), format="json").status_code == 200


def test_new_owners_per_node_and_day_are_bounded(settings: Any) -> None:
    settings.FLEET_MAX_NEW_OWNERS_PER_NODE_DAY = 5
    a, b = client_for("gpu-a-17"), client_for("gpu-b-01")
    assert a.post(URL, body([T0 + 15 * NS]), format="json").status_code == 200  # 3 new owners
    response = a.post(URL, body([T0 + 30 * NS], owners=OWNERS + slurm_jobs(0, 3)), format="json")
    assert response.status_code == 400, response.content
    assert "owners[5]" in response.json()["error"]["fields"]  # the 6th new one of the day (index 5 of the request)
    assert Owner.objects.count() == 3 and GpuSample.objects.count() == 4
    assert a.post(URL, body([T0 + 30 * NS], owners=OWNERS + slurm_jobs(0, 2)), format="json").status_code == 200
    # Owners already known cost nothing; another node has its own bound.
    assert a.post(URL, body([T0 + 45 * NS], owners=OWNERS + slurm_jobs(0, 2)), format="json").status_code == 200
    assert b.post(URL, body([T0 + 15 * NS], hostname="gpu-b-01", owners=slurm_jobs(100, 5)), format="json").status_code == 200


# --- a rule save is a background job -------------------------------------------------------------


@pytest.fixture
def admin(db: None) -> APIClient:
    user = User.objects.create_user("root", password="pw")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def many_owners(n: int) -> None:
    node = Node.objects.create(hostname="gpu-a-17")
    owners = Owner.objects.bulk_create(
        [Owner(digest=f"{i:064x}", kind="slurm", data=job, first_node=node) for i, job in enumerate(slurm_jobs(0, n))]
    )
    FleetDay.objects.bulk_create(
        [FleetDay(node=node, day="2026-09-21", cls=3, holder=o, gpu_ns=NS, cost_cents=1) for o in owners[:500]]
    )


@pytest.mark.slow  # seconds: make test runs it, make check does not
def test_a_rule_save_with_many_owners_answers_fast_and_a_job_re_attributes_them(admin: APIClient, teams: dict[str, Team]) -> None:
    many_owners(10_000)
    started = time.perf_counter()
    response = admin.put(
        "/api/v1/fleet/rules", {"rules": [{"match": "slurm_account", "pattern": "nlp", "team": "nlp"}]}, format="json"
    )
    elapsed = time.perf_counter() - started
    assert response.status_code == 202, response.content
    assert elapsed < 2.0, elapsed  # was 22-31 s on the request path at 10,000 owners
    job = response.json()["job"]
    assert (job["status"], job["owners_total"], job["owners_done"]) == ("queued", 10_000, 0)
    assert not Owner.objects.filter(team__isnull=False).exists()  # nothing moved on the request path
    assert admin.get("/api/v1/fleet/rules").json()["job"]["id"] == job["id"]

    attribution_job_run(job_id=job["id"])  # what the worker does once the save committed

    done = admin.get(f"/api/v1/fleet/rules/jobs/{job['id']}").json()
    assert (done["status"], done["owners_done"], done["owners_moved"]) == ("done", 10_000, 10_000)
    assert Owner.objects.filter(team=teams["nlp"]).count() == 10_000
    assert FleetDay.objects.filter(team=teams["nlp"]).count() == 500  # the derived rows moved with their holders
    attribution_job_run(job_id=job["id"])  # run twice: nothing more
    assert AttributionJob.objects.get().owners_moved == 10_000


def test_a_later_save_supersedes_a_queued_job(admin: APIClient, teams: dict[str, Team]) -> None:
    many_owners(10)
    first = admin.put(
        "/api/v1/fleet/rules", {"rules": [{"match": "unix_user", "pattern": "bob", "team": "vision"}]}, format="json"
    )
    second = admin.put("/api/v1/fleet/rules", {"rules": [{"match": "unix_user", "pattern": "bob", "team": "nlp"}]}, format="json")
    assert attribution_job_run(job_id=first.json()["job"]["id"]).status == "superseded"
    assert attribution_job_run(job_id=second.json()["job"]["id"]).status == "done"
    assert Owner.objects.filter(team=teams["nlp"]).count() == 10


def test_with_a_broker_the_job_is_enqueued_on_commit(
    admin: APIClient,
    teams: dict[str, Team],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from phantomhub.fleet import tasks

    settings.CELERY_TASK_ALWAYS_EAGER = False
    sent: list[int] = []
    from phantomhub.celery import app as celery_app

    def send_task(name: str, args: tuple[int, ...] = (), **options: Any) -> None:
        assert name == tasks.fleet_reattribute.name  # the task, sent by name (phantomhub/jobs.py)
        sent.append(args[0])

    monkeypatch.setattr(celery_app, "send_task", send_task)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = admin.put("/api/v1/fleet/rules", {"rules": []}, format="json")
    assert sent == []  # not before the save commits
    for callback in callbacks:
        callback()
    assert sent == [response.json()["job"]["id"]]


@pytest.mark.django_db(transaction=True)
def test_without_a_broker_the_job_runs_beside_the_request_and_its_progress_shows(
    admin: APIClient, teams: dict[str, Team], settings: Any
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the embedded default: no worker, tasks run in the caller
    many_owners(3000)
    response = admin.put(
        "/api/v1/fleet/rules", {"rules": [{"match": "slurm_account", "pattern": "nlp", "team": "nlp"}]}, format="json"
    )
    assert response.status_code == 202
    job_id = response.json()["job"]["id"]
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        job = admin.get(f"/api/v1/fleet/rules/jobs/{job_id}").json()
        seen.append(job["status"])
        if job["status"] in ("done", "failed"):
            break
        time.sleep(0.05)
    assert (job["status"], job["owners_done"], job["owners_moved"]) == ("done", 3000, 3000), seen
    assert Owner.objects.filter(team=teams["nlp"]).count() == 3000


@pytest.mark.slow  # seconds: make test runs it, make check does not
@pytest.mark.django_db(transaction=True)
def test_the_migration_starts_each_nodes_spec_history_and_binds_old_node_tokens_to_the_nodes_known() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("fleet", "0004_node_counters_sm_active"), ("accounts", "0003_node_tokens")]
    after = [("fleet", "0005_node_trust")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    node = old.get_model("fleet", "Node").objects.create(hostname="gpu-old-1", gpu_model="H100-SXM", provider="aws", region="r")
    old.get_model("fleet", "GpuState").objects.create(node=node, gpu_index=0, cls=4, since_ns=T0, last_t_ns=T0 + 60 * NS)
    old.get_model("accounts", "ApiToken").objects.create(kind="node", prefix="phk_old", digest="d" * 64)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    spec = new.get_model("fleet", "NodeSpec").objects.get()
    assert (spec.valid_from_ns, spec.gpu_model, spec.provider, spec.region) == (0, "H100-SXM", "aws", "r")
    assert new.get_model("fleet", "Node").objects.get().last_t_ns == T0 + 60 * NS
    assert new.get_model("accounts", "ApiToken").objects.get().hostnames == ["gpu-old-1"]
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

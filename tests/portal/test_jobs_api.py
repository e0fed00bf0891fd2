"""The jobs API (docs/portal-api.md, "Jobs"): a job's page over the three-attempt job of
tests/waste/test_job_analysis.py (priced by hand there), the jobs list summing the same RunDay
rows as finance, a project's failure causes, the run page's attempt line, and who sees what."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Role
from phantomhub.telemetry.models import Job, Run
from phantomhub.waste import services
from phantomhub.waste.models import RunDay
from tests.conftest import Tenant
from tests.waste.test_analysis_service import T0, make_run, price_36  # noqa: F401
from tests.waste.test_job_analysis import KEY, three_attempts

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(owner: Tenant, price_36: None) -> Job:  # noqa: F811
    for run_id in three_attempts(owner):
        services.run_analyze(run_id=uuid.UUID(run_id))
    return Job.objects.get(key=KEY)


def _get(client: APIClient, path: str) -> Any:
    response = client.get(path)
    assert response.status_code == 200, response.content
    return response.json()


def test_the_job_page_carries_the_hand_priced_figures_and_a_timeline_of_priced_seconds(owner: Tenant, job: Job) -> None:
    page = _get(owner.client, f"/api/v1/portal/jobs/{job.pk}")
    assert (page["key"], page["project"], page["team"]) == (KEY, "llm-pretrain", "nlp")
    assert (page["attempts_total"], page["attempts_shown"]) == (3, 3)
    assert page["cost_usd"] == 0.98
    assert page["lost_usd"] == {"rework": 0.14, "restart": 0.13, "checkpoint": 0.07, "total": 0.34}
    assert page["lost_gpu_hours"]["total"] == pytest.approx(34 / 3600)
    a1, a2, a3 = page["attempts"]
    assert [a["index"] for a in page["attempts"]] == [1, 2, 3]
    assert [a["end_cause"] for a in page["attempts"]] == ["oom", "collective_timeout", "finished"]
    assert a2["lost_usd"] == {"rework": 0.1, "restart": 0.05, "checkpoint": 0.02, "total": 0.17}
    assert (a2["restored_step"], a2["rework_steps"]) == (19, [20, 29])
    assert a1["checkpoints"] == {"count": 2, "blocking_s": 4.0, "bytes": 2000, "async": 0}
    assert a3["ended_at"] == (T0 + timedelta(seconds=90)).isoformat()

    def seconds(segment: dict[str, str]) -> float:
        from datetime import datetime

        return (datetime.fromisoformat(segment["end"]) - datetime.fromisoformat(segment["start"])).total_seconds()

    # Attempt 2 (billed 38-65): restart 38-41 (3 s) and 63-65 (2 s), the restore 40-42, rework
    # 10 s from the first step at 43.
    kinds = [(s["kind"], seconds(s)) for s in a2["segments"]]
    assert kinds == [("work", 27.0), ("restart", 3.0), ("rework", 10.0), ("checkpoint", 2.0), ("restart", 2.0)]
    rework = next(s for s in a2["segments"] if s["kind"] == "rework")
    assert rework["start"] == (T0 + timedelta(seconds=43)).isoformat()
    assert page["failure_rate"]["source"] == "job" and page["failure_rate"]["failures"] == 2
    assert page["failure_rate"]["mtbf_hours"] == pytest.approx(49 / 3600)
    advice = page["advice"]
    assert advice["kind"] == "both" and advice["current_interval_s"] == 10.0 and advice["checkpoint_cost_s"] == 2.0
    assert advice["curve"] and all(len(point) == 2 for point in advice["curve"])
    assert advice["text"]
    assert page["warnings"] == []


def test_the_jobs_list_sums_the_rows_finance_sums(owner: Tenant, outsider: Tenant, job: Job) -> None:
    listed = _get(owner.client, "/api/v1/portal/jobs")
    [row] = listed["results"]
    runs = Run.objects.filter(job=job)
    days = RunDay.objects.filter(run__in=runs)
    assert row["lost_usd"] == float(sum(d.lost_usd for d in days)) == 0.34
    assert row["cost_usd"] == float(sum(d.cost_usd for d in days)) == 0.98
    assert (row["attempts"], row["failures"], row["status"]) == (3, 2, "finished")
    assert _get(outsider.client, "/api/v1/portal/jobs") == {"count": 0, "results": []}
    assert owner.client.get("/api/v1/portal/jobs?sort=size").status_code == 400


def test_another_projects_job_is_not_found(outsider: Tenant, job: Job) -> None:
    response = outsider.client.get(f"/api/v1/portal/jobs/{job.pk}")
    assert response.status_code == 404
    assert outsider.client.get(f"/api/v1/portal/jobs/{uuid.uuid4()}").status_code == 404


def test_a_member_of_another_team_sees_neither_the_job_nor_its_failures(owner: Tenant, job: Job) -> None:
    from phantomhub.accounts.models import Team

    stranger = User.objects.create_user("stranger")
    Membership.objects.create(user=stranger, team=Team.objects.create(slug="other", name="other"), role=Role.MEMBER)
    client = APIClient()
    client.force_authenticate(stranger)
    assert client.get(f"/api/v1/portal/jobs/{job.pk}").status_code == 404
    assert client.get("/api/v1/portal/projects/llm-pretrain/failures?month=2026-01").status_code == 404
    member = User.objects.create_user("member")
    Membership.objects.create(user=member, team=owner.project.team, role=Role.MEMBER)
    client.force_authenticate(member)
    assert client.get(f"/api/v1/portal/jobs/{job.pk}").status_code == 200


def test_failure_causes_of_the_month_with_what_each_cost(owner: Tenant, job: Job) -> None:
    member = User.objects.create_user("member")
    Membership.objects.create(user=member, team=owner.project.team, role=Role.MEMBER)
    client = APIClient()
    client.force_authenticate(member)
    page = _get(client, f"/api/v1/portal/projects/llm-pretrain/failures?month={T0:%Y-%m}")
    by_cause = {r["end_cause"]: r for r in page["rows"]}
    assert by_cause["oom"] == {"end_cause": "oom", "end_detail": "", "host": "node-a", "attempts": 1,
                               "rework_usd": 0.1, "restart_usd": 0.05, "lost_usd": 0.15}  # fmt: skip
    assert by_cause["collective_timeout"]["lost_usd"] == 0.12
    assert client.get("/api/v1/portal/projects/llm-pretrain/failures?month=2026-13").status_code == 400


def test_the_run_page_names_the_attempt_and_its_job(owner: Tenant, job: Job) -> None:
    a2 = Run.objects.get(job=job, name="a2")
    page = _get(owner.client, f"/api/v1/portal/runs/{a2.pk}")
    assert page["run"]["job"] == {"id": str(job.pk), "key": KEY, "index": 2, "attempts_total": 3}
    alone = make_run(owner, name="alone")
    assert _get(owner.client, f"/api/v1/portal/runs/{alone}")["run"]["job"] is None


@pytest.mark.slow  # 10,000 runs
def test_a_job_of_10000_attempts_answers_with_every_attempt_counted_and_the_list_capped(owner: Tenant) -> None:
    import time

    from django.utils import timezone

    job = Job.objects.create(project=owner.project, key="flaky")
    now = timezone.now()
    Run.objects.bulk_create(
        [
            Run(
                project=owner.project,
                job=job,
                attempt=i,
                name=f"a{i}",
                status="crashed",
                allocation_start=now + timedelta(seconds=i),
                started_at=now + timedelta(seconds=i),
                last_seen_at=now + timedelta(seconds=i, milliseconds=500),
            )
            for i in range(10_000)
        ],
        batch_size=2000,
    )
    started = time.perf_counter()
    page = _get(owner.client, f"/api/v1/portal/jobs/{job.pk}")
    elapsed = time.perf_counter() - started
    assert (page["attempts_total"], page["attempts_shown"]) == (10_000, 1_000)
    assert [a["index"] for a in page["attempts"][:3]] == [1, 2, 3]
    assert any("10,000 attempts" in w for w in page["warnings"])
    assert any("not analysed" in w for w in page["warnings"])
    [row] = _get(owner.client, "/api/v1/portal/jobs")["results"]
    assert (row["attempts"], row["failures"]) == (10_000, 10_000)
    assert elapsed < 30, f"the page of a 10,000-attempt job took {elapsed:.1f} s"

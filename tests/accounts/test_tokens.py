from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from phantomhub.accounts.models import ApiToken, Project, Team
from phantomhub.accounts.services import token_digest, token_revoke
from tests.conftest import Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def test_createtoken_prints_the_token_alone_and_creates_team_and_project() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("createtoken", "--team", "nlp", "--project", "llm", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert raw.startswith("phk_") and "\n" not in raw and len(raw) > 30
    assert Project.objects.get(slug="llm").team == Team.objects.get(slug="nlp")
    token = ApiToken.objects.get()
    assert token.digest == token_digest(raw) and raw not in (token.digest, token.prefix)
    assert raw.startswith(token.prefix) and len(token.prefix) == 12
    assert "shown only once" in err.getvalue()


def test_createtoken_refuses_a_project_of_another_team_and_bad_slugs() -> None:
    call_command("createtoken", "--team", "nlp", "--project", "llm", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="already belongs to team 'nlp'"):
        call_command("createtoken", "--team", "vision", "--project", "llm", stdout=io.StringIO())
    with pytest.raises(CommandError, match="not a slug"):
        call_command("createtoken", "--team", "Bad Team", "--project", "x", stdout=io.StringIO())


@pytest.mark.parametrize(
    "header",
    [None, "Bearer phk_doesnotexist", "Token abc", "Bearer", "Bearer not-a-phantomhub-token"],
)
def test_missing_or_unknown_token_gets_401(owner: Tenant, header: str | None) -> None:
    run_id = owner.create_run()
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post(f"/api/v1/runs/{run_id}/steps", steps_body(), format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_revoked_token_gets_401(owner: Tenant) -> None:
    run_id = owner.create_run()
    token_revoke(token=ApiToken.objects.get(project=owner.project))
    response = owner.post_steps(run_id, steps_body())
    assert response.status_code == 401


def test_last_used_at_is_kept(owner: Tenant) -> None:
    assert ApiToken.objects.get(project=owner.project).last_used_at is None
    owner.create_run()
    assert ApiToken.objects.get(project=owner.project).last_used_at is not None


def test_a_token_cannot_write_or_read_another_projects_run(owner: Tenant, outsider: Tenant) -> None:
    run_id = owner.create_run()
    assert outsider.post_steps(run_id, steps_body()).status_code == 404
    assert outsider.client.get(f"/api/v1/runs/{run_id}").status_code == 404
    assert outsider.client.get(f"/api/v1/runs/{run_id}/steps").status_code == 404
    assert outsider.client.post(f"/api/v1/runs/{run_id}/events", {"events": []}, format="json").status_code == 404
    # Re-using the id from another project registers a run of its own (run ids are scoped to the
    # project, docs/api.md "Run ids") and changes nothing of the other project's run.
    response = outsider.client.post("/api/v1/runs", {"id": run_id, "name": "hijack"}, format="json")
    assert response.status_code == 201 and response.json()["id"] != run_id
    assert owner.client.get(f"/api/v1/runs/{run_id}").json()["name"] == "r"


def test_a_token_cannot_create_a_run_in_another_project(owner: Tenant, outsider: Tenant) -> None:
    response = owner.client.post(
        "/api/v1/runs", {"id": "0b7c0a35-1e83-4bd0-8d43-1e07b4a4b7a1", "project": outsider.project.slug}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["fields"] == {"project": "token is for 'llm-pretrain'"}


def test_createnodetoken_names_its_hostnames_and_createtoken_makes_none() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("createnodetoken", "--hostname", "gpu-a-17", "--hostname", "gpu-b-*", stdout=out, stderr=err)
    token = ApiToken.objects.get(kind="node")
    assert token.hostnames == ["gpu-a-17", "gpu-b-*"] and token.digest == token_digest(out.getvalue().strip())
    assert "gpu-a-17, gpu-b-*" in err.getvalue()
    with pytest.raises(CommandError, match="--hostname"):
        call_command("createnodetoken", "--hostname", "gpu a", stdout=io.StringIO())
    with pytest.raises(CommandError, match="unrecognized arguments: --hostname"):
        call_command("createtoken", "--team", "nlp", "--project", "llm", "--hostname", "gpu-a-17", stdout=io.StringIO())


def test_settings_lists_each_tokens_hostnames_and_refuses_a_node_token_without_them() -> None:
    from django.contrib.auth.models import User

    from phantomhub.accounts.models import Profile

    admin = User.objects.create_user("root")
    Profile.objects.create(user=admin, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(admin)
    for hostnames in (None, [], ["gpu a"], "x" * 300):
        refused = client.post("/api/v1/portal/tokens", {"kind": "node", "name": "rack", "hostnames": hostnames}, format="json")
        assert refused.status_code == 400 and "hostnames" in refused.json()["error"]["fields"], hostnames
    made = client.post("/api/v1/portal/tokens", {"kind": "node", "name": "rack", "hostnames": "gpu-a-17 gpu-a-18"}, format="json")
    assert made.status_code == 201 and made.json()["hostnames"] == ["gpu-a-17", "gpu-a-18"]
    client.post("/api/v1/portal/tokens", {"kind": "personal", "name": "grafana"}, format="json")
    assert {t["kind"]: t["hostnames"] for t in client.get("/api/v1/portal/tokens").json()} == {
        "node": ["gpu-a-17", "gpu-a-18"],
        "personal": [],
    }

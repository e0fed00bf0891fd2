"""Token lifecycle through the API (docs/identity.md, "Tokens"): names, owners, expiry, last use
with its address, rotation with an overlap, revocation, and the 401 that names why and when."""

from __future__ import annotations

import re
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts import token_cache
from phantomhub.accounts.models import ApiToken, Membership, Profile, Role
from phantomhub.accounts.services import personal_token_create, project_token_create, token_rotate
from phantomhub.accounts.token_life import stamp
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.backends]

TOKENS = "/api/v1/portal/tokens"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    token_cache.token_cache_forget()


def _signed_in(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def admin() -> User:
    user = User.objects.create_user("root")
    Profile.objects.create(user=user, is_org_admin=True)
    return user


@pytest.fixture
def lead(owner: Tenant) -> User:
    user = User.objects.create_user("lea")
    Membership.objects.create(user=user, team=owner.project.team, role=Role.ADMIN)
    return user


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _run(client: APIClient, **extra: Any) -> Any:
    return client.post("/api/v1/runs", {"id": str(uuid.uuid4()), "name": "r"}, format="json", **extra)


def _refusal(client: APIClient, path: str = "/api/v1/runs") -> str:
    response = client.get(path) if path != "/api/v1/runs" else _run(client)
    assert response.status_code == 401, response.content
    body = response.json()
    assert body["error"]["code"] == "unauthenticated" and set(body["error"]) == {"code", "message", "fields"}
    return str(body["error"]["message"])


# --- create ----------------------------------------------------------------------------------


def test_a_project_token_has_a_name_an_owner_and_an_expiry(owner: Tenant, lead: User) -> None:
    made = _signed_in(lead).post(TOKENS, {"project": "llm-pretrain", "name": "cluster", "expires_in_days": 30}, format="json")
    assert made.status_code == 201, made.content
    row = made.json()
    token = ApiToken.objects.get(pk=row["id"])
    assert (row["name"], row["owner"], row["kind"], row["state"]) == ("cluster", "lea", "project", "active")
    assert token.created_by == lead and token.expires_at is not None
    assert abs((token.expires_at - timezone.now()) - timedelta(days=30)) < timedelta(seconds=10)
    assert row["token"].startswith(row["prefix"]) and row["ends_at"] == row["expires_at"]


def test_expires_at_is_taken_as_a_time_and_default_expiry_applies(admin: User, settings: Any) -> None:
    client = _signed_in(admin)
    when = (timezone.now() + timedelta(days=3)).replace(microsecond=0)
    made = client.post(TOKENS, {"kind": "personal", "name": "grafana", "expires_at": when.isoformat()}, format="json")
    assert made.status_code == 201 and ApiToken.objects.get(pk=made.json()["id"]).expires_at == when
    assert made.json()["state"] == "expiring"  # within 7 days
    assert client.post(TOKENS, {"kind": "personal", "name": "forever"}, format="json").json()["expires_at"] is None
    settings.TOKEN_DEFAULT_EXPIRY_DAYS = 90
    defaulted = client.post(TOKENS, {"kind": "personal", "name": "default"}, format="json").json()
    assert ApiToken.objects.get(pk=defaulted["id"]).expires_at.date() == (timezone.now() + timedelta(days=90)).date()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "personal"}, "name"),
        ({"kind": "personal", "name": "  "}, "name"),
        ({"kind": "personal", "name": "x" * 201}, "name"),
        ({"kind": "personal", "name": "a", "expires_in_days": 0}, "expires_in_days"),
        ({"kind": "personal", "name": "a", "expires_in_days": 731}, "expires_in_days"),
        ({"kind": "personal", "name": "a", "expires_in_days": "soon"}, "expires_in_days"),
        ({"kind": "personal", "name": "a", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ({"kind": "personal", "name": "a", "expires_at": "2099-01-01T00:00:00Z"}, "expires_at"),
        ({"kind": "personal", "name": "a", "expires_at": "next week"}, "expires_at"),
        ({"kind": "personal", "name": "a", "expires_at": "2027-01-01T00:00:00Z", "expires_in_days": 3}, "expires_at"),
        ({"kind": "project", "name": "a"}, "project"),
        ({"kind": "node", "name": "a", "hostnames": []}, "hostnames"),
        ({"kind": "sideways", "name": "a"}, "kind"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(admin: User, body: dict[str, Any], field: str) -> None:
    response = _signed_in(admin).post(TOKENS, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not ApiToken.objects.exists()


def test_a_token_body_is_bounded_before_it_is_parsed(admin: User) -> None:
    response = _signed_in(admin).post(TOKENS, {"kind": "personal", "name": "a", "pad": "x" * 20_000}, format="json")
    assert response.status_code == 413 and not ApiToken.objects.exists()


def test_a_team_admin_cannot_make_tokens_for_another_teams_project(lead: User, outsider: Tenant) -> None:
    response = _signed_in(lead).post(TOKENS, {"project": outsider.project.slug, "name": "x"}, format="json")
    assert response.status_code == 404 and response.json()["error"]["fields"] == {"project": "not found"}


# --- refusals --------------------------------------------------------------------------------


def test_an_expired_token_is_refused_naming_when(owner: Tenant) -> None:
    token = ApiToken.objects.get(project=owner.project)
    when = timezone.now() - timedelta(minutes=5)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=when)
    assert _refusal(owner.client) == f"token {token.prefix}… expired at {stamp(when)}"
    assert re.fullmatch(r"token phk_\S{8}… expired at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", _refusal(owner.client))


def test_a_revoked_token_is_refused_naming_when(owner: Tenant, lead: User) -> None:
    token = ApiToken.objects.get(project=owner.project)
    assert _signed_in(lead).delete(f"{TOKENS}/{token.pk}").status_code == 204
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert _refusal(owner.client) == f"token {token.prefix}… was revoked at {stamp(token.revoked_at)}"


def test_a_personal_token_of_an_inactive_person_is_refused(admin: User) -> None:
    issued = personal_token_create(user=admin, name="grafana")
    client = _bearer(issued.raw)
    assert client.get("/api/v1/portal/overview").status_code == 200
    User.objects.filter(pk=admin.pk).update(is_active=False)  # as an admin, or SCIM, would
    assert _refusal(client, "/api/v1/portal/overview") == f"token {issued.token.prefix}… belongs to an inactive person"


def test_an_unknown_token_says_so(owner: Tenant) -> None:
    assert _refusal(_bearer("phk_nothing-like-it")) == "unknown token"


# --- rotation --------------------------------------------------------------------------------


def test_rotation_issues_a_successor_and_the_old_token_works_until_the_overlap_ends(owner: Tenant, lead: User) -> None:
    old = ApiToken.objects.get(project=owner.project)
    ApiToken.objects.filter(pk=old.pk).update(name="cluster", created_by=lead, expires_at=old.created_at + timedelta(days=90))
    rotated = _signed_in(lead).post(f"{TOKENS}/{old.pk}/rotate", {"overlap_s": 3600}, format="json")
    assert rotated.status_code == 201, rotated.content
    new, before = rotated.json()["token"], rotated.json()["old"]
    assert (new["kind"], new["project"], new["name"], new["owner"], new["state"]) == (
        "project",
        "llm-pretrain",
        "cluster",
        "lea",
        "active",
    )
    successor = ApiToken.objects.get(pk=new["id"])
    assert successor.expires_at is not None
    assert abs((successor.expires_at - successor.created_at) - timedelta(days=90)) < timedelta(seconds=5)  # the same lifetime
    assert (before["state"], before["replaced_by"]) == ("rotated", new["id"]) and before["overlap_ends_at"] == before["ends_at"]
    # Both work during the overlap ...
    assert _run(owner.client).status_code == 201
    assert _run(_bearer(new["token"])).status_code == 201
    # ... and the old one is refused once it ends, saying so.
    ended = timezone.now() - timedelta(seconds=1)
    ApiToken.objects.filter(pk=old.pk).update(overlap_ends_at=ended)
    token_cache.token_cache_forget()
    assert _refusal(owner.client) == f"token {old.prefix}… was replaced by rotation; its overlap ended at {stamp(ended)}"
    assert _run(_bearer(new["token"])).status_code == 201


def test_rotation_with_no_overlap_stops_the_old_token_at_once_in_this_process(owner: Tenant, admin: User) -> None:
    old = ApiToken.objects.get(project=owner.project)
    owner.create_run()  # the old token is in this process's cache
    rotated = _signed_in(admin).post(f"{TOKENS}/{old.pk}/rotate", {"overlap_s": 0}, format="json")
    assert rotated.status_code == 201
    assert "was replaced by rotation; its overlap ended at" in _refusal(owner.client)


def test_rotation_uses_the_configured_overlap_by_default(owner: Tenant, admin: User, settings: Any) -> None:
    settings.TOKEN_ROTATION_OVERLAP_S = 600
    old = ApiToken.objects.get(project=owner.project)
    _signed_in(admin).post(f"{TOKENS}/{old.pk}/rotate", format="json")
    old.refresh_from_db()
    assert old.overlap_ends_at is not None
    assert abs(old.overlap_ends_at - timezone.now() - timedelta(seconds=600)) < timedelta(seconds=10)


def test_a_node_token_rotates_with_its_hostnames(admin: User) -> None:
    client = _signed_in(admin)
    made = client.post(TOKENS, {"kind": "node", "name": "rack", "hostnames": ["gpu-a-*"]}, format="json").json()
    new = client.post(f"{TOKENS}/{made['id']}/rotate", {"overlap_s": 60}, format="json").json()["token"]
    assert (new["kind"], new["hostnames"], new["owner"]) == ("node", ["gpu-a-*"], "root")


@pytest.mark.parametrize("body", [{"overlap_s": -1}, {"overlap_s": 30 * 86400 + 1}, {"overlap_s": "a day"}])
def test_a_bad_overlap_is_a_400_naming_it_and_rotates_nothing(owner: Tenant, admin: User, body: dict[str, Any]) -> None:
    old = ApiToken.objects.get(project=owner.project)
    response = _signed_in(admin).post(f"{TOKENS}/{old.pk}/rotate", body, format="json")
    assert response.status_code == 400 and "overlap_s" in response.json()["error"]["fields"]
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().replaced_by is None


@pytest.mark.parametrize("end", ["revoked", "expired", "rotated", "rotated_and_ended"])
def test_rotating_a_token_that_has_ended_or_was_rotated_is_a_409_saying_why(owner: Tenant, admin: User, end: str) -> None:
    old = ApiToken.objects.get(project=owner.project)
    past = timezone.now() - timedelta(hours=1)
    if end == "revoked":
        ApiToken.objects.filter(pk=old.pk).update(revoked_at=past)
    elif end == "expired":
        ApiToken.objects.filter(pk=old.pk).update(expires_at=past)
    else:
        token_rotate(token=old, overlap_s=3600)
        if end == "rotated_and_ended":
            ApiToken.objects.filter(pk=old.pk).update(overlap_ends_at=past)
    count = ApiToken.objects.count()
    response = _signed_in(admin).post(f"{TOKENS}/{old.pk}/rotate", {"overlap_s": 60}, format="json")
    assert response.status_code == 409, response.content
    message = response.json()["error"]["message"]
    expected = {
        "revoked": "was revoked at",
        "expired": "expired at",
        "rotated": "was already rotated; its overlap ends at",
        "rotated_and_ended": "was replaced by rotation; its overlap ended at",
    }[end]
    assert message.startswith(f"token {old.prefix}… {expected}"), message
    assert ApiToken.objects.count() == count


def test_a_revoked_token_in_its_overlap_stops_at_once(owner: Tenant, admin: User) -> None:
    old = ApiToken.objects.get(project=owner.project)
    token_rotate(token=old, overlap_s=3600)
    assert _signed_in(admin).delete(f"{TOKENS}/{old.pk}").status_code == 204
    assert "was revoked at" in _refusal(owner.client)


# --- who manages which -----------------------------------------------------------------------


def test_each_person_lists_rotates_and_revokes_only_what_they_manage(
    owner: Tenant, outsider: Tenant, lead: User, admin: User
) -> None:
    member = User.objects.create_user("mo")
    Membership.objects.create(user=member, team=owner.project.team, role=Role.MEMBER)
    mine = personal_token_create(user=member, name="mine").token
    admins = personal_token_create(user=admin, name="admins").token
    nlp = ApiToken.objects.get(project=owner.project)
    vision = ApiToken.objects.get(project=outsider.project)
    listed = {
        who: {t["id"] for t in _signed_in(user).get(TOKENS).json()}
        for who, user in (("member", member), ("lead", lead), ("admin", admin))
    }
    assert listed == {"member": {mine.pk}, "lead": {nlp.pk}, "admin": {admins.pk, nlp.pk, vision.pk}}
    for user, token in ((member, nlp), (lead, vision), (admin, mine), (lead, mine)):
        client = _signed_in(user)
        assert client.post(f"{TOKENS}/{token.pk}/rotate", {}, format="json").status_code == 404
        assert client.delete(f"{TOKENS}/{token.pk}").status_code == 404
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 0
    assert _signed_in(member).post(f"{TOKENS}/{mine.pk}/rotate", {}, format="json").status_code == 201


# --- last used -------------------------------------------------------------------------------


def test_last_use_records_time_and_the_clients_address_at_most_once_an_interval(owner: Tenant, settings: Any) -> None:
    token = ApiToken.objects.get(project=owner.project)
    _run(owner.client, REMOTE_ADDR="10.9.8.7")
    token.refresh_from_db()
    assert token.last_used_at is not None and token.last_used_address == "10.9.8.7"
    first = token.last_used_at
    _run(owner.client, REMOTE_ADDR="10.9.8.6")
    token.refresh_from_db()
    assert (token.last_used_at, token.last_used_address) == (first, "10.9.8.7")  # within the interval: no write


def test_last_use_behind_a_trusted_proxy_is_the_forwarded_address(owner: Tenant, settings: Any, lead: User) -> None:
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    _run(owner.client, REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9")
    row = next(t for t in _signed_in(lead).get(TOKENS).json() if t["project"] == "llm-pretrain")
    assert row["last_used_address"] == "203.0.113.9" and row["last_used_at"] is not None


# --- the cache -------------------------------------------------------------------------------


def test_a_cached_project_token_is_refused_the_second_it_expires(owner: Tenant) -> None:
    token = ApiToken.objects.get(project=owner.project)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() + timedelta(seconds=1.5))
    token_cache.token_cache_forget()
    assert _run(owner.client).status_code == 201  # cached now
    time.sleep(1.6)
    with CaptureQueriesContext(connection) as queries:
        message = _refusal(owner.client)
    assert message.startswith(f"token {token.prefix}… expired at")
    assert not any("accounts_apitoken" in q["sql"] for q in queries.captured_queries)  # from the cache


def test_personal_tokens_are_read_afresh_each_request(admin: User) -> None:
    issued = personal_token_create(user=admin, name="grafana")
    client = _bearer(issued.raw)
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/portal/overview").status_code == 200
        assert any("accounts_apitoken" in q["sql"] for q in queries.captured_queries)
    ApiToken.objects.filter(pk=issued.token.pk).update(revoked_at=timezone.now())  # as another process would
    assert "was revoked at" in _refusal(client, "/api/v1/portal/overview")


def test_existing_tokens_keep_their_name_and_new_ones_without_get_unnamed(owner: Tenant) -> None:
    assert project_token_create(project=owner.project).token.name == "unnamed"
    assert project_token_create(project=owner.project, name=" ci ").token.name == "ci"


@pytest.mark.slow  # seconds: make test runs it, make check does not
@pytest.mark.django_db(transaction=True)
def test_the_migration_names_the_unnamed_and_keeps_every_other_name() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("accounts", "0005_directory")], [("accounts", "0006_token_lifecycle")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    project = old.get_model("accounts", "Project").objects.create(
        team=old.get_model("accounts", "Team").objects.create(slug="t", name="t"), slug="p", name="p"
    )
    for prefix, name in (("phk_nameless", ""), ("phk_namedone", "ci")):
        old.get_model("accounts", "ApiToken").objects.create(
            kind="project", project=project, prefix=prefix, digest=prefix * 5, name=name
        )
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    names = dict(new.get_model("accounts", "ApiToken").objects.values_list("prefix", "name"))
    assert names == {"phk_nameless": "unnamed", "phk_namedone": "ci"}
    assert new.get_model("accounts", "ApiToken").objects.filter(expires_at=None, created_by=None, replaced_by=None).count() == 2
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

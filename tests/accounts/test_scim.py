"""SCIM 2.0 provisioning (/scim/v2/, phantomhub/accounts/scim/) through the real URL conf and
PostgreSQL: RFC 7644's example requests, the group mapping following group changes, deactivation
stopping a person's tokens and sessions in the same request, the SCIM token's scope, and every
malformed request answered with a SCIM error naming the attribute."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.test import Client, override_settings
from rest_framework.test import APIClient

from phantomhub.accounts.models import (
    ApiToken,
    DirectoryAccount,
    DirectoryGroup,
    Grant,
    GroupMappingRule,
    Membership,
    Profile,
    Role,
    Source,
    Team,
    TokenKind,
)
from phantomhub.accounts.services import personal_token_create, scim_token_create, token_digest, token_revoke
from tests.accounts.scim_factories import (
    ERROR,
    GROUP,
    RFC_CREATE_USER,
    USER,
    ScimClient,
    patch,
    rfc_put_user,
    scim_client,
)
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def scim() -> ScimClient:
    return scim_client()


def _created(scim: ScimClient, body: dict[str, Any]) -> dict[str, Any]:
    response = scim.post("/Users", body)
    assert response.status_code == 201, response.content
    return dict(response.json())


def _person(scim: ScimClient, username: str, **extra: Any) -> dict[str, Any]:
    return _created(scim, {"schemas": [USER], "userName": username, "active": True, **extra})


def _error(response: Any, status: int, scim_type: str | None = None) -> str:
    """The SCIM error's detail, after checking its shape (RFC 7644 section 3.12)."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/scim+json"
    body = response.json()
    assert body["schemas"] == [ERROR] and body["status"] == str(status), body
    assert body.get("scimType") == scim_type, body
    return str(body["detail"])


# --- Users: RFC 7644's examples ----------------------------------------------------------------


@override_settings(PUBLIC_URL="https://phantomhub.example.com/")
def test_create_user_rfc_7644_3_3_makes_an_inactive_directory_person(scim: ScimClient) -> None:
    response = scim.post("/Users", RFC_CREATE_USER)
    assert response.status_code == 201, response.content
    body = response.json()
    account = DirectoryAccount.objects.select_related("user").get(external_id="bjensen")
    assert body["id"] == str(account.scim_id)
    location = f"https://phantomhub.example.com/scim/v2/Users/{account.scim_id}"  # from PHANTOMHUB_PUBLIC_URL
    assert response["Location"] == body["meta"]["location"] == location
    assert body["schemas"] == [USER] and body["meta"]["resourceType"] == "User"
    assert (body["userName"], body["externalId"], body["name"]["givenName"], body["name"]["familyName"]) == (
        "bjensen", "bjensen", "Barbara", "Jensen"
    )  # fmt: skip
    user = account.user
    # Inactive until the identity provider says active: the RFC's example says nothing of it.
    assert body["active"] is False and not user.is_active
    assert (user.username, user.first_name, user.last_name) == ("bjensen", "Barbara", "Jensen")
    assert not user.has_usable_password()  # a directory person signs in through the directory


def test_create_user_with_active_true_and_emails(scim: ScimClient) -> None:
    body = _person(
        scim, "ann@example.com", emails=[{"value": "ann.b@example.com"}, {"value": "ann@example.com", "primary": True}]
    )
    user = User.objects.get(username="ann@example.com")
    assert user.is_active and body["active"] is True
    assert user.email == "ann@example.com"  # the primary one
    assert body["emails"] == [{"value": "ann@example.com", "primary": True, "type": "work"}]


def test_get_user_and_unknown_ids_are_404(scim: ScimClient) -> None:
    created = _person(scim, "ann")
    response = scim.get(f"/Users/{created['id']}")
    assert response.status_code == 200 and response.json()["userName"] == "ann"
    assert response["Location"].endswith(f"/scim/v2/Users/{created['id']}")
    _error(scim.get("/Users/2819c223-7f76-453a-919d-413861904646"), 404)
    _error(scim.get("/Users/not-a-uuid"), 404)


def test_a_local_account_is_never_taken_over(scim: ScimClient) -> None:
    local = User.objects.create_user("root", password="break-glass-password")
    Profile.objects.create(user=local, is_org_admin=True)
    for name in ("root", "ROOT"):
        detail = _error(scim.post("/Users", {"schemas": [USER], "userName": name, "active": False}), 409, "uniqueness")
        assert "local PhantomHub account" in detail and detail.startswith("userName")
    local.refresh_from_db()
    assert local.is_active and local.check_password("break-glass-password")
    assert not DirectoryAccount.objects.exists()
    # Nor by renaming a directory person onto it.
    created = _person(scim, "ann")
    _error(
        scim.patch(f"/Users/{created['id']}", patch({"op": "replace", "path": "userName", "value": "root"})), 409, "uniqueness"
    )
    assert User.objects.filter(username="ann").exists()


def test_a_second_create_of_the_same_user_name_is_409(scim: ScimClient) -> None:
    created = _person(scim, "ann")
    detail = _error(scim.post("/Users", {"schemas": [USER], "userName": "Ann"}), 409, "uniqueness")
    assert created["id"] in detail
    assert User.objects.filter(username__iexact="ann").count() == 1


def test_filter_rfc_7644_3_4_2_and_pagination(scim: ScimClient) -> None:
    ids = {name: _person(scim, name, externalId=f"ext-{name}")["id"] for name in ("bjensen", "jsmith", "jdoe", "mpepper")}
    User.objects.create_user("local-jane")  # not a directory person: SCIM never lists it
    found = scim.get("/Users", {"filter": 'userName eq "bjensen"'}).json()
    assert found["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:ListResponse"]
    assert (found["totalResults"], [r["id"] for r in found["Resources"]]) == (1, [ids["bjensen"]])
    # userName compares without case (RFC 7643 section 4.1.1); the URN-qualified name works too.
    upper = scim.get("/Users", {"filter": 'urn:ietf:params:scim:schemas:core:2.0:User:userName eq "BJENSEN"'}).json()
    assert [r["id"] for r in upper["Resources"]] == [ids["bjensen"]]
    by_external = scim.get("/Users", {"filter": 'externalId eq "ext-jsmith"'}).json()
    assert [r["userName"] for r in by_external["Resources"]] == ["jsmith"]
    starts = scim.get("/Users", {"filter": 'userName sw "j"'}).json()
    assert sorted(r["userName"] for r in starts["Resources"]) == ["jdoe", "jsmith"]
    by_id = scim.get("/Users", {"filter": f'id eq "{ids["jdoe"]}"'}).json()
    assert [r["userName"] for r in by_id["Resources"]] == ["jdoe"]
    assert scim.get("/Users", {"filter": 'id eq "not-an-id"'}).json()["totalResults"] == 0
    assert scim.get("/Users", {"filter": 'userName Eq "jdoe"'}).json()["totalResults"] == 1  # operators ignore case
    both = scim.get("/Users", {"filter": 'userName eq "jdoe" or userName eq "mpepper"'}).json()
    assert both["totalResults"] == 2
    everyone = scim.get("/Users").json()
    assert everyone["totalResults"] == 4 and "local-jane" not in [r["userName"] for r in everyone["Resources"]]
    # RFC 7644 section 3.4.2.4: startIndex is 1-based; count is the page's size.
    first = scim.get("/Users", {"startIndex": 1, "count": 3}).json()
    second = scim.get("/Users", {"startIndex": 4, "count": 3}).json()
    assert (first["totalResults"], first["itemsPerPage"], first["startIndex"]) == (4, 3, 1)
    assert (second["itemsPerPage"], second["startIndex"]) == (1, 4)
    paged = [r["id"] for r in first["Resources"] + second["Resources"]]
    assert sorted(paged) == sorted(ids.values())
    assert scim.get("/Users", {"count": 0}).json() == {**everyone, "itemsPerPage": 0, "Resources": []}
    assert scim.get("/Users", {"startIndex": -5, "count": 1}).json()["startIndex"] == 1


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"filter": 'title eq "Tour Guide"'}, "'title'"),
        ({"filter": "userName eq"}, "not a SCIM filter"),
        ({"filter": 'userName eq "x" and (active eq true'}, "not a SCIM filter"),
        ({"filter": 'meta.lastModified gt "2011-05-13T04:42:34Z"'}, "'meta.lastModified'"),
        ({"filter": 'emails[type eq "work" and value co "@example.com"]'}, "'emails.type'"),
        ({"filter": "userName eq " + '"x"' * 400}, "at most 1000 characters"),
    ],
)
def test_bad_filters_are_400_invalid_filter(scim: ScimClient, params: dict[str, str], names: str) -> None:
    _person(scim, "x")
    detail = _error(scim.get("/Users", params), 400, "invalidFilter")
    assert detail.startswith("filter") and names in detail


@pytest.mark.parametrize(
    "text",
    [
        'active eq "yes"',
        'id gt "x"',
        "userName gt 5",
        'not (userName eq "x")',
        "emails pr",
        'name.givenName ew "a"',
        "active eq null",
    ],
)
def test_odd_filters_answer_a_list_or_a_400_never_a_500(scim: ScimClient, text: str) -> None:
    _person(scim, "ann", name={"givenName": "Anna"})
    response = scim.get("/Users", {"filter": text})
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert _error(response, 400, "invalidFilter").startswith("filter")


def test_a_start_index_past_every_integer_is_an_empty_page(scim: ScimClient) -> None:
    _person(scim, "ann")
    page = scim.get("/Users", {"startIndex": str(10**30), "count": str(10**30)}).json()
    assert (page["totalResults"], page["Resources"]) == (1, [])


@pytest.mark.parametrize(("params", "field"), [({"startIndex": "one"}, "startIndex"), ({"count": "1.5"}, "count")])
def test_bad_pagination_is_400_naming_the_parameter(scim: ScimClient, params: dict[str, str], field: str) -> None:
    assert _error(scim.get("/Users", params), 400, "invalidValue").startswith(field)


def test_put_user_rfc_7644_3_5_1_replaces_the_person(scim: ScimClient) -> None:
    created = _created(scim, {**RFC_CREATE_USER, "active": True, "emails": [{"value": "old@example.com"}]})
    response = scim.put(f"/Users/{created['id']}", rfc_put_user(created["id"]))
    assert response.status_code == 200, response.content
    body = response.json()
    user = User.objects.get(username="bjensen")
    assert user.email == "bjensen@example.com" and body["emails"][0]["value"] == "bjensen@example.com"
    assert (user.first_name, user.last_name) == ("Barbara", "Jensen")
    assert user.is_active  # PUT without `active` keeps it
    # PUT replaces: what it leaves out is cleared.
    scim.put(f"/Users/{created['id']}", {"schemas": [USER], "userName": "barbara"})
    user.refresh_from_db()
    assert (user.username, user.email, user.first_name, user.directory.external_id) == ("barbara", "", "", "")


def test_patch_user_rfc_7644_3_5_2_replace_without_a_path(scim: ScimClient) -> None:
    created = _person(scim, "bjensen")
    body = patch(
        {
            "op": "replace",
            "value": {"emails": [{"value": "bjensen@example.com", "type": "work", "primary": True}], "nickName": "Babs"},
        },
        {"op": "add", "path": "name.givenName", "value": "Barbara"},
        {"op": "replace", "path": 'emails[type eq "work"].value', "value": "babs@example.com"},
        {"op": "replace", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department", "value": "R&D"},
    )
    response = scim.patch(f"/Users/{created['id']}", body)
    assert response.status_code == 200, response.content
    user = User.objects.get(username="bjensen")
    assert (user.email, user.first_name) == ("babs@example.com", "Barbara")
    assert response.json()["name"]["givenName"] == "Barbara"
    # Section 3.5.2.1's add without a path: a single-valued email is replaced; nickname is not kept.
    added = scim.patch(
        f"/Users/{created['id']}",
        patch({"op": "add", "value": {"emails": [{"value": "babs@jensen.org", "type": "home"}], "nickname": "Babs"}}),
    )
    assert added.status_code == 200 and added.json()["emails"][0]["value"] == "babs@jensen.org"
    scim.patch(f"/Users/{created['id']}", patch({"op": "remove", "path": "emails"}, {"op": "remove", "path": "name"}))
    user.refresh_from_db()
    assert (user.email, user.first_name) == ("", "")


# --- deactivation: tokens and sessions stop at once --------------------------------------------


def _signed_in(user: Any) -> Client:
    browser = Client()
    browser.force_login(user)
    assert browser.get("/api/v1/portal/session").json()["authenticated"] is True
    return browser


@pytest.mark.parametrize(
    "body",
    [
        patch({"op": "replace", "value": {"active": False}}),  # Entra ID and Okta
        patch({"op": "Replace", "path": "active", "value": "False"}),  # Entra ID's string form
        "put",
        "delete",
    ],
    ids=["patch-no-path", "patch-entra-string", "put", "delete"],
)
def test_deactivation_stops_tokens_and_sessions_in_the_same_second(scim: ScimClient, body: Any) -> None:
    created = _person(scim, "ann")
    user = User.objects.get(username="ann")
    raw = personal_token_create(user=user, name="laptop").raw
    other = personal_token_create(user=User.objects.create_user("bob"), name="bob's").raw
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/portal/runs").status_code == 200  # used, and so in this process's token cache
    browser = _signed_in(user)
    assert Session.objects.count() == 1

    started = time.monotonic()
    if body == "put":
        response = scim.put(f"/Users/{created['id']}", {"schemas": [USER], "userName": "ann", "active": False})
    elif body == "delete":
        response = scim.delete(f"/Users/{created['id']}")
    else:
        response = scim.patch(f"/Users/{created['id']}", body)
    assert response.status_code in (200, 204), response.content
    refused = api.get("/api/v1/portal/runs")
    elapsed = time.monotonic() - started

    assert refused.status_code == 401 and elapsed < 1.0
    assert refused.json()["error"]["code"] == "unauthenticated"
    assert browser.get("/api/v1/portal/session").json()["authenticated"] is False
    assert Session.objects.count() == 0
    user.refresh_from_db()
    assert not user.is_active
    assert ApiToken.objects.get(digest=token_digest(raw)).revoked_at is not None
    bystander = APIClient()
    bystander.credentials(HTTP_AUTHORIZATION=f"Bearer {other}")
    assert bystander.get("/api/v1/portal/runs").status_code == 200  # nobody else is touched
    # the audit log names the identity provider for the deactivation and the revoked token
    from phantomhub.audit.models import AuditEntry

    stopped = AuditEntry.objects.filter(kind="person", object_id=user.pk).order_by("-pk").first()
    assert stopped is not None and (stopped.actor_label, stopped.changes) == ("SCIM", {"is_active": [True, False]})
    revoked = AuditEntry.objects.filter(kind="token", object_id=ApiToken.objects.get(digest=token_digest(raw)).pk)
    assert revoked.filter(actor_label="SCIM", changes__has_key="revoked_at").exists()


def test_deactivating_twice_finds_nothing_left_to_stop(django_capture_on_commit_callbacks: Any) -> None:
    from phantomhub.accounts.deprovision import user_deactivate

    ann = User.objects.create_user("ann")
    for _ in range(2):
        personal_token_create(user=ann)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert user_deactivate(ann) == 2
    assert len(callbacks) == 1  # the cache is forgotten again once the revocations commit
    assert user_deactivate(ann) == 0
    assert not ApiToken.objects.filter(user=ann, revoked_at__isnull=True).exists()


def test_reactivation_restores_sign_in_but_not_the_revoked_tokens(scim: ScimClient) -> None:
    created = _person(scim, "ann")
    user = User.objects.get(username="ann")
    raw = personal_token_create(user=user).raw
    scim.patch(f"/Users/{created['id']}", patch({"op": "replace", "path": "active", "value": False}))
    response = scim.patch(f"/Users/{created['id']}", patch({"op": "replace", "path": "active", "value": True}))
    assert response.json()["active"] is True
    user.refresh_from_db()
    assert user.is_active
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/portal/runs").status_code == 401
    fresh = APIClient()
    fresh.credentials(HTTP_AUTHORIZATION=f"Bearer {personal_token_create(user=user).raw}")
    assert fresh.get("/api/v1/portal/runs").status_code == 200


def test_delete_user_rfc_7644_3_6_hides_the_person_and_a_new_create_takes_them_back(scim: ScimClient) -> None:
    team = Team.objects.create(slug="nlp", name="nlp")
    GroupMappingRule.objects.create(pattern="nlp-people", grant=Grant.TEAM_MEMBER, team=team)
    created = _person(scim, "ann")
    user = User.objects.get(username="ann")
    scim.post("/Groups", {"schemas": [GROUP], "displayName": "nlp-people", "members": [{"value": created["id"]}]})
    assert Membership.objects.filter(user=user, team=team, source=Source.DIRECTORY).exists()

    assert scim.delete(f"/Users/{created['id']}").status_code == 204
    _error(scim.get(f"/Users/{created['id']}"), 404)
    _error(scim.delete(f"/Users/{created['id']}"), 404)
    assert scim.get("/Users", {"filter": 'userName eq "ann"'}).json()["totalResults"] == 0
    user.refresh_from_db()
    assert not user.is_active  # the row stays: what ann did keeps its actor
    assert not user.directory_groups.exists() and not Membership.objects.filter(user=user).exists()

    bob = _person(scim, "bob")
    renamed = scim.patch(f"/Users/{bob['id']}", patch({"op": "replace", "path": "userName", "value": "ann"}))
    assert "SCIM deleted" in _error(renamed, 409, "uniqueness")
    again = _person(scim, "ann")
    assert again["id"] != created["id"] and again["active"] is True
    assert User.objects.get(username="ann").pk == user.pk


# --- Groups: RFC 7643 section 8.4, RFC 7644 section 3.5.2 ---------------------------------------


@pytest.fixture
def tour_guides() -> Team:
    """A team the mapping gives to members of the group "Tour Guides" (accounts/directory.py)."""
    team = Team.objects.create(slug="tours", name="tours")
    GroupMappingRule.objects.create(pattern="Tour Guides", grant=Grant.TEAM_MEMBER, team=team)
    GroupMappingRule.objects.create(pattern="Tour Leads", grant=Grant.TEAM_LEAD, team=team)
    return team


def _roles(team: Team) -> dict[str, str]:
    return dict(Membership.objects.filter(team=team).values_list("user__username", "role"))


def test_group_lifecycle_follows_rfc_examples_and_syncs_the_mapping(scim: ScimClient, tour_guides: Team) -> None:
    babs, mandy, james = (_person(scim, name)["id"] for name in ("bjensen", "mpepper", "jsmith"))
    # RFC 7643 section 8.4's Group, with the ids PhantomHub issued.
    response = scim.post(
        "/Groups",
        {
            "schemas": [GROUP],
            "displayName": "Tour Guides",
            "externalId": "tour-guides",
            "members": [
                {"value": babs, "$ref": f"https://example.com/v2/Users/{babs}", "display": "Babs Jensen"},
                {"value": mandy, "$ref": f"https://example.com/v2/Users/{mandy}", "display": "Mandy Pepperidge"},
            ],
        },
    )
    assert response.status_code == 201, response.content
    group = response.json()
    assert group["displayName"] == "Tour Guides" and group["externalId"] == "tour-guides"
    assert sorted(m["value"] for m in group["members"]) == sorted([babs, mandy])
    assert _roles(tour_guides) == {"bjensen": Role.MEMBER, "mpepper": Role.MEMBER}
    path = f"/Groups/{group['id']}"

    # RFC 7644 section 3.5.2.1: add a member.
    added = scim.patch(path, patch({"op": "add", "path": "members", "value": [{"display": "James Smith", "value": james}]}))
    assert added.status_code == 200, added.content
    assert _roles(tour_guides) == {"bjensen": Role.MEMBER, "mpepper": Role.MEMBER, "jsmith": Role.MEMBER}

    # RFC 7644 section 3.5.2.2: remove a single member, by a value filter.
    removed = scim.patch(path, patch({"op": "remove", "path": f'members[value eq "{babs}"]'}))
    assert sorted(m["value"] for m in removed.json()["members"]) == sorted([mandy, james])
    assert _roles(tour_guides) == {"mpepper": Role.MEMBER, "jsmith": Role.MEMBER}

    # ... remove one and add another in one request (its next example), then Entra ID's remove.
    scim.patch(
        path,
        patch(
            {"op": "remove", "path": f'members[value eq "{mandy}"]'}, {"op": "add", "path": "members", "value": [{"value": babs}]}
        ),
    )
    assert _roles(tour_guides) == {"bjensen": Role.MEMBER, "jsmith": Role.MEMBER}
    scim.patch(path, patch({"op": "Remove", "path": "members", "value": [{"value": james}]}))
    assert _roles(tour_guides) == {"bjensen": Role.MEMBER}

    # Section 3.5.2.3: replace all members; then rename the group: the mapping follows the name.
    scim.patch(path, patch({"op": "replace", "path": "members", "value": [{"value": mandy}, {"value": james}]}))
    assert _roles(tour_guides) == {"mpepper": Role.MEMBER, "jsmith": Role.MEMBER}
    renamed = scim.patch(path, patch({"op": "replace", "value": {"id": group["id"], "displayName": "Tour Leads"}}))  # Okta
    assert renamed.json()["displayName"] == "Tour Leads"
    assert _roles(tour_guides) == {"mpepper": Role.ADMIN, "jsmith": Role.ADMIN}

    # Remove all members (section 3.5.2.2), PUT them back, then DELETE the group.
    scim.patch(path, patch({"op": "remove", "path": "members"}))
    assert _roles(tour_guides) == {}
    put = scim.put(path, {"schemas": [GROUP], "displayName": "Tour Guides", "members": [{"value": babs}]})
    assert put.status_code == 200 and put.json().get("externalId") is None
    assert _roles(tour_guides) == {"bjensen": Role.MEMBER}
    assert scim.delete(path).status_code == 204
    assert _roles(tour_guides) == {} and not DirectoryGroup.objects.exists()
    _error(scim.get(path), 404)


def test_a_group_no_rule_maps_syncs_nobody_and_a_mapped_one_does(scim: ScimClient, tour_guides: Team) -> None:
    ann = _person(scim, "ann")["id"]
    scim.post("/Groups", {"schemas": [GROUP], "displayName": "Book Club", "members": [{"value": ann}]})
    assert DirectoryAccount.objects.get(user__username="ann").synced_at is None
    group = scim.post("/Groups", {"schemas": [GROUP], "displayName": "Tour Guides", "members": [{"value": ann}]}).json()
    assert DirectoryAccount.objects.get(user__username="ann").synced_at is not None
    assert _roles(tour_guides) == {"ann": Role.MEMBER}
    # Renamed to a name no rule maps: the old name's grants go.
    scim.patch(f"/Groups/{group['id']}", patch({"op": "replace", "path": "displayName", "value": "Former Guides"}))
    assert _roles(tour_guides) == {}


def test_a_local_membership_is_left_alone(scim: ScimClient, tour_guides: Team) -> None:
    ann = _person(scim, "ann")["id"]
    bob = User.objects.create_user("bob")
    Membership.objects.create(user=bob, team=tour_guides, role=Role.VIEWER)  # given by hand
    group = scim.post("/Groups", {"schemas": [GROUP], "displayName": "Tour Guides", "members": [{"value": ann}]}).json()
    scim.delete(f"/Groups/{group['id']}")
    assert _roles(tour_guides) == {"bob": Role.VIEWER}


def test_groups_filter_and_excluded_members(scim: ScimClient) -> None:
    ann = _person(scim, "ann")["id"]
    for name in ("Employees", "Contractors"):
        scim.post("/Groups", {"schemas": [GROUP], "displayName": name, "externalId": name.lower(), "members": [{"value": ann}]})
    found = scim.get("/Groups", {"filter": 'displayName eq "employees"', "excludedAttributes": "members"}).json()
    assert found["totalResults"] == 1
    (group,) = found["Resources"]
    assert group["displayName"] == "Employees" and "members" not in group and group["id"]
    by_member = scim.get("/Groups", {"filter": f'members[value eq "{ann}"]'}).json()
    assert by_member["totalResults"] == 2
    only = scim.get("/Groups", {"filter": 'externalId eq "contractors"', "attributes": "displayName"}).json()["Resources"]
    assert [sorted(g) for g in only] == [["displayName", "id", "meta", "schemas"]]
    person = scim.get(f"/Users/{ann}").json()
    assert sorted(g["display"] for g in person["groups"]) == ["Contractors", "Employees"]


def test_a_second_group_of_the_same_name_is_409(scim: ScimClient) -> None:
    scim.post("/Groups", {"schemas": [GROUP], "displayName": "Employees"})
    assert "displayName" in _error(scim.post("/Groups", {"schemas": [GROUP], "displayName": "Employees"}), 409, "uniqueness")


# --- malformed requests: SCIM 400s naming the attribute, nothing written -------------------------


@pytest.mark.parametrize(
    ("body", "scim_type", "starts"),
    [
        (b"{not json", "invalidSyntax", "body"),
        (b"[1, 2]", "invalidSyntax", "body"),
        (b"\xff\xfe", "invalidSyntax", "body"),
        (b"[" * 100_000 + b"]" * 100_000, "invalidSyntax", "body"),
        ({}, "invalidSyntax", "schemas"),
        (b"", "invalidSyntax", "body"),
        ({"userName": "ann"}, "invalidSyntax", "schemas"),
        ({"schemas": [USER]}, "invalidValue", "userName"),
        ({"schemas": [USER], "userName": "  "}, "invalidValue", "userName"),
        ({"schemas": [USER], "userName": 42}, "invalidValue", "userName"),
        ({"schemas": [USER], "userName": "a\u0000b"}, "invalidValue", "userName"),
        ({"schemas": [USER], "userName": "a" * 151}, "invalidValue", "userName"),
        ({"schemas": [USER], "userName": "ann", "active": "maybe"}, "invalidValue", "active"),
        ({"schemas": [USER], "userName": "ann", "name": "Ann"}, "invalidValue", "name"),
        ({"schemas": [USER], "userName": "ann", "name": {"givenName": ["A"]}}, "invalidValue", "name.givenName"),
        ({"schemas": [USER], "userName": "ann", "emails": [{"value": "not-an-email"}]}, "invalidValue", "emails[0].value"),
        ({"schemas": [USER], "userName": "ann", "emails": ["ann@example.com"]}, "invalidValue", "emails[0]"),
        ({"schemas": [USER], "userName": "ann", "externalId": {"id": 1}}, "invalidValue", "externalId"),
    ],
)
def test_malformed_user_bodies_are_400_naming_the_attribute(scim: ScimClient, body: Any, scim_type: str, starts: str) -> None:
    detail = _error(scim.post("/Users", body), 400, scim_type)
    assert detail.startswith(starts), detail
    assert not User.objects.exists()


@pytest.mark.parametrize(
    ("operations", "scim_type", "starts"),
    [
        ({"schemas": [USER], "Operations": []}, "invalidSyntax", "schemas"),
        (patch(), "invalidSyntax", "Operations"),
        (
            {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"], "Operations": {"op": "add"}},
            "invalidSyntax",
            "Operations",
        ),
        (patch("replace"), "invalidSyntax", "Operations[0]"),
        (patch({"op": "frobnicate", "path": "active", "value": False}), "invalidSyntax", "Operations[0].op"),
        (patch({"path": "active", "value": False}), "invalidSyntax", "Operations[0].op"),
        (patch({"op": "replace", "path": "active"}), "invalidSyntax", "Operations[0].value"),
        (patch({"op": "replace", "value": False}), "invalidSyntax", "Operations[0].value"),
        (patch({"op": "remove"}), "noTarget", "Operations[0].path"),
        (patch({"op": "replace", "path": "favouriteColour", "value": "red"}), "invalidPath", "Operations[0]"),
        (patch({"op": "replace", "path": "emails[type eq", "value": "x"}), "invalidPath", "path"),
        (patch({"op": "replace", "path": "active", "value": "maybe"}), "invalidValue", "active"),
        (patch({"op": "remove", "path": "userName"}), "mutability", "userName"),
        (patch({"op": "add", "path": "groups", "value": [{"value": "x"}]}), "mutability", "groups"),
        (patch({"op": "replace", "value": {"name": {"familyName": 7}}}), "invalidValue", "name.familyName"),
    ],
)
def test_malformed_user_patches_are_400_and_change_nothing(
    scim: ScimClient, operations: Any, scim_type: str, starts: str
) -> None:
    created = _person(scim, "ann", name={"givenName": "Ann"})
    # The first operation is good: it must be rolled back with the bad one.
    if isinstance(operations.get("Operations"), list) and operations["Operations"]:
        operations = {
            **operations,
            "Operations": [{"op": "replace", "path": "name.givenName", "value": "Changed"}, *operations["Operations"]],
        }
        starts = starts.replace("Operations[0]", "Operations[1]")
    detail = _error(scim.patch(f"/Users/{created['id']}", operations), 400, scim_type)
    assert detail.startswith(starts), detail
    assert User.objects.get(username="ann").first_name == "Ann"


def test_a_bad_member_in_a_group_patch_writes_nothing(scim: ScimClient, tour_guides: Team) -> None:
    ann = _person(scim, "ann")["id"]
    group = scim.post("/Groups", {"schemas": [GROUP], "displayName": "Tour Guides"}).json()
    unknown = "2819c223-7f76-453a-919d-413861904646"
    body = patch(
        {"op": "replace", "path": "displayName", "value": "Tour Leads"},
        {"op": "add", "path": "members", "value": [{"value": ann}, {"value": unknown}]},
    )
    detail = _error(scim.patch(f"/Groups/{group['id']}", body), 400, "invalidValue")
    assert detail.startswith("members[1].value") and unknown in detail
    assert DirectoryGroup.objects.get().display_name == "Tour Guides" and not DirectoryGroup.objects.get().members.exists()
    assert _roles(tour_guides) == {}
    for bad, starts in (
        ({"schemas": [GROUP], "displayName": "G", "members": [{"value": "not-an-id"}]}, "members[0].value"),
        ({"schemas": [GROUP], "displayName": "G", "members": "everyone"}, "members"),
        ({"schemas": [GROUP], "displayName": ""}, "displayName"),
        ({"schemas": [GROUP]}, "displayName"),
    ):
        assert _error(scim.post("/Groups", bad), 400, "invalidValue").startswith(starts)
    filtered_add = patch({"op": "add", "path": f'members[value eq "{ann}"]', "value": [{"value": ann}]})
    _error(scim.patch(f"/Groups/{group['id']}", filtered_add), 400, "invalidPath")
    assert DirectoryGroup.objects.count() == 1


@override_settings(SCIM_MAX_BODY_BYTES=64 * 1024)
def test_an_over_long_body_is_413_before_it_is_read(scim: ScimClient) -> None:
    body = {"schemas": [USER], "userName": "ann", "title": "x" * (64 * 1024)}
    response = scim.post("/Users", body)
    assert _error(response, 413).startswith("request body: over the limit of 65536 bytes")
    assert not User.objects.exists()
    gzip = scim.post("/Users", {"schemas": [USER], "userName": "ann"}, HTTP_CONTENT_ENCODING="gzip")
    _error(gzip, 415)


def test_the_default_bound_takes_a_large_group(scim: ScimClient) -> None:
    """A 1 MiB default leaves room for a group of thousands in one PUT (a member is ~50 bytes)."""
    group = scim.post("/Groups", {"schemas": [GROUP], "displayName": "G"}).json()
    members = [{"value": "2819c223-7f76-453a-919d-413861904646", "display": "x" * 100}] * 8000
    response = scim.put(f"/Groups/{group['id']}", {"schemas": [GROUP], "displayName": "G", "members": members})
    assert len(json.dumps(members)) > 1024 * 1024
    _error(response, 413)
    response = scim.put(f"/Groups/{group['id']}", {"schemas": [GROUP], "displayName": "G", "members": members[:5000]})
    assert _error(response, 400, "invalidValue").startswith("members[0].value")


@pytest.mark.django_db(transaction=True)
def test_a_database_that_cannot_answer_is_503_with_retry_after() -> None:
    """The database refusing (here: a row another connection holds past lock_timeout, a real
    PostgreSQL error) is a 503 the identity provider retries, not a 500, and nothing is written."""
    from django.db import connection, connections

    scim = scim_client()
    created = _person(scim, "ann")
    ann = User.objects.get(username="ann")
    other = connections.create_connection("default")
    other.set_autocommit(False)
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT id FROM auth_user WHERE id = %s FOR UPDATE", [ann.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        response = scim.patch(f"/Users/{created['id']}", patch({"op": "replace", "path": "active", "value": False}))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        other.rollback()
        other.close()
    assert "retry" in _error(response, 503) and response["Retry-After"] == "5"
    ann.refresh_from_db()
    assert ann.is_active


def test_wrong_methods_are_405_in_scim_shape(scim: ScimClient) -> None:
    created = _person(scim, "ann")
    response = scim.post(f"/Users/{created['id']}", {"schemas": [USER], "userName": "x"})
    assert "not allowed" in _error(response, 405)
    assert response["Allow"] == "GET, PUT, PATCH, DELETE"
    _error(scim.delete("/Users"), 405)


# --- the SCIM token: reaches /scim/v2/ only, and only it does -----------------------------------


def test_only_a_scim_token_reaches_scim(owner: Tenant) -> None:
    admin = User.objects.create_user("admin", password="pw")
    Profile.objects.create(user=admin, is_org_admin=True)
    anonymous = ScimClient()
    response = anonymous.get("/Users")
    assert "SCIM token is required" in _error(response, 401)
    assert response["WWW-Authenticate"] == 'Bearer realm="PhantomHub SCIM"'
    _error(ScimClient("phk_doesnotexist").get("/Users"), 401)
    _error(ScimClient("something-else").get("/Users"), 401)
    assert "project token" in _error(ScimClient(owner.token).get("/Users"), 403)
    assert "personal token" in _error(ScimClient(personal_token_create(user=admin).raw).get("/Users"), 403)
    session = Client()
    session.force_login(admin)  # an organization admin, signed in: SCIM is machine to machine
    assert "signed-in session" in _error(ScimClient(client=session).get("/Users"), 403)
    assert "signed-in session" in _error(ScimClient(client=session).post("/Users", {"schemas": [USER], "userName": "x"}), 403)
    assert not User.objects.filter(username="x").exists()
    issued = scim_token_create(name="okta")
    assert ScimClient(issued.raw).get("/Users").status_code == 200
    token_revoke(token=issued.token)
    _error(ScimClient(issued.raw).get("/Users"), 401)  # at once: SCIM does not use the token cache


def test_a_scim_token_reaches_nothing_else(owner: Tenant) -> None:
    issued = scim_token_create(name="okta")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    # (The liveness check, /api/v1/health, reads no credentials at all: it answers every caller.)
    for path in ("/api/v1/portal/runs", "/api/v1/portal/tokens", "/api/v1/portal/session"):
        response = api.get(path)
        assert response.status_code == 403, (path, response.content)
        assert response.json()["error"]["message"] == "a SCIM token reaches /scim/v2/ only"
    assert api.get("/api/schema/").status_code == 403
    assert api.post("/api/v1/portal/tokens", {"kind": "scim"}, format="json").status_code == 403
    with override_settings(METRICS_TOKEN="matrix-metrics-token"):  # /metrics takes its own token only
        assert api.get("/metrics").status_code == 401


def test_scim_tokens_are_made_and_revoked_by_org_admins_only(owner: Tenant) -> None:
    admin, lead = User.objects.create_user("admin"), User.objects.create_user("lead")
    Profile.objects.create(user=admin, is_org_admin=True)
    Membership.objects.create(user=lead, team=owner.project.team, role=Role.ADMIN)
    as_lead, as_admin = APIClient(), APIClient()
    as_lead.force_authenticate(lead)
    as_admin.force_authenticate(admin)
    refused = as_lead.post("/api/v1/portal/tokens", {"kind": "scim", "name": "okta"}, format="json")
    assert refused.status_code == 403 and refused.json()["error"]["fields"] == {"kind": "admins only"}
    made = as_admin.post("/api/v1/portal/tokens", {"kind": "scim", "name": "okta"}, format="json")
    assert made.status_code == 201, made.content
    row = made.json()
    assert (row["kind"], row["name"], row["user"], row["project"]) == ("scim", "okta", None, None)
    assert ScimClient(row["token"]).get("/ServiceProviderConfig").status_code == 200
    assert [t["id"] for t in as_admin.get("/api/v1/portal/tokens").json() if t["kind"] == "scim"] == [row["id"]]
    assert [t for t in as_lead.get("/api/v1/portal/tokens").json() if t["kind"] == "scim"] == []
    assert as_lead.delete(f"/api/v1/portal/tokens/{row['id']}").status_code == 404
    assert as_admin.delete(f"/api/v1/portal/tokens/{row['id']}").status_code == 204
    _error(ScimClient(row["token"]).get("/ServiceProviderConfig"), 401)


def test_scimtoken_command_prints_the_token_and_the_base_url() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("scimtoken", "--name", "entra", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    token = ApiToken.objects.get(digest=token_digest(raw))
    assert (token.kind, token.name, token.user, token.project) == (TokenKind.SCIM, "entra", None, None)
    assert "/scim/v2" in err.getvalue() and "shown only once" in err.getvalue()
    assert ScimClient(raw).get("/Users").status_code == 200


def test_token_last_used_is_kept(scim: ScimClient) -> None:
    token = ApiToken.objects.get(kind=TokenKind.SCIM)
    assert token.last_used_at is None
    scim.get("/Users")
    token.refresh_from_db()
    assert token.last_used_at is not None


# --- discovery ------------------------------------------------------------------------------


def test_discovery_endpoints(scim: ScimClient) -> None:
    config = scim.get("/ServiceProviderConfig").json()
    assert config["patch"]["supported"] and config["filter"]["supported"] and not config["bulk"]["supported"]
    assert config["authenticationSchemes"][0]["type"] == "oauthbearertoken"
    types = scim.get("/ResourceTypes").json()
    assert sorted(t["endpoint"] for t in types["Resources"]) == ["/Groups", "/Users"]
    assert scim.get("/ResourceTypes/User").json()["schema"] == USER
    _error(scim.get("/ResourceTypes/Printer"), 404)
    schemas = scim.get("/Schemas").json()
    assert USER in [s["id"] for s in schemas["Resources"]] and GROUP in [s["id"] for s in schemas["Resources"]]
    assert scim.get(f"/Schemas/{USER}").json()["id"] == USER
    _error(scim.get("/Schemas/urn:nothing"), 404)

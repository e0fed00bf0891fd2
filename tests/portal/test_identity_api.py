"""Settings → People & groups through the API (phantomhub/portal/identity.py): the group mapping's
validation (every bad row named, nothing written), its preview (nothing written, inactive people
left out), its save (everyone re-synced in the same request), and the refusal (409, saying where
it comes from) of local edits to access the directory gives."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from phantomhub.accounts.directory import user_sync
from phantomhub.accounts.models import (
    DirectoryAccount,
    DirectoryGroup,
    GroupMappingRule,
    Membership,
    Profile,
    Role,
    Source,
    Team,
)

pytestmark = pytest.mark.django_db
MAPPING = "/api/v1/portal/group-mapping"
PREVIEW = "/api/v1/portal/group-mapping/preview"


def _person(name: str, *groups: str, active: bool = True) -> Any:
    user = get_user_model().objects.create_user(name, email=f"{name}@example.com", is_active=active)
    DirectoryAccount.objects.create(user=user, oidc_issuer="https://idp.example", oidc_subject=name)
    for group in groups:
        DirectoryGroup.objects.get_or_create(display_name=group)[0].members.add(user)
    return user


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def teams() -> dict[str, Team]:
    return {slug: Team.objects.create(slug=slug, name=slug) for slug in ("nlp", "vision")}


@pytest.fixture
def admin() -> APIClient:
    user = get_user_model().objects.create_user("root")
    Profile.objects.create(user=user, is_org_admin=True)  # the break-glass admin, given by hand
    return _client(user)


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    return dict(response.json()["error"])


# --- validation -----------------------------------------------------------------------------------


def test_every_bad_row_is_named_with_its_field_and_nothing_is_written(admin: APIClient, teams: dict[str, Team]) -> None:
    GroupMappingRule.objects.create(pattern="keep", grant="finance")
    body = {
        "rules": [
            {"pattern": "nlp-*", "grant": "team_member", "team": "nlp"},  # fine
            {"pattern": "x", "grant": "team_lead", "team": "nope"},  # unknown team
            {"pattern": "x", "grant": "team_lead"},  # a team grant without a team
            {"pattern": "admins", "grant": "org_admin", "team": "nlp"},  # an organization grant with a team
            {"pattern": "", "grant": "finance"},  # empty
            {"pattern": "  ", "grant": "finance"},  # blank
            {"pattern": "g" * 256, "grant": "finance"},  # over-long
            {"pattern": "nlp-*", "grant": "team_member", "team": "nlp"},  # a duplicate of row 0
            {"pattern": "y", "grant": "owner"},  # unknown grant
            {"pattern": "z", "grant": "finance", "colour": "red"},  # unknown field
            "not an object",
        ]
    }
    for path, method in ((MAPPING, "put"), (PREVIEW, "post")):
        error = _error(getattr(admin, method)(path, body, format="json"), 400)
        assert error["fields"] == {
            "rules[1].team": "no team 'nope'",
            "rules[2].team": "a team_lead rule names its team",
            "rules[3].team": "must be empty: org_admin is an organization role, not a team's",
            "rules[4].pattern": "a group name or glob is required",
            "rules[5].pattern": "a group name or glob is required",
            "rules[6].pattern": "at most 255 characters",
            "rules[7].pattern": "the same rule as rules[0]",
            "rules[8].grant": "must be one of org_admin, finance, team_lead, team_member, team_viewer",
            "rules[9].colour": "unknown field",
            "rules[10]": "must be an object with pattern, grant and team",
        }
        assert "rules[1].team: no team 'nope'" in error["message"]
    assert list(GroupMappingRule.objects.values_list("pattern", flat=True)) == ["keep"]


@pytest.mark.parametrize(
    "body",
    [[], {"rule": []}, {"rules": {"pattern": "x"}}, {"rules": [{"pattern": "x", "grant": "finance"}] * 501}],
    ids=["a list", "misnamed", "not a list", "too many"],
)
def test_a_body_that_is_no_list_of_rules_is_refused_naming_rules(admin: APIClient, body: Any) -> None:
    assert "rules" in _error(admin.put(MAPPING, body, format="json"), 400)["fields"]


def test_the_body_is_bounded_before_it_is_parsed(admin: APIClient) -> None:
    huge = b'{"rules": [' + b'{"pattern": "' + b"g" * 300_000 + b'", "grant": "finance"}]}'
    response = admin.generic("PUT", MAPPING, huge, content_type="application/json")
    assert _error(response, 413)["code"] == "payload_too_large"


# --- preview and save -------------------------------------------------------------------------------


def test_preview_groups_the_changes_counts_only_active_people_and_writes_nothing(
    admin: APIClient, teams: dict[str, Team]
) -> None:
    for name in ("ada", "bob", "cy"):
        _person(name, "nlp-research")
    _person("dee", "nlp-leads", "nlp-research")
    _person("gone", "nlp-research", active=False)
    fin = _person("fay", "finance")
    Profile.objects.create(user=fin, is_finance=True, directory_flags=["finance"])
    rules = [
        {"pattern": "nlp-*", "grant": "team_member", "team": "nlp"},
        {"pattern": "nlp-leads", "grant": "team_lead", "team": "nlp"},
        {"pattern": "ops", "grant": "org_admin", "team": None},
    ]
    response = admin.post(PREVIEW, {"rules": rules}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["changes"] == [
        {"action": "leave", "grant": "finance", "team": None, "people": ["fay"], "count": 1},
        {"action": "join", "grant": "team_lead", "team": "nlp", "people": ["dee"], "count": 1},
        {"action": "join", "grant": "team_member", "team": "nlp", "people": ["ada", "bob", "cy"], "count": 3},
    ]
    assert {p["username"]: p["changes"] for p in body["people"]}["dee"] == [
        {"action": "join", "grant": "team_lead", "team": "nlp"}
    ]
    assert body["groups"] == [
        {"name": "finance", "members": 1},
        {"name": "nlp-leads", "members": 1},
        {"name": "nlp-research", "members": 4},  # "gone" is inactive
    ]
    assert [r["matches"] for r in body["rules"]] == [["nlp-leads", "nlp-research"], ["nlp-leads"], []]
    assert not Membership.objects.exists() and not GroupMappingRule.objects.exists()
    assert Profile.objects.get(user=fin).is_finance


def test_save_replaces_the_rules_and_resyncs_everyone_at_once(admin: APIClient, teams: dict[str, Team]) -> None:
    ada, gone = _person("ada", "nlp-research"), _person("gone", "nlp-research", active=False)
    kept = GroupMappingRule.objects.create(pattern="fin", grant="finance")
    GroupMappingRule.objects.create(pattern="old", grant="org_admin")
    rules = [{"pattern": "fin", "grant": "finance"}, {"pattern": "nlp-*", "grant": "team_member", "team": "nlp"}]
    response = admin.put(MAPPING, {"rules": rules}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    # As the preview says it (active people); the deactivated person is re-synced and named apart.
    assert body["changes"] == [{"action": "join", "grant": "team_member", "team": "nlp", "people": ["ada"], "count": 1}]
    assert (body["deactivated"], body["synced"]) == (["gone"], 2)
    assert [(r["pattern"], r["grant"], r["team"]) for r in body["rules"]] == [
        ("fin", "finance", None),
        ("nlp-*", "team_member", "nlp"),
    ]
    assert GroupMappingRule.objects.filter(pk=kept.pk).exists()  # an unchanged rule stays as it was
    assert Membership.objects.get(user=ada, team=teams["nlp"]).source == Source.DIRECTORY
    assert admin.get(MAPPING).json()["rules"] == body["rules"]

    # The rule goes: nobody keeps the role, deactivated people included, without a sign-in.
    response = admin.put(MAPPING, {"rules": rules[:1]}, format="json")
    assert response.json()["changes"] == [
        {"action": "leave", "grant": "team_member", "team": "nlp", "people": ["ada"], "count": 1}
    ]
    assert response.json()["deactivated"] == ["gone"]
    assert not Membership.objects.filter(user__in=[ada, gone]).exists()


def test_save_leaves_access_given_by_hand(admin: APIClient, teams: dict[str, Team]) -> None:
    ada = _person("ada", "admins")
    Membership.objects.create(user=ada, team=teams["vision"], role=Role.VIEWER)
    admin.put(MAPPING, {"rules": [{"pattern": "admins", "grant": "org_admin"}]}, format="json")
    admin.put(MAPPING, {"rules": []}, format="json")
    assert Membership.objects.get(user=ada, team=teams["vision"]).source == Source.LOCAL
    root = get_user_model().objects.get(username="root")
    assert Profile.objects.get(user=root).is_org_admin  # the break-glass admin's flag


# --- people, and the refusals -----------------------------------------------------------------------


def _synced(teams: dict[str, Team]) -> Any:
    """ada: nlp lead from nlp-leads (rule nlp-* → team lead), finance from the finance group, and a
    local viewer membership of vision."""
    GroupMappingRule.objects.create(pattern="nlp-*", grant="team_lead", team=teams["nlp"])
    GroupMappingRule.objects.create(pattern="finance", grant="finance")
    ada = _person("ada", "nlp-leads", "finance")
    user_sync(ada)
    Membership.objects.create(user=ada, team=teams["vision"], role=Role.VIEWER)
    return ada


LEAD_REFUSAL = (
    "ada's lead role in nlp comes from the identity provider's group nlp-leads (rule nlp-* → team lead); "
    "change the group or the mapping"
)


def test_the_people_list_shows_each_source_and_where_synced_access_comes_from(admin: APIClient, teams: dict[str, Team]) -> None:
    _synced(teams)
    people = {p["username"]: p for p in admin.get("/api/v1/portal/people").json()["people"]}
    ada = people["ada"]
    assert ada["memberships"] == [
        {"team": "nlp", "team_name": "nlp", "role": "admin", "source": "directory",
         "origin": "the identity provider's group nlp-leads (rule nlp-* → team lead)"},
        {"team": "vision", "team_name": "vision", "role": "viewer", "source": "local", "origin": None},
    ]  # fmt: skip
    assert ada["flags"] == [
        {"flag": "is_org_admin", "on": False, "source": None, "origin": None},
        {
            "flag": "is_finance",
            "on": True,
            "source": "directory",
            "origin": "the identity provider's group finance (rule finance → finance)",
        },
    ]
    assert ada["groups"] == ["finance", "nlp-leads"] and ada["from_directory"] and ada["synced_at"]
    assert people["root"]["flags"][0] == {"flag": "is_org_admin", "on": True, "source": "local", "origin": None}


def test_a_local_edit_of_a_synced_membership_is_refused_saying_where_it_comes_from(
    admin: APIClient, teams: dict[str, Team]
) -> None:
    ada = _synced(teams)
    url = "/api/v1/portal/people/ada/memberships/nlp"
    error = _error(admin.put(url, {"role": "member"}, format="json"), 409)
    assert error["message"] == LEAD_REFUSAL and error["code"] == "synced"
    assert _error(admin.delete(url), 409)["message"] == LEAD_REFUSAL
    assert Membership.objects.get(user=ada, team=teams["nlp"]).role == Role.ADMIN
    assert admin.put(url, {"role": "admin"}, format="json").status_code == 200  # nothing to change: no refusal

    # Local ones are edited freely.
    local = "/api/v1/portal/people/ada/memberships/vision"
    response = admin.put(local, {"role": "member"}, format="json")
    assert response.status_code == 200
    assert {m["team"]: m["role"] for m in response.json()["memberships"]} == {"nlp": "admin", "vision": "member"}
    assert [m["team"] for m in admin.delete(local).json()["memberships"]] == ["nlp"]
    assert _error(admin.delete(local), 404)["message"] == "ada is not in vision"


def test_a_synced_flag_is_refused_and_a_local_one_is_editable(admin: APIClient, teams: dict[str, Team]) -> None:
    ada = _synced(teams)
    error = _error(admin.patch("/api/v1/portal/people/ada", {"is_finance": False}, format="json"), 409)
    assert error["message"] == (
        "ada's finance role comes from the identity provider's group finance (rule finance → finance); "
        "change the group or the mapping"
    )
    assert error["fields"] == {"is_finance": error["message"]}
    assert Profile.objects.get(user=ada).is_finance
    response = admin.patch("/api/v1/portal/people/ada", {"is_org_admin": True}, format="json")
    assert response.json()["flags"][0] == {"flag": "is_org_admin", "on": True, "source": "local", "origin": None}
    assert admin.patch("/api/v1/portal/people/ada", {"is_org_admin": False}, format="json").status_code == 200


def test_a_hand_given_flag_the_mapping_also_gives_cannot_be_taken_off(admin: APIClient) -> None:
    GroupMappingRule.objects.create(pattern="admins", grant="org_admin")
    bea = _person("bea", "admins")
    Profile.objects.create(user=bea, is_org_admin=True)  # by hand first
    user_sync(bea)  # the mapping gives it too; it stays hand-given
    error = _error(admin.patch("/api/v1/portal/people/bea", {"is_org_admin": False}, format="json"), 409)
    assert "is also given by the identity provider's group admins (rule admins → organization admin)" in error["message"]


def test_the_last_organization_admin_keeps_the_flag(admin: APIClient) -> None:
    error = _error(admin.patch("/api/v1/portal/people/root", {"is_org_admin": False}, format="json"), 409)
    assert error["message"] == "root is the last organization admin; make someone else one first"


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "body"), ({"is_finance": "yes"}, "is_finance"), ({"is_superuser": True}, "is_superuser"), ([1], "body")],
)
def test_bad_flag_edits_name_the_field(admin: APIClient, body: Any, field: str) -> None:
    _person("ada")
    assert field in _error(admin.patch("/api/v1/portal/people/ada", body, format="json"), 400)["fields"]


def test_bad_membership_edits_name_the_field_or_the_missing_thing(admin: APIClient, teams: dict[str, Team]) -> None:
    _person("ada")
    assert _error(admin.put("/api/v1/portal/people/ada/memberships/nlp", {"role": "owner"}, format="json"), 400)["fields"] == {
        "role": "must be one of viewer, member, admin"
    }
    assert _error(admin.put("/api/v1/portal/people/nobody/memberships/nlp", {"role": "member"}, format="json"), 404)
    assert _error(admin.put("/api/v1/portal/people/ada/memberships/nope", {"role": "member"}, format="json"), 404)
    assert _error(admin.patch("/api/v1/portal/people/nobody", {"is_finance": True}, format="json"), 404)


def test_a_team_lead_manages_local_memberships_of_their_own_team_only(teams: dict[str, Team]) -> None:
    ada = _synced(teams)  # nlp lead by the directory
    lead = _client(ada)
    _person("bob")
    assert lead.put("/api/v1/portal/people/bob/memberships/nlp", {"role": "member"}, format="json").status_code == 200
    assert _error(lead.put("/api/v1/portal/people/bob/memberships/vision", {"role": "member"}, format="json"), 403)
    assert _error(lead.patch("/api/v1/portal/people/bob", {"is_finance": True}, format="json"), 403)
    assert _error(lead.delete("/api/v1/portal/people/ada/memberships/nlp"), 409)["message"] == LEAD_REFUSAL
    page = lead.get("/api/v1/portal/people").json()
    assert {p["username"]: [m["team"] for m in p["memberships"]] for p in page["people"]} == {"ada": ["nlp"], "bob": ["nlp"]}
    assert all(p["flags"] is None and p["groups"] is None for p in page["people"])
    assert page["teams"] == [{"slug": "nlp", "name": "nlp"}] and page["can_edit_flags"] is False
    assert lead.delete("/api/v1/portal/people/bob/memberships/nlp").status_code == 200


def test_the_people_list_pages_and_filters(admin: APIClient) -> None:
    for name in ("ann", "bea", "cal"):
        _person(name)
    page = admin.get("/api/v1/portal/people?q=BE").json()
    assert [p["username"] for p in page["people"]] == ["bea"] and page["count"] == 1
    page = admin.get("/api/v1/portal/people?page=2&page_size=2").json()
    assert [p["username"] for p in page["people"]] == ["cal", "root"] and page["count"] == 4
    assert "page_size" in _error(admin.get("/api/v1/portal/people?page_size=501"), 400)["fields"]


@pytest.mark.django_db(transaction=True)
def test_two_saves_at_once_do_not_mix() -> None:
    """A save waits for another writer of the rules and then sees what it committed: the mapping
    ends as the later save's list, not a mix of the two (read committed alone would keep the
    other's rule, inserted after the save's first read)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the lock is PostgreSQL's; SQLite holds the whole database for a writer")
    import threading

    import psycopg

    root = get_user_model().objects.create_user("root")
    Profile.objects.create(user=root, is_org_admin=True)
    db = connection.settings_dict
    other = psycopg.connect(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None, host=db["HOST"], port=db["PORT"] or None
    )
    other.execute("LOCK TABLE accounts_groupmappingrule IN SHARE ROW EXCLUSIVE MODE")  # as another save holds it
    other.execute(
        'INSERT INTO accounts_groupmappingrule (pattern, "grant", team_id, created_at) '
        "VALUES ('theirs', 'finance', NULL, now())"
    )
    answers: list[Any] = []

    def save() -> None:
        try:
            answers.append(_client(root).put(MAPPING, {"rules": [{"pattern": "mine", "grant": "finance"}]}, format="json"))
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=save)
    thread.start()
    thread.join(1.0)
    assert thread.is_alive(), "the save must wait for the other writer"
    other.commit()
    other.close()
    thread.join(30)
    assert answers and answers[0].status_code == 200, answers
    assert list(GroupMappingRule.objects.values_list("pattern", flat=True)) == ["mine"]


def test_a_save_leaves_one_row_per_rule(admin: APIClient) -> None:
    """Two equal organization rules can be stored (a NULL team escapes the unique constraint); a
    save keeps one."""
    for _ in range(2):
        GroupMappingRule.objects.create(pattern="fin", grant="finance")
    assert admin.put(MAPPING, {"rules": [{"pattern": "fin", "grant": "finance"}]}, format="json").status_code == 200
    assert GroupMappingRule.objects.filter(pattern="fin").count() == 1

"""Saved views (docs/portal-api.md, "Saved views"): validation, sharing, who changes and deletes
what, the audit log's record of each change."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role, Team
from phantomhub.audit.models import AuditEntry
from phantomhub.portal.models import SavedView
from phantomhub.portal.view_query import MAX_QUERY_CHARS, QueryError, query_clean, view_url

URL = "/api/v1/portal/views"


# --- the query rules, without a database -------------------------------------------------------------


def test_a_query_keeps_its_parameters_in_order_drops_empty_ones_and_the_question_mark() -> None:
    assert query_clean("runs", "?team=nlp&status=failed&q=&sort=-cost_usd") == "team=nlp&status=failed&sort=-cost_usd"
    assert query_clean("runs", "q=bert+large") == "q=bert+large"
    assert query_clean("finance", "") == ""
    assert view_url("runs", "team=nlp") == "/runs?team=nlp"
    assert view_url("finance", "") == "/finance"


def test_every_runs_filter_and_leaderboard_kind_can_be_saved() -> None:
    """The saved runs view's parameters follow the runs list's filters (a filter added to the API
    but not here would be refused when saved)."""
    from phantomhub.portal.api import RUN_FILTERS
    from phantomhub.portal.view_query import PAGE_PARAMS

    assert {parameter.name for parameter in RUN_FILTERS} <= PAGE_PARAMS["runs"]
    assert query_clean("runs", "launched_by=ada&status=failed") == "launched_by=ada&status=failed"
    assert query_clean("leaderboards", "kind=people") == "kind=people"


@pytest.mark.parametrize(
    ("page", "query", "field", "says"),
    [
        ("overview", "", "page", "unknown page"),
        ("runs", "month=2026-09", "query", "'month' is not a parameter of the runs page"),
        ("finance", "team=nlp", "query", "'team' is not a parameter of the finance page"),
        ("runs", "team=nlp&team=cv", "query", "more than once"),
        ("runs", "team", "query", "not a query string"),
        ("runs", "q=" + "x" * 201, "query", "longer than 200"),
        ("runs", "q=" + "x" * MAX_QUERY_CHARS, "query", f"longer than {MAX_QUERY_CHARS}"),
        ("runs", "q=a%0Ab", "query", "control character"),
        ("leaderboards", "&".join(f"kind={i}" for i in range(9)), "query", "not a query string"),
    ],
)
def test_a_query_outside_its_pages_parameters_is_refused(page: str, query: str, field: str, says: str) -> None:
    with pytest.raises(QueryError, match=says) as raised:
        query_clean(page, query)
    assert raised.value.field == field


# --- the API -------------------------------------------------------------------------------------------


@pytest.fixture
def people(db: None) -> dict[str, APIClient]:
    """ann and bob in nlp (lee leads it), vic in vision, root an org admin, fin finance."""
    nlp, _ = Team.objects.get_or_create(slug="nlp", defaults={"name": "nlp"})
    vision, _ = Team.objects.get_or_create(slug="vision", defaults={"name": "vision"})
    users = {name: User.objects.create_user(name) for name in ("ann", "bob", "lee", "vic", "root", "fin")}
    for name, team, role in (("ann", nlp, Role.MEMBER), ("bob", nlp, Role.VIEWER), ("lee", nlp, Role.ADMIN),
                             ("vic", vision, Role.MEMBER)):  # fmt: skip
        Membership.objects.create(user=users[name], team=team, role=role)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Profile.objects.create(user=users["fin"], is_finance=True)
    clients = {}
    for name, user in users.items():
        clients[name] = APIClient()
        clients[name].force_login(user)
    return clients


def _names(client: APIClient) -> list[str]:
    response = client.get(URL)
    assert response.status_code == 200, response.content
    return [v["name"] for v in response.json()["views"]]


def test_a_shared_view_is_seen_by_its_teams_members_only(people: dict[str, APIClient]) -> None:
    made = people["ann"].post(URL, {"name": "Failed NLP runs", "page": "runs", "query": "?team=nlp&status=failed", "team": "nlp"},
                              format="json")  # fmt: skip
    assert made.status_code == 201, made.content
    row = made.json()
    assert (row["url"], row["team"], row["owner"], row["mine"], row["can_delete"]) == (
        "/runs?team=nlp&status=failed",
        "nlp",
        "ann",
        True,
        True,
    )
    private = people["ann"].post(URL, {"name": "Mine", "page": "finance", "query": "month=2026-09"}, format="json")
    assert private.status_code == 201 and private.json()["team"] is None
    assert _names(people["ann"]) == ["Failed NLP runs", "Mine"]
    assert _names(people["bob"]) == _names(people["lee"]) == ["Failed NLP runs"]
    assert _names(people["vic"]) == _names(people["root"]) == _names(people["fin"]) == []
    seen_by_bob = people["bob"].get(URL).json()["views"][0]
    assert (seen_by_bob["mine"], seen_by_bob["can_delete"]) == (False, False)
    assert people["lee"].get(URL).json()["views"][0]["can_delete"] is True


def test_rename_share_and_unshare_are_the_owners(people: dict[str, APIClient]) -> None:
    view_id = people["ann"].post(URL, {"name": "v", "page": "leaderboards", "query": "kind=projects"}, format="json").json()["id"]
    shared = people["ann"].patch(f"{URL}/{view_id}", {"name": "Projects", "team": "nlp"}, format="json")
    assert shared.status_code == 200 and (shared.json()["name"], shared.json()["team"]) == ("Projects", "nlp")
    assert people["lee"].patch(f"{URL}/{view_id}", {"name": "mine now"}, format="json").status_code == 403
    assert people["vic"].patch(f"{URL}/{view_id}", {"name": "x"}, format="json").status_code == 404
    unshared = people["ann"].patch(f"{URL}/{view_id}", {"team": None}, format="json")
    assert unshared.status_code == 200 and unshared.json()["team"] is None
    assert _names(people["bob"]) == []
    assert SavedView.objects.get(pk=view_id).name == "Projects"


def test_the_owner_or_the_teams_lead_deletes_a_member_does_not(people: dict[str, APIClient]) -> None:
    ids = [people["ann"].post(URL, {"name": n, "page": "runs", "team": "nlp"}, format="json").json()["id"] for n in "ab"]
    assert people["bob"].delete(f"{URL}/{ids[0]}").status_code == 403
    assert people["vic"].delete(f"{URL}/{ids[0]}").status_code == 404
    assert people["root"].delete(f"{URL}/{ids[0]}").status_code == 404  # an org admin outside the team does not see it
    assert people["lee"].delete(f"{URL}/{ids[0]}").status_code == 204
    assert people["ann"].delete(f"{URL}/{ids[1]}").status_code == 204
    assert not SavedView.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"page": "runs"}, "name", 400),
        ({"name": "x" * 101, "page": "runs"}, "name", 400),
        ({"name": "v", "page": "overview"}, "page", 400),
        ({"name": "v", "page": "runs", "query": "month=2026-09"}, "query", 400),
        ({"name": "v", "page": "runs", "query": "q=" + "x" * MAX_QUERY_CHARS}, "query", 400),
        ({"name": "v", "page": "runs", "team": "vision"}, "team", 400),  # not ann's team
        ({"name": "v", "page": "runs", "team": "no such team!"}, "team", 400),
        ({"name": "taken", "page": "runs"}, "name", 409),
        ({"name": "v", "page": "runs", "query": 5}, "query", 400),
    ],
)
def test_bad_input_names_its_field_and_writes_nothing(people: dict[str, APIClient], body: dict, field: str, status: int) -> None:
    assert people["ann"].post(URL, {"name": "taken", "page": "finance"}, format="json").status_code == 201
    response = people["ann"].post(URL, body, format="json")
    assert response.status_code == status, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert list(SavedView.objects.values_list("name", flat=True)) == ["taken"]


def test_a_rename_onto_a_taken_name_or_a_foreign_team_changes_nothing(people: dict[str, APIClient]) -> None:
    for name in ("a", "b"):
        people["ann"].post(URL, {"name": name, "page": "runs"}, format="json")
    b = SavedView.objects.get(name="b")
    taken = people["ann"].patch(f"{URL}/{b.pk}", {"name": "a", "team": "nlp"}, format="json")
    assert taken.status_code == 409 and "name" in taken.json()["error"]["fields"]
    foreign = people["ann"].patch(f"{URL}/{b.pk}", {"name": "c", "team": "vision"}, format="json")
    assert foreign.status_code == 400 and "team" in foreign.json()["error"]["fields"]
    b.refresh_from_db()
    assert (b.name, b.team_id) == ("b", None)


def test_an_oversized_or_non_json_body_is_refused_before_parsing(people: dict[str, APIClient]) -> None:
    big = people["ann"].post(URL, '{"name": "' + "x" * 20_000 + '", "page": "runs"}', content_type="application/json")
    assert big.status_code == 413
    broken = people["ann"].post(URL, "{not json", content_type="application/json")
    assert broken.status_code == 400
    assert not SavedView.objects.exists()


def test_each_change_is_in_the_audit_log_with_its_actor(people: dict[str, APIClient]) -> None:
    view_id = people["ann"].post(URL, {"name": "v", "page": "runs", "query": "team=nlp"}, format="json").json()["id"]
    people["ann"].patch(f"{URL}/{view_id}", {"team": "nlp"}, format="json")
    people["lee"].delete(f"{URL}/{view_id}")
    entries = AuditEntry.objects.filter(kind="saved_view", object_pk=str(view_id)).order_by("id")
    assert [(e.action, e.actor_label) for e in entries] == [
        (AuditEntry.Action.CREATE, "ann"), (AuditEntry.Action.UPDATE, "ann"), (AuditEntry.Action.DELETE, "lee")
    ]  # fmt: skip

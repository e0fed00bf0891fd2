"""What the audit log records: an entry for each kind of change, made through the API by a
signed-in person behind trusted proxies, naming who, from where, and each field before and after
(docs/audit.md, "What is recorded")."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import RequestFactory
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts import directory
from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import ApiToken, DirectoryGroup, Grant, GroupMappingRule, Membership, Profile, Team
from phantomhub.accounts.services import personal_token_create, project_token_for_slugs
from phantomhub.alerts.models import AlertRule
from phantomhub.audit.context import acting, actor_of
from phantomhub.audit.models import AuditEntry
from phantomhub.portal.models import MonthLog, PolicyChange
from phantomhub.pricing.models import PriceAudit, PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste.models import ProjectDay
from tests.audit.conftest import CLIENT_ADDRESS, entries_since, mark, signed_in

pytestmark = [pytest.mark.django_db, pytest.mark.backends]  # also on SQLite, the embedded default


def _by(entry: AuditEntry, user: User) -> None:
    """The entry names `user` and the client's address (not a proxy's, not the connection's)."""
    assert (entry.actor_id, entry.actor_label, entry.remote_addr) == (user.pk, user.username, CLIENT_ADDRESS)


def _change(entry: AuditEntry, field: str) -> tuple[Any, Any]:
    before, after = entry.changes[field]
    return before, after


def test_prices_created_edited_and_deleted(people: dict[str, User]) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    body = {"gpu": "H200", "usd_per_gpu_hour": "3.10", "effective_from": "2026-07-01T00:00:00Z"}
    made = client.post("/api/v1/pricing/prices", body, format="json")
    assert made.status_code == 201, made.content
    price_id = made.json()["id"]
    assert client.patch(f"/api/v1/pricing/prices/{price_id}", {"usd_per_gpu_hour": "3.50"}, format="json").status_code == 200
    assert client.delete(f"/api/v1/pricing/prices/{price_id}").status_code == 204
    created, edited, deleted = entries_since(start, kind="price", object_pk=str(price_id))
    for entry in (created, edited, deleted):
        _by(entry, root)
    assert created.action == AuditEntry.Action.CREATE and _change(created, "gpu") == (None, "H200")
    before, after = _change(edited, "usd_per_gpu_hour")
    assert (Decimal(before), Decimal(after)) == (Decimal("3.10"), Decimal("3.50"))
    assert set(edited.changes) == {"usd_per_gpu_hour"}  # updated_at is left out
    assert deleted.action == AuditEntry.Action.DELETE and Decimal(_change(deleted, "usd_per_gpu_hour")[0]) == Decimal("3.5")
    assert deleted.object_repr.startswith("H200 any provider on_demand: $3.5")
    # The price book's own trail still works beside it.
    assert list(PriceAudit.objects.filter(entry_id=price_id).order_by("id").values_list("action", flat=True)) == [
        "create",
        "update",
        "delete",
    ]


def test_organization_settings_and_the_policy(people: dict[str, User]) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    client.get("/api/v1/portal/settings")  # creates the settings row with its defaults: no entry
    response = client.put("/api/v1/portal/settings", {"target_mfu": 0.4, "crash_after_s": 600}, format="json")
    assert response.status_code == 200, response.content
    (entry,) = entries_since(start, kind="settings")
    _by(entry, root)
    assert entry.action == AuditEntry.Action.UPDATE
    assert _change(entry, "target_mfu") == (0.5, 0.4)  # numbers stay numbers
    assert _change(entry, "crash_after_s") == (900, 600)
    assert PolicyChange.objects.get().after == {"target_mfu": 0.4}  # the policy's own record still works


def test_turning_the_people_leaderboard_on_is_recorded(people: dict[str, User]) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    client.get("/api/v1/portal/settings")
    response = client.put("/api/v1/portal/settings", {"people_leaderboard": True}, format="json")
    assert response.status_code == 200, response.content
    (entry,) = entries_since(start, kind="settings")
    _by(entry, root)
    assert _change(entry, "people_leaderboard") == (False, True)


def test_alert_rules_created_changed_and_deleted(people: dict[str, User], owner: Any) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    body = {"name": "spend", "kind": "waste_rate", "scope": "project", "project": "llm-pretrain", "params": {"share": 0.5}}
    made = client.post("/api/v1/alerts/rules", body, format="json")
    assert made.status_code == 201, made.content
    rule_id = made.json()["id"]
    assert client.patch(f"/api/v1/alerts/rules/{rule_id}", {"name": "spend, renamed"}, format="json").status_code == 200
    assert client.delete(f"/api/v1/alerts/rules/{rule_id}").status_code == 204
    created, renamed, deleted = entries_since(start, kind="alert_rule")
    for entry in (created, renamed, deleted):
        _by(entry, root)
    assert _change(renamed, "name") == ("spend", "spend, renamed")
    assert deleted.action == AuditEntry.Action.DELETE
    assert _change(created, "webhook_secret") == (None, "(hidden)")  # set, never shown


def test_a_webhook_url_is_recorded_by_its_host_only(db: None) -> None:
    url = "https://hooks.slack.com/services/T000/B000/the-credential"
    start = mark()
    with acting("system"):
        rule = AlertRule.objects.create(name="hooked", kind="waste_rate", params={"share": 0.5}, webhook_url=url)
    (entry,) = entries_since(start, kind="alert_rule")
    assert _change(entry, "webhook_url") == (None, "https://hooks.slack.com/…")
    assert "the-credential" not in json.dumps(entry.changes) and rule.webhook_secret not in json.dumps(entry.changes)


def test_attribution_rules_each_rule_that_changed(people: dict[str, User], owner: Any) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    first = {"match": "slurm_account", "pattern": "nlp-*", "team": "nlp"}
    assert client.put("/api/v1/fleet/rules", {"rules": [first]}, format="json").status_code == 202
    second = {"match": "unix_user", "pattern": "ann", "team": "nlp"}
    changed = {**first, "pattern": "nlp-2*"}
    assert client.put("/api/v1/fleet/rules", {"rules": [changed, second]}, format="json").status_code == 202
    assert client.put("/api/v1/fleet/rules", {"rules": [second]}, format="json").status_code == 202
    entries = entries_since(start, kind="attribution_rule")
    for entry in entries:
        _by(entry, root)
    assert [(e.action, sorted(e.changes)) for e in entries][:3] == [
        (AuditEntry.Action.CREATE, ["id", "key", "match", "pattern", "position", "team"]),
        (AuditEntry.Action.UPDATE, ["pattern"]),  # the first rule changed only its pattern
        (AuditEntry.Action.CREATE, ["id", "key", "match", "pattern", "position", "team"]),
    ]
    assert _change(entries[1], "pattern") == ("nlp-*", "nlp-2*")
    assert _change(entries[0], "team") == (None, "nlp")  # a related object by its name
    # [second] alone: rule 0 becomes it, rule 1 goes.
    assert [e.action for e in entries[3:]] == [AuditEntry.Action.UPDATE, AuditEntry.Action.DELETE]


def test_team_and_project_names(people: dict[str, User], owner: Any) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    assert client.patch("/api/v1/portal/teams/nlp", {"display_name": "NLP"}, format="json").status_code == 200
    assert client.patch("/api/v1/portal/projects/llm-pretrain", {"display_name": "LLM"}, format="json").status_code == 200
    team, project = entries_since(start)
    _by(team, root)
    _by(project, root)
    assert (team.kind, _change(team, "display_name")) == ("team", ("", "NLP"))
    assert (project.kind, _change(project, "display_name")) == ("project", ("", "LLM"))


def test_tokens_created_used_and_revoked_never_their_digest(people: dict[str, User]) -> None:
    root, start = people["root"], mark()
    client = signed_in(root)
    made = client.post("/api/v1/portal/tokens", {"kind": "personal", "name": "ci"}, format="json")
    assert made.status_code == 201, made.content
    raw, token_id = made.json()["token"], made.json()["id"]
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert reader.get("/api/v1/portal/overview").status_code == 200  # its use writes last_used_at: no entry
    assert ApiToken.objects.get(pk=token_id).last_used_at is not None
    assert client.delete(f"/api/v1/portal/tokens/{token_id}").status_code == 204
    assert client.delete(f"/api/v1/portal/tokens/{token_id}").status_code == 204  # again: nothing more to record
    created, revoked = entries_since(start, kind="token")
    _by(created, root)
    _by(revoked, root)
    assert created.object_repr == f"{raw[:12]}… (personal)"
    assert {"name", "kind", "user", "prefix"} <= set(created.changes) and _change(created, "user") == (None, "root")
    assert set(revoked.changes) == {"revoked_at"} and _change(revoked, "revoked_at")[0] is None
    for entry in (created, revoked):
        assert not {name for name in entry.changes if "digest" in name or name.startswith("last_used")}
        assert raw not in json.dumps(entry.changes) and ApiToken.objects.get(pk=token_id).digest not in json.dumps(entry.changes)
    assert reader.get("/api/v1/portal/overview").status_code == 401


def test_month_close_and_reopen(people: dict[str, User], owner: Any) -> None:
    root, start = people["root"], mark()
    month = (timezone.now().date().replace(day=1) - timedelta(days=1)).replace(day=1)
    ProjectDay.objects.create(day=month + timedelta(days=9), project=owner.project, team=owner.project.team, cost_usd=12)
    client = signed_in(root)
    label = f"{month:%Y-%m}"
    assert client.post(f"/api/v1/portal/finance/{label}/close").status_code == 200
    reopened = client.post(f"/api/v1/portal/finance/{label}/reopen", {"reason": "late invoice"}, format="json")
    assert reopened.status_code == 200, reopened.content
    closed, reopen = entries_since(start, kind="month")
    _by(closed, root)
    _by(reopen, root)
    assert (_change(closed, "action"), _change(closed, "month")) == ((None, "close"), (None, str(month)))
    assert (_change(reopen, "action"), _change(reopen, "reason")) == ((None, "reopen"), (None, "late invoice"))
    assert MonthLog.objects.count() == 2


def test_group_mapping_memberships_and_roles_from_a_sign_in(people: dict[str, User]) -> None:
    """The directory's sync (what single sign-on runs at each sign-in) through save() and delete():
    the rule, the memberships it gives and takes, and the organization roles."""
    root, ann, start = people["root"], people["ann"], mark()
    nlp = Team.objects.get(slug="nlp")
    with acting(root.username, person=root, address="192.0.2.1"):
        rule = GroupMappingRule.objects.create(pattern="ml-*-leads", grant=Grant.TEAM_LEAD, team=nlp)
        GroupMappingRule.objects.create(pattern="finance", grant=Grant.FINANCE)
    leads = DirectoryGroup.objects.create(display_name="ml-nlp-leads")
    with acting("sign-in"):
        leads.members.add(ann)
        directory.user_sync(ann)
    mapped = entries_since(start, kind="group_mapping")
    assert [(e.actor_label, e.remote_addr, e.actor_id) for e in mapped] == [("root", "192.0.2.1", root.pk)] * 2
    assert _change(mapped[0], "pattern") == (None, "ml-*-leads") and mapped[0].object_pk == str(rule.pk)
    (group,) = entries_since(start, kind="directory_group", action=AuditEntry.Action.UPDATE)
    assert group.changes == {"members": {"type": "m2m", "operation": "add", "objects": ["ann"]}}
    (membership,) = entries_since(start, kind="membership")
    assert membership.actor_label == "sign-in"
    assert (_change(membership, "role"), _change(membership, "source")) == (("member", "admin"), ("local", "directory"))
    # The rule goes: ann is no longer a lead at her next sign-in, and the log says so.
    with acting("sign-in"):
        rule.delete()
        directory.user_sync(ann)
    assert Membership.objects.filter(user=ann).count() == 0
    gone = entries_since(membership.pk, kind="membership")
    assert [e.action for e in gone] == [AuditEntry.Action.DELETE]
    with acting("sign-in"):
        GroupMappingRule.objects.create(pattern="ml-*-leads", grant=Grant.FINANCE)
        directory.user_sync(ann)
    (role,) = entries_since(gone[0].pk, kind="role")
    assert _change(role, "is_finance") == (False, True) and _change(role, "directory_flags") == ([], ["finance"])


def test_people_and_their_deactivation(db: None) -> None:
    start = mark()
    with acting("SCIM"):
        person = User.objects.create_user("bea", email="bea@example.com")
        person.is_active = False
        person.save()
    created, deactivated = entries_since(start, kind="person")
    assert (created.actor_label, created.actor_id) == ("SCIM", None)
    assert "password" not in created.changes and _change(created, "email") == (None, "bea@example.com")
    assert deactivated.changes == {"is_active": [True, False]}
    person.last_login = timezone.now()
    person.save()  # signing in is not a change of who someone is
    assert entries_since(deactivated.pk) == []


def test_outside_a_request_the_system_is_named(db: None) -> None:
    start = mark()
    price_set(gpu="L4", usd_per_gpu_hour=Decimal("0.8"), effective_from=timezone.now())
    (entry,) = entries_since(start, kind="price", action=AuditEntry.Action.CREATE)
    assert (entry.actor_label, entry.actor_id, entry.remote_addr) == ("system", None, None)
    assert PriceEntry.objects.filter(pk=entry.object_id).exists()


def test_a_forwarded_header_from_anyone_else_is_not_believed(people: dict[str, User], settings: Any) -> None:
    settings.TRUSTED_PROXIES = []  # no proxy configured: X-Forwarded-For is the client's to invent
    start = mark()
    client = signed_in(people["root"])
    assert client.put("/api/v1/portal/settings", {"target_mfu": 0.3}, format="json").status_code == 200
    (entry,) = entries_since(start, kind="settings")
    assert entry.remote_addr == "127.0.0.1"


def test_who_a_request_is(db: None) -> None:
    factory = RequestFactory()
    scim = factory.post("/scim/v2/Users")
    assert actor_of(scim) == (None, "SCIM")
    anonymous = factory.get("/oidc/callback/")
    assert actor_of(anonymous) == (None, "sign-in")
    issued = project_token_for_slugs(team_slug="nlp", project_slug="llm-pretrain")
    by_token = factory.post("/api/v1/runs")
    by_token.user, by_token.auth = ProjectPrincipal(issued.token), issued.token  # type: ignore[attr-defined]
    assert actor_of(by_token) == (None, f"token {issued.token.prefix}…")
    ann = User.objects.create_user("ann")
    personal = personal_token_create(user=ann).token
    by_personal = factory.get("/api/v1/audit")
    by_personal.user, by_personal.auth = ann, personal  # type: ignore[attr-defined]
    assert actor_of(by_personal) == (ann.pk, f"ann (token {personal.prefix}…)")
    by_session = factory.get("/")
    by_session.user = ann
    assert actor_of(by_session) == (ann.pk, "ann")


def test_a_nested_context_gives_the_request_its_own_back(people: dict[str, User]) -> None:
    start = mark()
    with acting("root", person=people["root"]):
        with acting("SCIM"):
            Team.objects.create(slug="scim-made", name="x")
        Team.objects.create(slug="root-made", name="y")
    assert [e.actor_label for e in entries_since(start, kind="team")] == ["SCIM", "root"]


def test_profile_role_flags_changed_by_hand(people: dict[str, User]) -> None:
    start = mark()
    with acting("root", person=people["root"]):
        profile = Profile.objects.get(user=people["fin"])
        profile.is_org_admin = True
        profile.save()
    (entry,) = entries_since(start, kind="role")
    assert entry.changes == {"is_org_admin": [False, True]} and entry.object_repr == "profile of fin"


def test_token_fields_a_lifecycle_adds_keep_their_secrets_and_use_out() -> None:
    """The token's registration leaves out by name, so fields other work adds to ApiToken
    (a rotation's previous digest, the address it was last used from) stay out too."""
    from phantomhub.audit.registration import _secret_or_digest

    for name in ("digest", "previous_digest", "digest_old", "last_used_at", "last_used_address", "last_used_ip", "secret"):
        assert _secret_or_digest(name), name
    for name in ("name", "expires_at", "revoked_at", "rotated_at", "kind", "hostnames", "user", "project"):
        assert not _secret_or_digest(name), name


def test_the_admin_lists_entries_and_changes_none(people: dict[str, User]) -> None:
    from django.test import Client

    root = people["root"]
    root.is_staff = root.is_superuser = True
    root.save()
    start = mark()
    with acting("system"):
        Team.objects.create(slug="admin-listed", name="x")
    (entry,) = entries_since(start)
    client = Client()
    client.force_login(root)
    assert client.get("/admin/audit/auditentry/").status_code == 200
    assert client.get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 200  # a read-only view
    assert client.post(f"/admin/audit/auditentry/{entry.pk}/change/", {"actor_label": "x"}).status_code == 403
    assert client.get(f"/admin/audit/auditentry/{entry.pk}/delete/").status_code == 403
    assert client.get("/admin/audit/auditentry/add/").status_code == 403
    assert AuditEntry.objects.get(pk=entry.pk).actor_label == "system"


def test_directory_group_members_from_either_side_and_cleared(people: dict[str, User]) -> None:
    """Who joined or left a group, on the group's entries, whether the group or the person changed
    (SCIM pushes a group's members; a sign-in sets a person's groups); a clear names only the ones
    who were there."""
    ann, fin = people["ann"], people["fin"]
    bob = User.objects.create_user("bob")
    leads, staff = DirectoryGroup.objects.create(display_name="leads"), DirectoryGroup.objects.create(display_name="staff")
    start = mark()

    def changes(group: DirectoryGroup) -> list[Any]:
        return [e.changes["members"] for e in entries_since(start, kind="directory_group", object_pk=str(group.pk))]

    with acting("SCIM"):
        leads.members.add(ann, bob)
        ann.directory_groups.set([staff])  # out of leads, into staff
        leads.members.clear()  # bob alone is left to remove
        fin.directory_groups.add(staff)
        staff.members.remove(fin)
        ann.directory_groups.clear()
    assert changes(leads) == [
        {"type": "m2m", "operation": "add", "objects": ["ann", "bob"]},
        {"type": "m2m", "operation": "delete", "objects": ["ann"]},
        {"type": "m2m", "operation": "delete", "objects": ["bob"]},
    ]
    assert changes(staff) == [
        {"type": "m2m", "operation": "add", "objects": ["ann"]},
        {"type": "m2m", "operation": "add", "objects": ["fin"]},
        {"type": "m2m", "operation": "delete", "objects": ["fin"]},
        {"type": "m2m", "operation": "delete", "objects": ["ann"]},
    ]
    assert {e.actor_label for e in entries_since(start)} == {"SCIM"}
    assert not entries_since(start, kind="person")  # recorded on the group, not on the person


def test_budgets_created_changed_and_deleted(people: dict[str, User], owner: Any) -> None:
    fin, start = people["fin"], mark()
    client = signed_in(fin)
    body = {"scope": "project", "project": owner.project.slug, "amount_usd": "5000", "effective_from": "2026-01"}
    made = client.post("/api/v1/planning/budgets", body, format="json")
    assert made.status_code == 201, made.content
    budget_id = made.json()["id"]
    assert client.patch(f"/api/v1/planning/budgets/{budget_id}", {"amount_usd": "6000"}, format="json").status_code == 200
    assert client.delete(f"/api/v1/planning/budgets/{budget_id}").status_code == 204
    created, changed, deleted = entries_since(start, kind="budget")
    for entry in (created, changed, deleted):
        _by(entry, fin)
    assert _change(created, "amount_usd") == (None, "5000.00")
    assert _change(changed, "amount_usd") == ("5000.00", "6000.00")
    assert deleted.action == AuditEntry.Action.DELETE
    assert {e["kind"] for e in client.get("/api/v1/audit?kind=budget").json()["entries"]} == {"budget"}

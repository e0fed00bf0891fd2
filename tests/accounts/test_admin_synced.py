"""The Django admin refuses local edits of access the directory gives, with the people API's
sentence (phantomhub/accounts/admin.py, accounts/origins.py), and shows where access comes from."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from phantomhub.accounts.directory import user_sync
from phantomhub.accounts.models import DirectoryAccount, DirectoryGroup, GroupMappingRule, Membership, Profile, Role, Team

pytestmark = pytest.mark.django_db

LEAD = "ada's lead role in nlp comes from the identity provider's group nlp-leads (rule nlp-* → team lead)"
FINANCE = "ada's finance role comes from the identity provider's group finance (rule finance → finance)"


def _text(response: Any) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def synced() -> dict[str, Any]:
    nlp, vision = Team.objects.create(slug="nlp", name="nlp"), Team.objects.create(slug="vision", name="vision")
    GroupMappingRule.objects.create(pattern="nlp-*", grant="team_lead", team=nlp)
    GroupMappingRule.objects.create(pattern="finance", grant="finance")
    ada = get_user_model().objects.create_user("ada")
    DirectoryAccount.objects.create(user=ada, oidc_issuer="https://idp.example", oidc_subject="ada")
    for name in ("nlp-leads", "finance"):
        DirectoryGroup.objects.create(display_name=name).members.add(ada)
    user_sync(ada)
    local = Membership.objects.create(user=ada, team=vision, role=Role.VIEWER)
    return {"ada": ada, "nlp": nlp, "vision": vision, "synced": Membership.objects.get(user=ada, team=nlp), "local": local}


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("staff", password="pw"))
    return client


def test_a_synced_membership_cannot_be_changed_and_shows_its_source(staff: Client, synced: dict[str, Any]) -> None:
    url = f"/admin/accounts/membership/{synced['synced'].pk}/change/"
    page = staff.post(url, {"user": synced["ada"].pk, "team": synced["nlp"].pk, "role": "member"})
    assert page.status_code == 200 and LEAD in _text(page)  # the form again, with the sentence
    assert Membership.objects.get(pk=synced["synced"].pk).role == Role.ADMIN
    assert '<td class="field-source">Directory</td>' in _text(staff.get("/admin/accounts/membership/"))  # the source column

    local = f"/admin/accounts/membership/{synced['local'].pk}/change/"
    assert staff.post(local, {"user": synced["ada"].pk, "team": synced["vision"].pk, "role": "member"}).status_code == 302
    assert Membership.objects.get(pk=synced["local"].pk).role == Role.MEMBER


def test_a_synced_membership_cannot_be_deleted_alone_or_in_bulk(staff: Client, synced: dict[str, Any]) -> None:
    url = f"/admin/accounts/membership/{synced['synced'].pk}/delete/"
    page = staff.post(url, {"post": "yes"})
    assert LEAD in _text(page)
    bulk = {"action": "delete_selected", "_selected_action": [synced["synced"].pk, synced["local"].pk], "post": "yes"}
    assert LEAD in _text(staff.post("/admin/accounts/membership/", bulk))
    assert Membership.objects.count() == 2
    staff.post(f"/admin/accounts/membership/{synced['local'].pk}/delete/", {"post": "yes"})
    assert list(Membership.objects.all()) == [synced["synced"]]


def test_a_synced_flag_cannot_be_taken_off(staff: Client, synced: dict[str, Any]) -> None:
    profile = Profile.objects.get(user=synced["ada"])
    url = f"/admin/accounts/profile/{profile.pk}/change/"
    page = staff.post(url, {"user": synced["ada"].pk, "is_org_admin": "on"})  # finance unticked
    assert FINANCE in _text(page)
    profile.refresh_from_db()
    assert profile.is_finance and not profile.is_org_admin
    assert staff.post(url, {"user": synced["ada"].pk, "is_finance": "on", "is_org_admin": "on"}).status_code == 302
    profile.refresh_from_db()
    assert profile.is_org_admin  # a local flag, given by hand

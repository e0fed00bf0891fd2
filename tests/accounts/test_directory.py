"""The group mapping's sync (accounts/directory.py): exactly what the rules give, never a role
the mapping no longer gives, and nothing given by hand taken back."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from phantomhub.accounts.directory import Rule, grants_for, mapping_preview, user_sync
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


def _person(name: str, *groups: str):
    user = get_user_model().objects.create_user(name)
    DirectoryAccount.objects.create(user=user, oidc_issuer="https://idp.example", oidc_subject=name)
    for group in groups:
        DirectoryGroup.objects.get_or_create(display_name=group)[0].members.add(user)
    return user


def test_highest_team_role_wins_and_globs_match() -> None:
    rules = [Rule("ml-*", "team_member", 1), Rule("ml-nlp-leads", "team_lead", 1), Rule("fin", "finance")]
    grants = grants_for(["ml-nlp-leads"], rules)
    assert grants.teams == {1: Role.ADMIN} and grants.org == set()
    assert grants_for(["ML-nlp"], rules).teams == {}  # case-sensitive
    assert grants_for(["fin", "other"], rules).org == {"finance"}


def test_sync_gives_and_takes_back_only_what_it_gave() -> None:
    nlp = Team.objects.create(slug="nlp", name="nlp")
    vision = Team.objects.create(slug="vision", name="vision")
    GroupMappingRule.objects.create(pattern="nlp-*", grant="team_member", team=nlp)
    GroupMappingRule.objects.create(pattern="admins", grant="org_admin")
    ada = _person("ada", "nlp-research", "admins")
    Membership.objects.create(user=ada, team=vision, role=Role.VIEWER)  # by hand
    changes = user_sync(ada)
    assert {(c.action, c.grant, c.team) for c in changes} == {("join", "team", "nlp"), ("join", "org_admin", None)}
    assert Membership.objects.get(user=ada, team=nlp).source == Source.DIRECTORY
    assert Profile.objects.get(user=ada).is_org_admin
    DirectoryGroup.objects.get(display_name="admins").members.remove(ada)
    DirectoryGroup.objects.get(display_name="nlp-research").members.remove(ada)
    changes = user_sync(ada)
    assert {(c.action, c.grant) for c in changes} == {("leave", "team"), ("leave", "org_admin")}
    assert not Membership.objects.filter(user=ada, team=nlp).exists()
    assert not Profile.objects.get(user=ada).is_org_admin
    assert Membership.objects.get(user=ada, team=vision).source == Source.LOCAL  # left alone


def test_a_flag_set_by_hand_stays() -> None:
    root = _person("root")
    Profile.objects.create(user=root, is_org_admin=True)  # break-glass admin
    user_sync(root)
    assert Profile.objects.get(user=root).is_org_admin


def test_preview_writes_nothing() -> None:
    nlp = Team.objects.create(slug="nlp", name="nlp")
    for name in ("a", "b", "c"):
        _person(name, "nlp")
    changes = mapping_preview([Rule("nlp", "team_member", nlp.pk)])
    assert [(c.username, c.action, c.team, c.role) for c in changes] == [
        (name, "join", "nlp", Role.MEMBER) for name in ("a", "b", "c")
    ]
    assert not Membership.objects.exists()

"""People's access from the identity provider's groups (docs/identity.md, "Groups to teams and roles").

A person the directory knows (a `DirectoryAccount`, made by OIDC sign-in or SCIM) is in some
`DirectoryGroup`s; the group mapping (`GroupMappingRule`s) turns group names into grants. Their
synced access is exactly what the rules give now:

- a team membership with `source=directory` exists iff some rule gives a role in that team, with
  the highest such role (lead > member > viewer); a membership given by hand (`source=local`) is
  left alone, unless the mapping now gives that team, when it becomes synced;
- `Profile.is_org_admin` / `is_finance` are set when a rule gives them and cleared when none does,
  but only if the directory set them (`Profile.directory_flags`): a flag set by hand (the
  break-glass admin) stays.

`user_sync` applies that to one person (at each OIDC sign-in and each SCIM write);
`mapping_preview` says what a proposed set of rules would change, person by person, without
writing anything.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from phantomhub.accounts.models import (
    TEAM_GRANT_ROLES,
    DirectoryAccount,
    Grant,
    GroupMappingRule,
    Membership,
    Profile,
    Role,
    Source,
    Team,
)

ORG_FLAGS = {Grant.ORG_ADMIN: "is_org_admin", Grant.FINANCE: "is_finance"}
_ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2}


@dataclass(frozen=True)
class Rule:
    """A mapping rule as the matcher needs it (a stored one, or one proposed in Settings)."""

    pattern: str
    grant: str
    team_id: int | None = None

    def matches(self, group: str) -> bool:
        return fnmatch.fnmatchcase(group, self.pattern)


@dataclass
class Grants:
    """What the rules give one person: organization flags and a role per team id."""

    org: set[str] = field(default_factory=set)  # "org_admin", "finance"
    teams: dict[int, str] = field(default_factory=dict)  # team id -> Role


def stored_rules() -> list[Rule]:
    return [Rule(r.pattern, r.grant, r.team_id) for r in GroupMappingRule.objects.all()]


def grants_for(groups: Iterable[str], rules: Sequence[Rule]) -> Grants:
    grants = Grants()
    names = list(groups)
    for rule in rules:
        if not any(rule.matches(name) for name in names):
            continue
        if rule.grant in ORG_FLAGS:
            grants.org.add(rule.grant)
        elif rule.team_id is not None:
            role = TEAM_GRANT_ROLES[Grant(rule.grant)]
            current = grants.teams.get(rule.team_id)
            if current is None or _ROLE_RANK[Role(role)] > _ROLE_RANK[Role(current)]:
                grants.teams[rule.team_id] = role
    return grants


def _groups_of(user: Any) -> list[str]:
    return list(user.directory_groups.values_list("display_name", flat=True))


@dataclass(frozen=True)
class Change:
    """One change to one person's access: `grant` joined or left (in `team`, for team grants);
    `role` is the team role after a join (None for a leave and for organization flags)."""

    username: str
    action: str  # "join" | "leave" | "role"
    grant: str  # "org_admin" | "finance" | "team"
    team: str | None = None
    role: str | None = None


def _changes(user: Any, grants: Grants, teams: dict[int, str]) -> list[Change]:
    """What applying `grants` to `user` would change (nothing written)."""
    out: list[Change] = []
    profile = Profile.objects.filter(user=user).first()
    given = set(profile.directory_flags) if profile else set()
    for grant, flag in ORG_FLAGS.items():
        has = bool(profile and getattr(profile, flag))
        if grant in grants.org and not has:
            out.append(Change(user.username, "join", grant))
        elif grant not in grants.org and has and grant in given:
            out.append(Change(user.username, "leave", grant))
    current = {m.team_id: m for m in Membership.objects.filter(user=user)}
    for team_id, role in sorted(grants.teams.items(), key=lambda item: teams.get(item[0], "")):
        membership = current.get(team_id)
        if membership is None:
            out.append(Change(user.username, "join", "team", teams.get(team_id), role))
        elif membership.role != role:
            out.append(Change(user.username, "role", "team", teams.get(team_id), role))
    for team_id, membership in current.items():
        if team_id not in grants.teams and membership.source == Source.DIRECTORY:
            out.append(Change(user.username, "leave", "team", teams.get(team_id), membership.role))
    return out


@transaction.atomic
def user_sync(user: Any, *, rules: Sequence[Rule] | None = None) -> list[Change]:
    """Make `user`'s synced access what the mapping gives their directory groups now; returns
    what changed. Takes the person's row lock, so two sign-ins (or a sign-in and a SCIM write)
    apply one after the other."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    rules = stored_rules() if rules is None else rules
    grants = grants_for(_groups_of(user), rules)
    teams = dict(Team.objects.values_list("pk", "slug"))
    changes = _changes(user, grants, teams)
    profile, _ = Profile.objects.get_or_create(user=user)
    given = set(profile.directory_flags)
    for grant, flag in ORG_FLAGS.items():
        if grant in grants.org:
            if not getattr(profile, flag):
                setattr(profile, flag, True)
                given.add(grant)
        elif grant in given:
            setattr(profile, flag, False)
            given.discard(grant)
    profile.directory_flags = sorted(given)
    profile.save(update_fields=["is_org_admin", "is_finance", "directory_flags"])
    current = {m.team_id: m for m in Membership.objects.filter(user=user)}
    for team_id, role in grants.teams.items():
        membership = current.get(team_id)
        if membership is None:
            Membership.objects.create(user=user, team_id=team_id, role=role, source=Source.DIRECTORY)
        elif membership.role != role or membership.source != Source.DIRECTORY:
            membership.role, membership.source = role, Source.DIRECTORY
            membership.save(update_fields=["role", "source"])
    for team_id, membership in current.items():
        if team_id not in grants.teams and membership.source == Source.DIRECTORY:
            membership.delete()
    DirectoryAccount.objects.filter(user=user).update(synced_at=timezone.now())
    return changes


def mapping_preview(rules: Sequence[Rule]) -> list[Change]:
    """What replacing the stored mapping with `rules` would change for every person the
    directory knows, grouped by the caller (e.g. "14 people would join nlp as members")."""
    teams = dict(Team.objects.values_list("pk", "slug"))
    out: list[Change] = []
    users = get_user_model().objects.filter(directory__isnull=False, is_active=True).order_by("username")
    for user in users.prefetch_related("directory_groups"):
        groups = [group.display_name for group in user.directory_groups.all()]
        out.extend(_changes(user, grants_for(groups, rules), teams))
    return out

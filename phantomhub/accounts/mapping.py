"""Saving the group mapping and saying what it changes (docs/identity.md, "Groups to teams and roles").

`mapping_replace` swaps the stored rules for a new list and re-syncs everyone the directory knows
in the same transaction, so nobody keeps a role the new mapping no longer gives (not even until
their next sign-in). Deactivated people are re-synced too, so their stored memberships say the
truth, but their changes are reported apart: the preview, like the access itself, counts active
people only. Rules are replaced by difference (unchanged rows stay, the others are deleted
or created one by one), so each rule added or removed is one change in the audit trail.

`changes_grouped` turns the per-person changes of `accounts.directory` into what the editor says:
"14 people would join nlp as members".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Count, Q

from phantomhub.accounts.directory import Change, Rule, user_sync
from phantomhub.accounts.models import TEAM_GRANT_ROLES, DirectoryGroup, GroupMappingRule

MAX_RULES = 500
_ROLE_GRANTS = {role: grant for grant, role in TEAM_GRANT_ROLES.items()}  # Role -> Grant
_ACTION_ORDER = {"join": 0, "role": 1, "leave": 2}


@dataclass(frozen=True)
class MappingSaved:
    changes: list[Change]  # of active people: what the preview showed
    deactivated: list[str]  # deactivated people whose stored access changed too (it gives them nothing)
    synced: int  # people re-synced (everyone with a directory account, active or not)


def _saves_one_at_a_time() -> None:
    """Two saves at once must not mix (each deletes what it does not want, and on PostgreSQL's
    read committed the second would not see the first's new rows): the rules table is locked
    against other writers until the commit; sign-ins still read it. SQLite needs nothing: a
    writing transaction holds the whole database."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {GroupMappingRule._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")


@transaction.atomic
def mapping_replace(rules: Sequence[Rule]) -> MappingSaved:
    """Make the stored mapping exactly `rules` (already validated, no duplicates) and re-sync
    every directory person."""
    _saves_one_at_a_time()
    wanted = {(r.pattern, r.grant, r.team_id) for r in rules}
    kept: set[tuple[str, str, int | None]] = set()
    for row in GroupMappingRule.objects.order_by("pk"):
        key = (row.pattern, row.grant, row.team_id)
        if key in wanted and key not in kept:
            kept.add(key)
        else:  # not wanted, or a duplicate (an organization rule's NULL team escapes the unique constraint)
            row.delete()
    for rule in rules:
        key = (rule.pattern, rule.grant, rule.team_id)
        if key not in kept:
            GroupMappingRule.objects.create(pattern=rule.pattern, grant=rule.grant, team_id=rule.team_id)
            kept.add(key)
    people = get_user_model().objects.filter(directory__isnull=False).order_by("pk")
    changes: list[Change] = []
    deactivated: list[str] = []
    synced = 0
    for user in list(people):
        changed = user_sync(user, rules=list(rules))
        if user.is_active:
            changes.extend(changed)
        elif changed:
            deactivated.append(user.username)
        synced += 1
    return MappingSaved(sorted(changes, key=lambda c: c.username), sorted(deactivated), synced)


def directory_groups() -> list[dict[str, Any]]:
    """The directory's groups with their active members, for the editor to show what matches what."""
    groups = DirectoryGroup.objects.annotate(active=Count("members", filter=Q(members__is_active=True))).order_by("display_name")
    return [{"name": g.display_name, "members": g.active} for g in groups]


def rule_matches(rules: Sequence[Rule], groups: Sequence[str]) -> list[list[str]]:
    """For each rule, the names of the known groups its pattern matches."""
    return [[g for g in groups if rule.matches(g)] for rule in rules]


def change_grant(change: Change) -> str:
    """The grant a change is about: the organization flag, or the team grant of its role (the
    new role for a join or a role change, the role held for a leave)."""
    if change.grant != "team":
        return change.grant
    return str(_ROLE_GRANTS.get(change.role, change.role or ""))  # type: ignore[call-overload]


def changes_grouped(changes: Sequence[Change]) -> list[dict[str, Any]]:
    """{action, grant, team, people, count} per kind of change, organization flags first, then by
    team, joins before role changes before leaves."""
    groups: dict[tuple[str, str, str | None], list[str]] = defaultdict(list)
    for change in changes:
        groups[(change.action, change_grant(change), change.team)].append(change.username)
    ordered = sorted(
        groups.items(), key=lambda item: (item[0][2] is not None, item[0][2] or "", _ACTION_ORDER[item[0][0]], item[0][1])
    )
    return [
        {"action": action, "grant": grant, "team": team, "people": sorted(set(people)), "count": len(set(people))}
        for (action, grant, team), people in ordered
    ]


def changes_by_person(changes: Sequence[Change]) -> list[dict[str, Any]]:
    people: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for change in changes:
        people[change.username].append({"action": change.action, "grant": change_grant(change), "team": change.team})
    return [{"username": name, "changes": items} for name, items in sorted(people.items())]

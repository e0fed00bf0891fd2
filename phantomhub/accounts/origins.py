"""Where a person's access comes from, in words, and why a local edit of synced access is refused
(docs/identity.md, "Groups to teams and roles").

A membership with `source=directory`, or an organization flag the directory gave
(`Profile.directory_flags`), belongs to the group mapping: the next sign-in, SCIM write or mapping
save would put it back. Editing it by hand would only look like it worked, so the people API and
the Django admin refuse it with the same sentence, which names the group and the rule, e.g.
"ada's lead role in nlp comes from the identity provider's group nlp-leads (rule nlp-* → team
lead); change the group or the mapping".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phantomhub.accounts.directory import ORG_FLAGS, Rule, grants_for, stored_rules
from phantomhub.accounts.models import TEAM_GRANT_ROLES, Grant, Membership, Profile, Role, Source, Team

ROLE_WORDS = {Role.ADMIN: "lead", Role.MEMBER: "member", Role.VIEWER: "viewer"}
GRANT_WORDS = {
    Grant.ORG_ADMIN: "organization admin",
    Grant.FINANCE: "finance",
    Grant.TEAM_LEAD: "team lead",
    Grant.TEAM_MEMBER: "team member",
    Grant.TEAM_VIEWER: "team viewer",
}
FLAG_GRANTS = {flag: grant for grant, flag in ORG_FLAGS.items()}  # "is_org_admin" -> "org_admin"
_ADVICE = "change the group or the mapping"


class Refused(Exception):
    """A local edit of access that is refused with a sentence (the API answers 409 with it)."""

    code = "conflict"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SyncedAccess(Refused):
    """A local edit of access the directory gives (answered 409 by the API, a form error by the admin)."""

    code = "synced"


def _groups_of(user: Any) -> list[str]:
    return sorted(user.directory_groups.values_list("display_name", flat=True))


def _giver(groups: Sequence[str], rules: Sequence[Rule], wanted: Any) -> tuple[str, Rule] | None:
    """The first (group, rule) pair, by group name, whose rule satisfies `wanted`."""
    for group in groups:
        for rule in rules:
            if wanted(rule) and rule.matches(group):
                return group, rule
    return None


def _from(giver: tuple[str, Rule] | None) -> str:
    if giver is None:  # synced earlier by rules or groups since changed; the next sync takes it back
        return "the identity provider's groups at the last sync (no rule gives it now; the next sync removes it)"
    group, rule = giver
    return f"the identity provider's group {group} (rule {rule.pattern} → {GRANT_WORDS[Grant(rule.grant)]})"


def membership_origin(membership: Membership, *, groups: Sequence[str] | None = None, rules: Sequence[Rule] | None = None) -> str:
    """Where a synced membership comes from: "the identity provider's group nlp-leads (rule nlp-*
    → team lead)". `groups` and `rules` may be passed in when listing many people."""
    groups = _groups_of(membership.user) if groups is None else groups
    rules = stored_rules() if rules is None else rules
    giver = _giver(
        groups,
        rules,
        lambda r: (
            r.team_id == membership.team_id
            and r.grant in TEAM_GRANT_ROLES
            and TEAM_GRANT_ROLES[Grant(r.grant)] == membership.role
        ),
    )
    return _from(giver)


def flag_origin(user: Any, grant: str, *, groups: Sequence[str] | None = None, rules: Sequence[Rule] | None = None) -> str:
    groups = _groups_of(user) if groups is None else groups
    rules = stored_rules() if rules is None else rules
    return _from(_giver(groups, rules, lambda r: r.grant == grant))


def membership_refusal(membership: Membership) -> str | None:
    """The sentence refusing a local change to `membership`, or None when it is local."""
    if membership.source != Source.DIRECTORY:
        return None
    team = Team.objects.filter(pk=membership.team_id).values_list("slug", flat=True).first()
    role = ROLE_WORDS.get(Role(membership.role), membership.role)
    return f"{membership.user.get_username()}'s {role} role in {team} comes from {membership_origin(membership)}; {_ADVICE}"


def flag_refusal(user: Any, grant: str, *, on: bool) -> str | None:
    """The sentence refusing to set organization flag `grant` ("org_admin", "finance") to `on` by
    hand, or None when allowed: a flag the directory gave cannot be taken off, and a flag the
    mapping gives this person now cannot be taken off either (the next sync would put it back)."""
    profile = Profile.objects.filter(user=user).first()
    has = bool(profile and getattr(profile, ORG_FLAGS[Grant(grant)]))
    if on or not has:
        return None  # giving a flag by hand, or a no-op, never fights the directory
    name, words = user.get_username(), GRANT_WORDS[Grant(grant)]
    given = grant in (profile.directory_flags if profile else [])
    groups, rules = _groups_of(user), stored_rules()
    if given:
        return f"{name}'s {words} role comes from {flag_origin(user, grant, groups=groups, rules=rules)}; {_ADVICE}"
    if grant in grants_for(groups, rules).org:
        giver = flag_origin(user, grant, groups=groups, rules=rules)
        return f"{name}'s {words} role, given by hand, is also given by {giver}: it would come back at the next sync; {_ADVICE}"
    return None


def refuse_if_synced(message: str | None) -> None:
    if message is not None:
        raise SyncedAccess(message)

"""People and their access as Settings → People & groups lists and edits them (docs/identity.md,
"Groups to teams and roles").

Who may do what:
- organization admins see everyone (memberships, organization flags, directory groups, last
  sync) and edit every local membership and flag;
- a team's leads (role admin) see the people of the teams they lead, with only those teams'
  memberships, and add, change and remove local memberships of those teams; they see no
  organization flags or directory groups and change no flags.

Access the directory gave is refused here (accounts/origins.py), whoever asks.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Prefetch, Q, QuerySet

from phantomhub.accounts.directory import ORG_FLAGS, Rule, stored_rules
from phantomhub.accounts.models import Membership, Profile, Role, Source, Team
from phantomhub.accounts.origins import (
    FLAG_GRANTS,
    Refused,
    flag_origin,
    flag_refusal,
    membership_origin,
    membership_refusal,
    refuse_if_synced,
)
from phantomhub.accounts.permissions import is_org_admin


def teams_led(user: Any) -> set[int]:
    """Ids of the teams `user` leads (role admin, given by hand or by the directory)."""
    if getattr(user, "pk", None) is None:
        return set()
    return set(Membership.objects.filter(user_id=user.pk, role=Role.ADMIN).values_list("team_id", flat=True))


def may_manage_team(actor: Any, team: Team) -> bool:
    return is_org_admin(actor) or team.pk in teams_led(actor)


def people_visible(viewer: Any) -> QuerySet[Any]:
    users = get_user_model().objects.all()
    if is_org_admin(viewer):
        return users
    return users.filter(memberships__team_id__in=teams_led(viewer)).distinct()


def _membership_row(m: Membership, groups: list[str], rules: list[Rule]) -> dict[str, Any]:
    synced = m.source == Source.DIRECTORY
    return {
        "team": m.team.slug,
        "team_name": m.team.label,
        "role": m.role,
        "source": m.source,
        "origin": membership_origin(m, groups=groups, rules=rules) if synced else None,
    }


def _flag_rows(user: Any, profile: Profile | None, groups: list[str], rules: list[Rule]) -> list[dict[str, Any]]:
    rows = []
    for grant, flag in ORG_FLAGS.items():
        on = bool(profile and getattr(profile, flag))
        synced = on and grant in (profile.directory_flags if profile else [])
        source = (Source.DIRECTORY if synced else Source.LOCAL) if on else None
        origin = flag_origin(user, grant, groups=groups, rules=rules) if synced else None
        rows.append({"flag": flag, "on": on, "source": source, "origin": origin})
    return rows


def _rows(viewer: Any, users: QuerySet[Any]) -> list[dict[str, Any]]:
    """People as the viewer may see them: an organization admin everything; a team lead only the
    memberships of the teams they lead, and no flags, groups or last sync (None)."""
    admin = is_org_admin(viewer)
    memberships = Membership.objects.select_related("team").order_by("team__slug")
    if not admin:
        memberships = memberships.filter(team_id__in=teams_led(viewer))
    users = users.select_related("profile", "directory").prefetch_related(
        Prefetch("memberships", queryset=memberships), "directory_groups"
    )
    rules = stored_rules()
    rows = []
    for user in users:
        groups = sorted(g.display_name for g in user.directory_groups.all())
        directory = getattr(user, "directory", None)
        row = {
            "username": user.get_username(),
            "name": user.get_full_name(),
            "email": user.email,
            "is_active": user.is_active,
            "from_directory": directory is not None,
            "memberships": [_membership_row(m, groups, rules) for m in user.memberships.all()],
            "flags": None,
            "groups": None,
            "synced_at": None,
        }
        if admin:
            row |= {
                "flags": _flag_rows(user, getattr(user, "profile", None), groups, rules),
                "groups": groups,
                "synced_at": directory.synced_at.isoformat() if directory and directory.synced_at else None,
            }
        rows.append(row)
    return rows


def people_page(*, viewer: Any, q: str = "", page: int = 1, page_size: int = 100) -> dict[str, Any]:
    """One page of the people `viewer` may see, by username, with their access and its sources."""
    admin = is_org_admin(viewer)
    users = people_visible(viewer).order_by("username")
    if q:
        users = users.filter(
            Q(username__icontains=q) | Q(email__icontains=q) | Q(first_name__icontains=q) | Q(last_name__icontains=q)
        )
    total = users.count()
    teams = Team.objects.all() if admin else Team.objects.filter(pk__in=teams_led(viewer))
    return {
        "people": _rows(viewer, users[(page - 1) * page_size : page * page_size]),
        "count": total,
        "page": page,
        "page_size": page_size,
        "teams": [{"slug": t.slug, "name": t.label} for t in teams.order_by("slug")],  # the ones this viewer manages
        "can_edit_flags": admin,
    }


def person_view(*, viewer: Any, user: Any) -> dict[str, Any]:
    """One person as `viewer` sees them in the list (after an edit)."""
    return _rows(viewer, get_user_model().objects.filter(pk=user.pk))[0]


def _lock(user: Any) -> None:
    """The person's row lock, as user_sync takes it: a local edit and a sign-in's sync never interleave."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()


@transaction.atomic
def membership_set(*, user: Any, team: Team, role: str) -> Membership:
    """Give `user` `role` in `team` by hand (a new local membership, or a local one changed).
    A synced membership is refused unless nothing would change."""
    _lock(user)
    membership = Membership.objects.select_related("user").filter(user=user, team=team).first()
    if membership is None:
        return Membership.objects.create(user=user, team=team, role=role, source=Source.LOCAL)
    if membership.role == role:
        return membership
    refuse_if_synced(membership_refusal(membership))
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, user: Any, team: Team) -> bool:
    """Take `user` out of `team` by hand; False when they were not in it. A synced membership is refused."""
    _lock(user)
    membership = Membership.objects.select_related("user").filter(user=user, team=team).first()
    if membership is None:
        return False
    refuse_if_synced(membership_refusal(membership))
    membership.delete()
    return True


def _org_admins_left(without: Any) -> int:
    """Active organization admins other than `without` (flag holders and superusers)."""
    users = get_user_model().objects.filter(is_active=True).exclude(pk=without.pk)
    return users.filter(Q(is_superuser=True) | Q(profile__is_org_admin=True)).count()


@transaction.atomic
def org_flags_set(*, user: Any, changes: dict[str, bool]) -> Profile:
    """Set organization flags ("is_org_admin", "is_finance") by hand. Refused, naming every flag
    at fault: taking off a flag the directory gives, and taking the organization admin flag from
    the last active organization admin (nobody could give it back)."""
    _lock(user)
    refusals = [flag_refusal(user, FLAG_GRANTS[flag], on=on) for flag, on in changes.items()]
    refuse_if_synced("; ".join(r for r in refusals if r) or None)
    profile, _ = Profile.objects.get_or_create(user=user)
    if changes.get("is_org_admin") is False and profile.is_org_admin and not _org_admins_left(user):
        raise Refused(f"{user.get_username()} is the last organization admin; make someone else one first")
    for flag, on in changes.items():
        setattr(profile, flag, on)
    profile.save(update_fields=list(changes) or None)
    return profile

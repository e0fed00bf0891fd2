"""The writes SCIM makes (docs/identity.md "SCIM provisioning"). Each runs inside the request's
transaction (views.py), so a refusal part-way writes nothing.

- People: a SCIM User is a Django user with a `DirectoryAccount` (the SCIM id and externalId).
  A userName held by a local account (one without a directory account: the break-glass admin,
  people made by hand) is refused with 409: the directory never takes a local account over.
- `active: false` and DELETE deactivate at once (accounts/deprovision.py). DELETE also takes the
  person out of every directory group (so the mapping's roles go) and hides them from SCIM (404);
  the user row stays, so what they did keeps its actor, and a later create with the same
  userName takes the account back under a new id.
- Groups: after any change, `user_sync` (accounts/directory.py) runs for each person whose groups
  changed, so the roles the group mapping gives follow in the same transaction (not when no
  mapping rule matches the group: then nobody's access can change).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from phantomhub.accounts.deprovision import user_deactivate, user_reactivate
from phantomhub.accounts.directory import stored_rules, user_sync
from phantomhub.accounts.models import DirectoryAccount, DirectoryGroup
from phantomhub.accounts.scim.errors import bad, conflict
from phantomhub.accounts.scim.values import GroupFields, UserFields


def people() -> Any:
    """The people SCIM sees: directory accounts it has not deleted."""
    return get_user_model().objects.filter(directory__isnull=False, directory__scim_deleted_at__isnull=True)


def _username_free(username: str, user: Any = None) -> None:
    taken = get_user_model().objects.filter(username__iexact=username)
    if user is not None:
        taken = taken.exclude(pk=user.pk)
    other = taken.first()
    if other is None:
        return
    account = DirectoryAccount.objects.filter(user=other).first()
    if account is None:
        raise conflict(f"userName: {username!r} belongs to a local PhantomHub account, which the directory never takes over")
    if account.scim_deleted_at is not None:
        raise conflict(f"userName: {username!r} belongs to a person SCIM deleted (POST /Users takes them back)")
    raise conflict(f"userName: {username!r} is already provisioned (id {account.scim_id})")


def _apply(user: Any, fields: UserFields) -> None:
    user.username, user.email = fields.username, fields.email
    user.first_name, user.last_name = fields.given_name, fields.family_name
    user.save(update_fields=["username", "email", "first_name", "last_name"])


def _activity(user: Any, active: bool | None) -> None:
    if active is False:
        user_deactivate(user)  # also when already inactive: whatever they still hold stops
    elif active is True and not user.is_active:
        user_reactivate(user)


def user_create(fields: UserFields) -> Any:
    """A new person, inactive until `active: true` (RFC 7644 section 3.3); or a person SCIM
    deleted, taken back under a new id."""
    User = get_user_model()
    deleted = User.objects.filter(
        username__iexact=fields.username, directory__isnull=False, directory__scim_deleted_at__isnull=False
    ).first()
    if deleted is None:
        _username_free(fields.username)
        user = User(
            username=fields.username,
            email=fields.email,
            first_name=fields.given_name,
            last_name=fields.family_name,
            is_active=fields.active is True,
        )
        user.set_unusable_password()  # people from the directory sign in through it, never by password
        user.save()
        DirectoryAccount.objects.create(user=user, external_id=fields.external_id)
        return user
    DirectoryAccount.objects.filter(user=deleted).update(
        scim_id=uuid.uuid4(), scim_deleted_at=None, external_id=fields.external_id
    )
    _apply(deleted, fields)
    _activity(deleted, fields.active)
    return deleted


def user_update(user: Any, fields: UserFields) -> None:
    """PUT or PATCH: the person's attributes become `fields`; `active` as said (None keeps it)."""
    if fields.username.lower() != user.username.lower():
        _username_free(fields.username, user)
    _apply(user, fields)
    DirectoryAccount.objects.filter(user=user).update(external_id=fields.external_id)
    _activity(user, fields.active)


def user_delete(user: Any) -> None:
    groups = list(user.directory_groups.all())
    user.directory_groups.clear()
    DirectoryAccount.objects.filter(user=user).update(scim_deleted_at=timezone.now())
    user_deactivate(user)
    if groups:
        user_sync(user)


def members_resolve(ids: Iterable[uuid.UUID], where: str = "members") -> list[Any]:
    """The people the SCIM ids name, in order; 400 naming the first id SCIM does not know."""
    ids = list(ids)
    found = {account.scim_id: account.user for account in DirectoryAccount.objects.filter(
        scim_id__in=ids, scim_deleted_at__isnull=True
    ).select_related("user")}  # fmt: skip
    for i, scim_id in enumerate(ids):
        if scim_id not in found:
            raise bad(f"{where}[{i}].value: no User with id {scim_id}")
    return [found[scim_id] for scim_id in ids]


def _sync(users: Iterable[Any], *group_names: str) -> None:
    """`user_sync` for each of `users` whose groups changed: the groups named. A group no mapping
    rule matches gives nothing, so joining or leaving it changes no one's access and they are
    skipped (a person's sync costs ~20 ms; a group of thousands nobody maps costs none)."""
    rules = stored_rules()
    if group_names and not any(rule.matches(name) for rule in rules for name in group_names):
        return
    for user in sorted({u.pk: u for u in users}.values(), key=lambda u: u.pk):  # one lock order
        user_sync(user, rules=rules)


def _name_free(display_name: str, group: DirectoryGroup | None = None) -> None:
    taken = DirectoryGroup.objects.filter(display_name=display_name)
    if group is not None:
        taken = taken.exclude(pk=group.pk)
    other = taken.first()
    if other is not None:
        raise conflict(f"displayName: a group named {display_name!r} already exists (id {other.scim_id})")


def group_create(fields: GroupFields) -> DirectoryGroup:
    _name_free(fields.display_name)
    members = members_resolve(fields.members)
    group = DirectoryGroup.objects.create(display_name=fields.display_name, external_id=fields.external_id)
    group.members.set(members)
    _sync(members, group.display_name)
    return group


def group_update(group: DirectoryGroup, fields: GroupFields, members: list[Any]) -> None:
    """PUT or PATCH: name, externalId and the whole member list become these."""
    renamed, old_name = fields.display_name != group.display_name, group.display_name
    if renamed:
        _name_free(fields.display_name, group)
    before = {user.pk: user for user in group.members.all()}
    after = {user.pk: user for user in members}
    group.display_name, group.external_id = fields.display_name, fields.external_id
    group.save(update_fields=["display_name", "external_id"])
    group.members.set(list(after.values()))
    # A new name may match other mapping rules: then every member's access is looked at again.
    changed = (
        {**before, **after} if renamed else {pk: u for pk, u in {**before, **after}.items() if (pk in before) != (pk in after)}
    )
    _sync(changed.values(), old_name, fields.display_name)


def group_delete(group: DirectoryGroup) -> None:
    members, name = list(group.members.all()), group.display_name
    group.delete()
    _sync(members, name)

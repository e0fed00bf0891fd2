"""Saved views: who sees them, who changes them, and the writes (docs/portal-api.md, "Saved views").

A person sees their own views and the views shared with a team they are a member of (any role);
org admins and finance get nothing more, since a view is a person's or a team's, not spend. Only the
owner renames, shares or unshares; the owner, or a lead (admin) of the team it is shared with,
deletes. Every write goes through save()/delete() so the audit log records it
(phantomhub/audit/registration.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from phantomhub.accounts.models import Membership, Role, Team
from phantomhub.portal.models import SavedView
from phantomhub.portal.view_query import QueryError, query_clean

MAX_VIEWS_PER_PERSON = 200  # a sidebar list, not a store: past this, delete some first


class ViewRefused(ValueError):
    """A change refused; `field` names the request field at fault, `status` the HTTP answer."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


def views_visible(user: User) -> QuerySet[SavedView]:
    teams = Membership.objects.filter(user=user).values("team_id")
    return SavedView.objects.filter(Q(owner=user) | Q(team_id__in=teams)).select_related("owner", "team")


def view_deletable(user: User, view: SavedView) -> bool:
    if view.owner_id == user.pk:
        return True
    return view.team_id is not None and Membership.objects.filter(user=user, team_id=view.team_id, role=Role.ADMIN).exists()


def _team_of(user: User, slug: str | None) -> Team | None:
    """The team to share with: one the person belongs to; None (or "") keeps the view private."""
    if not slug:
        return None
    membership = Membership.objects.filter(user=user, team__slug=slug).select_related("team").first()
    if membership is None:
        raise ViewRefused("team", f"you are not a member of a team {slug[:64]!r}")
    return membership.team


def _saved(view: SavedView) -> SavedView:
    try:
        with transaction.atomic():
            view.save()
    except IntegrityError:
        raise ViewRefused("name", f"you already have a view named {view.name!r}", status=409) from None
    return view


@dataclass(frozen=True)
class ViewInput:
    name: str
    page: str
    query: str
    team: str | None


def view_create(*, owner: User, given: ViewInput) -> SavedView:
    try:
        query = query_clean(given.page, given.query)
    except QueryError as exc:
        raise ViewRefused(exc.field, str(exc)) from None
    team = _team_of(owner, given.team)
    if SavedView.objects.filter(owner=owner).count() >= MAX_VIEWS_PER_PERSON:
        raise ViewRefused("name", f"you have {MAX_VIEWS_PER_PERSON} saved views; delete some first", status=409)
    return _saved(SavedView(owner=owner, name=given.name, page=given.page, query=query, team=team))


_UNSET = object()


def view_update(*, user: User, view: SavedView, name: str | None = None, team: object = _UNSET) -> SavedView:
    """Rename, share (team: a slug) or unshare (team: None). The owner's alone."""
    if view.owner_id != user.pk:
        raise ViewRefused("view", "only its owner changes a saved view", status=403)
    if name is not None:
        view.name = name
    if team is not _UNSET:
        view.team = _team_of(user, team if isinstance(team, str) else None)
    return _saved(view)


def view_delete(*, user: User, view: SavedView) -> None:
    if not view_deletable(user, view):
        raise ViewRefused("view", "only its owner or a lead of the team it is shared with deletes a saved view", status=403)
    view.delete()

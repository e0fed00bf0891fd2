"""Reads for accounts: who may see which projects."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import ApiToken, Profile, Project, Role, TokenKind
from phantomhub.accounts.permissions import is_org_admin


def user_sees_everything(user: Any) -> bool:
    if getattr(user, "is_superuser", False):
        return True
    user_id = getattr(user, "pk", None)
    if user_id is None:
        return False
    profile = Profile.objects.filter(user_id=user_id).first()
    return bool(profile and (profile.is_finance or profile.is_org_admin))


def projects_visible(principal: Any) -> QuerySet[Project]:
    """Projects whose runs the principal may read: a project token sees its project; a person
    sees the projects of their teams; organization finance and admins see all."""
    if isinstance(principal, ProjectPrincipal):
        project = principal.project
        return Project.objects.filter(pk=project.pk) if project else Project.objects.none()
    if principal is None or not getattr(principal, "is_authenticated", False):
        return Project.objects.none()
    if user_sees_everything(principal):
        return Project.objects.all()
    return Project.objects.filter(team__memberships__user=principal)


def tokens_manageable(user: Any) -> QuerySet[ApiToken]:
    """The tokens a signed-in person may list, rotate and revoke: their own personal tokens, the
    project tokens of the projects they administer (organization admins: every project; a team's
    admins: its projects), and, for organization admins, the node and SCIM tokens (the organization's).
    Nobody manages another person's personal token; an admin deactivates the person instead."""
    tokens = ApiToken.objects.filter(kind=TokenKind.PERSONAL, user=user)
    if is_org_admin(user):
        return tokens | ApiToken.objects.filter(kind__in=[TokenKind.PROJECT, TokenKind.NODE, TokenKind.SCIM])
    return tokens | ApiToken.objects.filter(kind=TokenKind.PROJECT, project__in=projects_administered(user))


def projects_administered(user: Any) -> QuerySet[Project]:
    """The projects whose project tokens the person may create: all for organization admins, else
    those of the teams they are an admin of."""
    if is_org_admin(user):
        return Project.objects.all()
    return Project.objects.filter(team__memberships__user=user, team__memberships__role=Role.ADMIN)

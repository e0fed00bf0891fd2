"""Reads for accounts: who may see which projects."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import Profile, Project


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

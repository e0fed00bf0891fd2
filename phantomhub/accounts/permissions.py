"""DRF permissions for people: organization admins and finance."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from phantomhub.accounts.models import Profile


def is_org_admin(user: Any) -> bool:
    if getattr(user, "is_superuser", False):
        return True
    user_id = getattr(user, "pk", None)
    return user_id is not None and Profile.objects.filter(user_id=user_id, is_org_admin=True).exists()


class ReadAnyoneWriteOrgAdmin(BasePermission):
    """Reads for every authenticated caller; writes for organization admins only."""

    message = "changing this needs an organization admin"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_org_admin(request.user)


class OrgAdminOnly(BasePermission):
    message = "this needs an organization admin"

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and is_org_admin(request.user))

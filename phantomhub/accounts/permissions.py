"""DRF permissions: token scopes for every endpoint, then roles (organization admins, finance).

`TokenScopes` is the default permission (settings.REST_FRAMEWORK), and every role permission
below extends it, so a view that names its own permission classes keeps the token scopes:
- a personal token reads only: it acts with its owner's permissions on GET/HEAD/OPTIONS, and
  every other method is refused, whatever its owner may do when signed in;
- a project token reaches its own project's runs (ingest, and the reads of those runs) and
  nothing else: no price book, org settings, leaderboards, finance or token management;
- a node token (the node collector) reaches node telemetry ingest and nothing else;
- a SCIM token (the identity provider's) reaches nothing here: accounts/auth.py refuses it at
  authentication with 403, public endpoints included; /scim/v2/ takes it alone (accounts/scim/access.py);
- a signed-in session (no token) keeps its role-based writes, checked by the views and the role
  permissions below.
tests/test_access_matrix.py checks every endpoint of the URL conf against every principal.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import Profile, TokenKind

# URL names (phantomhub/telemetry/urls.py, phantomhub/portal/urls.py) of the endpoints a project
# token may reach: its runs. Which runs it sees is the views' business (projects_visible).
PROJECT_TOKEN_ENDPOINTS = frozenset(
    {
        "run-create",
        "run-detail",
        "run-steps",
        "run-steps-parquet",
        "run-samples",
        "run-events",
        "run-batch",
        "run-batches",
        "run-analysis",
        "run-series",
        "portal-runs",
        "portal-jobs",
        "portal-job",
        "portal-run",
    }
)

# The endpoints a node token may reach (phantomhub/fleet/urls.py): it writes node samples, reads nothing.
NODE_TOKEN_ENDPOINTS = frozenset({"node-samples"})


def is_org_admin(user: Any) -> bool:
    if getattr(user, "is_superuser", False):
        return True
    user_id = getattr(user, "pk", None)
    return user_id is not None and Profile.objects.filter(user_id=user_id, is_org_admin=True).exists()


def is_finance(user: Any) -> bool:
    user_id = getattr(user, "pk", None)
    return user_id is not None and Profile.objects.filter(user_id=user_id, is_finance=True).exists()


def is_personal_token(request: Request) -> bool:
    return getattr(request.auth, "kind", None) == TokenKind.PERSONAL


def _url_name(request: Request) -> str | None:
    match = getattr(request._request, "resolver_match", None)
    return match.url_name if match is not None else None


class TokenScopes(BasePermission):
    """Authenticated, and within what the credential allows (see the module docstring)."""

    message = "authentication required"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if getattr(request.auth, "kind", None) == TokenKind.NODE:
            if _url_name(request) not in NODE_TOKEN_ENDPOINTS:
                self.message = "a node token may only send node telemetry"
                return False
            return True
        if isinstance(user, ProjectPrincipal):
            if _url_name(request) not in PROJECT_TOKEN_ENDPOINTS:
                self.message = "a project token reaches its own project's runs only"
                return False
            return True
        if is_personal_token(request) and request.method not in SAFE_METHODS:
            self.message = "personal tokens are read-only; sign in to change things"
            return False
        return True


class ReadAnyoneWriteOrgAdmin(TokenScopes):
    """Reads for every caller the token scopes let through; writes for organization admins only."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if request.method in SAFE_METHODS or is_org_admin(request.user):
            return True
        self.message = "changing this needs an organization admin"
        return False


class OrgAdminOrFinanceReads(TokenScopes):
    """Organization admins; finance people read too (the price book's audit trail)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if is_org_admin(request.user) or (request.method in SAFE_METHODS and is_finance(request.user)):
            return True
        self.message = "this needs an organization admin (finance people may read it)"
        return False


class OrgAdminOnly(TokenScopes):
    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if is_org_admin(request.user):
            return True
        self.message = "this needs an organization admin"
        return False

"""Writes for accounts: teams, projects, tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from phantomhub.accounts.models import ApiToken, Project, Team, TokenKind
from phantomhub.accounts.token_cache import token_cache_forget

TOKEN_PREFIX = "phk_"
_VISIBLE = 12  # "phk_" + 8 characters shown in listings


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    raw: str  # shown once, never stored


def team_get_or_create(*, slug: str, name: str | None = None) -> Team:
    team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return team


def project_get_or_create(*, team: Team, slug: str, name: str | None = None) -> Project:
    project, created = Project.objects.get_or_create(slug=slug, defaults={"team": team, "name": name or slug})
    if not created and project.team_id != team.pk:
        raise ValueError(f"project {slug!r} already belongs to team {project.team.slug!r}")
    return project


def _issue(**owner: object) -> IssuedToken:
    raw = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = ApiToken.objects.create(prefix=raw[:_VISIBLE], digest=token_digest(raw), **owner)
    return IssuedToken(token=token, raw=raw)


def project_token_create(*, project: Project, name: str = "") -> IssuedToken:
    return _issue(kind=TokenKind.PROJECT, project=project, name=name)


def personal_token_create(*, user: AbstractBaseUser, name: str = "") -> IssuedToken:
    return _issue(kind=TokenKind.PERSONAL, user=user, name=name)


def scim_token_create(*, name: str = "") -> IssuedToken:
    """The identity provider's SCIM token: reaches /scim/v2/ and nothing else (accounts/scim/access.py)."""
    return _issue(kind=TokenKind.SCIM, name=name)


@transaction.atomic
def project_token_for_slugs(*, team_slug: str, project_slug: str, name: str = "") -> IssuedToken:
    team = team_get_or_create(slug=team_slug)
    project = project_get_or_create(team=team, slug=project_slug)
    return project_token_create(project=project, name=name)


def token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token_cache_forget(token.digest)  # other web processes refuse it within TOKEN_CACHE_S

"""Writes for accounts: teams, projects, tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from phantomhub.accounts.models import ApiToken, Project, Team, TokenKind
from phantomhub.accounts.token_cache import token_cache_forget
from phantomhub.accounts.token_life import stamp, token_refusal
from phantomhub.errors import ApiError, invalid

TOKEN_PREFIX = "phk_"
_VISIBLE = 12  # "phk_" + 8 characters shown in listings
# The longest a token may be made to last, and the longest overlap a rotation may ask for.
TOKEN_MAX_EXPIRY_DAYS = 730
TOKEN_MAX_OVERLAP_S = 30 * 86400


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


def token_expiry(*, expires_in_days: object = None, expires_at: object = None, now: datetime | None = None) -> datetime | None:
    """When a new token expires: `expires_in_days` (whole days) or `expires_at` (a time), at most
    one of them; neither gives PHANTOMHUB_TOKEN_DEFAULT_EXPIRY_DAYS (0: never). 400 naming the
    field unless it falls between now and TOKEN_MAX_EXPIRY_DAYS from now."""
    now = now or timezone.now()
    if expires_in_days is not None and expires_at is not None:
        raise invalid("expires_at", "give expires_in_days or expires_at, not both")
    if expires_in_days is not None:
        if isinstance(expires_in_days, bool) or not isinstance(expires_in_days, int):
            raise invalid("expires_in_days", "must be a whole number of days")
        if not 1 <= expires_in_days <= TOKEN_MAX_EXPIRY_DAYS:
            raise invalid("expires_in_days", f"must be between 1 and {TOKEN_MAX_EXPIRY_DAYS}")
        return now + timedelta(days=expires_in_days)
    if expires_at is not None:
        if not isinstance(expires_at, datetime):
            raise invalid("expires_at", "must be an ISO 8601 time with its offset, e.g. 2027-06-01T00:00:00Z")
        if timezone.is_naive(expires_at):
            raise invalid("expires_at", "needs a time zone offset (Z or +hh:mm)")
        if expires_at <= now:
            raise invalid("expires_at", "must be in the future")
        if expires_at > now + timedelta(days=TOKEN_MAX_EXPIRY_DAYS):
            raise invalid("expires_at", f"must be within {TOKEN_MAX_EXPIRY_DAYS} days")
        return expires_at
    days = settings.TOKEN_DEFAULT_EXPIRY_DAYS
    return now + timedelta(days=days) if days else None


def token_name(name: str | None) -> str:
    return (name or "").strip() or "unnamed"


def token_issue(
    *,
    kind: str,
    name: str | None,
    project: Project | None = None,
    user: Any = None,
    created_by: Any = None,
    hostnames: list[str] | None = None,
    expires_at: datetime | None = None,
) -> IssuedToken:
    """A new token of any kind; its raw value is in the answer and nowhere else."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = ApiToken.objects.create(
        kind=kind,
        project=project,
        user=user,
        created_by=created_by,
        name=token_name(name),
        hostnames=hostnames or [],
        expires_at=expires_at,
        prefix=raw[:_VISIBLE],
        digest=token_digest(raw),
    )
    return IssuedToken(token=token, raw=raw)


def project_token_create(
    *, project: Project, name: str = "", created_by: AbstractBaseUser | None = None, expires_at: datetime | None = None
) -> IssuedToken:
    return token_issue(kind=TokenKind.PROJECT, project=project, name=name, created_by=created_by, expires_at=expires_at)


def personal_token_create(*, user: AbstractBaseUser, name: str = "", expires_at: datetime | None = None) -> IssuedToken:
    return token_issue(kind=TokenKind.PERSONAL, user=user, name=name, created_by=user, expires_at=expires_at)


def scim_token_create(*, name: str = "", created_by: Any = None, expires_at: datetime | None = None) -> IssuedToken:
    """The identity provider's SCIM token: reaches /scim/v2/ and nothing else (accounts/scim/access.py)."""
    return token_issue(kind=TokenKind.SCIM, name=name, created_by=created_by, expires_at=expires_at)


@transaction.atomic
def project_token_for_slugs(*, team_slug: str, project_slug: str, name: str = "") -> IssuedToken:
    team = team_get_or_create(slug=team_slug)
    project = project_get_or_create(team=team, slug=project_slug)
    return project_token_create(project=project, name=name, expires_at=token_expiry())


def token_rotate(*, token: ApiToken, overlap_s: int | None = None) -> IssuedToken:
    """A new token in the old one's place (same kind, project, owner, hostnames, name, and
    lifetime: an old token made to last 90 days gives one that lasts 90 days from now); the old
    one keeps working for `overlap_s` more seconds (PHANTOMHUB_TOKEN_ROTATION_OVERLAP_S when None;
    0: it stops at once) so its users can move over without a gap. 409 when the old one is
    revoked, expired or already rotated: nothing to hand over."""
    overlap = settings.TOKEN_ROTATION_OVERLAP_S if overlap_s is None else overlap_s
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= TOKEN_MAX_OVERLAP_S:
        raise invalid("overlap_s", f"must be a whole number of seconds between 0 and {TOKEN_MAX_OVERLAP_S}")
    with transaction.atomic():
        old = ApiToken.objects.select_for_update().get(pk=token.pk)
        now = timezone.now()
        refusal = token_refusal(old, now)
        if refusal is not None:
            raise ApiError("conflict", f"{refusal}: only a working token is rotated", status_code=409)
        if old.replaced_by_id is not None:
            assert old.overlap_ends_at is not None
            raise ApiError(
                "conflict",
                f"token {old.prefix}… was already rotated; its overlap ends at {stamp(old.overlap_ends_at)}",
                status_code=409,
            )
        lifetime = old.expires_at - old.created_at if old.expires_at is not None else None
        issued = token_issue(
            kind=old.kind,
            name=old.name,
            project=old.project,
            user=old.user,
            created_by=old.created_by,
            hostnames=list(old.hostnames or []),
            expires_at=now + lifetime if lifetime is not None else None,
        )
        old.replaced_by = issued.token
        old.overlap_ends_at = now + timedelta(seconds=overlap)
        old.save(update_fields=["replaced_by", "overlap_ends_at"])
    token_cache_forget(old.digest)  # this process sees the overlap's end at once; others within TOKEN_CACHE_S
    return issued


def token_revoke(*, token: ApiToken) -> None:
    # Through save(), not a queryset update: the audit log records model saves (docs/audit.md).
    # The row lock keeps a second revoke from writing (or recording) a second time.
    with transaction.atomic():
        row = ApiToken.objects.select_for_update().filter(pk=token.pk, revoked_at__isnull=True).first()
        if row is not None:
            row.revoked_at = timezone.now()
            row.save(update_fields=["revoked_at"])
    token_cache_forget(token.digest)  # other web processes refuse it within TOKEN_CACHE_S

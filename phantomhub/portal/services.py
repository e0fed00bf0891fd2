"""Writes for the portal: closing and reopening finance months, organization settings, display
names of teams and projects."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.db import IntegrityError, transaction

from phantomhub.accounts.models import Membership, Project, Role, Team
from phantomhub.accounts.permissions import is_org_admin
from phantomhub.errors import ApiError
from phantomhub.portal.finance import finance_review
from phantomhub.portal.models import ClosedMonth
from phantomhub.portal.periods import Period
from phantomhub.waste.model import CATEGORIES, recoverability_check
from phantomhub.waste.models import OrgSettings
from phantomhub.waste.services import analyses_invalidate


def month_close(*, period: Period, actor: Any) -> ClosedMonth:
    """Freeze the month's review as it stands: late telemetry no longer moves its figures."""
    review = finance_review(period=period)
    try:
        with transaction.atomic():
            return ClosedMonth.objects.create(month=period.start, closed_by=actor, snapshot=review)
    except IntegrityError:
        raise ApiError("conflict", f"{period.label} is already closed", status_code=409) from None


def month_reopen(*, month: date) -> None:
    if not ClosedMonth.objects.filter(month=month).delete()[0]:
        raise ApiError("conflict", "that month is not closed", status_code=409)


def org_settings_update(*, changes: dict[str, Any]) -> OrgSettings:
    row = OrgSettings.get()
    if "recoverability" in changes:
        try:
            recoverability_check(changes["recoverability"])
        except ValueError as exc:
            raise ApiError("invalid", f"recoverability: {exc}", fields={"recoverability": str(exc)}) from None
        changes["recoverability"] = {k: float(v) for k, v in changes["recoverability"].items() if k in CATEGORIES}
    for field, value in changes.items():
        setattr(row, field, value)
    row.save()
    if {"target_mfu", "recoverability"} & set(changes):
        analyses_invalidate()  # every run's dollars of inefficiency and recoverable spend move
    return row


def user_may_rename(*, user: Any, team: Team) -> bool:
    """Organization admins name every team and project; a team's admins name theirs."""
    if is_org_admin(user):
        return True
    return Membership.objects.filter(user=user, team=team, role=Role.ADMIN).exists()


def display_name_set(*, entity: Team | Project, display_name: str) -> None:
    """What people read for a team or project; blank goes back to the slug."""
    entity.display_name = display_name.strip()
    entity.save(update_fields=["display_name"])

"""Writes for the portal: closing and reopening finance months, organization settings."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.db import IntegrityError, transaction

from phantomhub.errors import ApiError
from phantomhub.portal.models import ClosedMonth
from phantomhub.portal.periods import Period
from phantomhub.portal.selectors import finance_review
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

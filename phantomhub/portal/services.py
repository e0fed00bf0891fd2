"""Writes for the portal: closing and reopening finance months, organization settings, display
names of teams and projects."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.db import IntegrityError, transaction

from phantomhub.accounts.models import Membership, Project, Role, Team
from phantomhub.accounts.permissions import is_org_admin
from phantomhub.errors import ApiError, invalid
from phantomhub.periods import Period
from phantomhub.portal.finance import finance_review, month_close_refusal
from phantomhub.portal.models import ClosedMonth, ClosedProjectDay, ClosedRunDay, MonthAction, MonthLog, PolicyChange
from phantomhub.waste.core.inputs import MODEL_VERSION
from phantomhub.waste.core.model import CATEGORIES, recoverability_check
from phantomhub.waste.models import OrgSettings, ProjectDay, RunDay
from phantomhub.waste.scheduling import analyses_invalidate


def month_close(*, period: Period, actor: Any) -> ClosedMonth:
    """Freeze the month: its run-days and project-days, with the prices and the waste model that
    computed them, are copied aside, and every page reading the month reads the copy. Late
    telemetry, price, policy and model changes move the live rollups only. The current month (its
    runs still live) and a month without spend cannot be closed."""
    refusal = month_close_refusal(period)
    if refusal is not None:
        raise ApiError("invalid", refusal, fields={"month": refusal})
    in_month = {"day__gte": period.start, "day__lte": period.end}
    try:
        with transaction.atomic():
            if ClosedMonth.objects.select_for_update().filter(month=period.start).exists():
                raise IntegrityError
            closed = ClosedMonth.objects.create(
                month=period.start, last_day=period.end, closed_by=actor if getattr(actor, "pk", None) else None,
                snapshot={}, model_version=MODEL_VERSION,
            )  # fmt: skip
            _freeze_days(closed, in_month)
            # The review from the copy just made, so the two agree whatever analysis commits meanwhile.
            closed.snapshot = finance_review(period=period, live=False)
            closed.save(update_fields=["snapshot"])
            MonthLog.objects.create(month=period.start, action=MonthAction.CLOSE, actor=closed.closed_by,
                                    totals=closed.snapshot["totals"])  # fmt: skip
            return closed
    except IntegrityError:
        raise ApiError("conflict", f"{period.label} is already closed", status_code=409) from None


_FIGURES = ("day", "project_id", "team_id", "gpu_seconds", "cost_usd", "categories_usd", "waste_usd", "recoverable_usd",
            "lost_usd", "mfu_gpu_seconds", "mfu_known_gpu_seconds")  # fmt: skip


def _freeze_days(closed: ClosedMonth, in_month: dict[str, Any]) -> None:
    ClosedRunDay.objects.bulk_create(
        (
            ClosedRunDay(
                month=closed,
                run_id=d.run_id,
                gpu_key=d.gpu_key,
                price_entry_ids=d.price_entry_ids,
                **{k: getattr(d, k) for k in _FIGURES},
            )
            for d in RunDay.objects.filter(**in_month).iterator(chunk_size=2000)
        ),
        batch_size=2000,
    )
    ClosedProjectDay.objects.bulk_create(
        (ClosedProjectDay(month=closed, runs=d.runs, **{k: getattr(d, k) for k in _FIGURES})
         for d in ProjectDay.objects.filter(**in_month).iterator(chunk_size=2000)),
        batch_size=2000,
    )  # fmt: skip


def month_reopen(*, month: date, actor: Any, reason: str) -> None:
    """Reopen a closed month: its frozen copy goes, its pages follow the live rollups again. Who,
    when, why and the totals it was closed with stay in the month's log."""
    reason = reason.strip()
    with transaction.atomic():
        closed = ClosedMonth.objects.select_for_update().filter(month=month).first()
        if closed is None:
            raise ApiError("conflict", "that month is not closed", status_code=409)
        if not reason:
            raise invalid("reason", "say why the month is reopened (it is recorded with your name)")
        MonthLog.objects.create(month=month, action=MonthAction.REOPEN, actor=actor if getattr(actor, "pk", None) else None,
                                reason=reason[:500], totals=closed.snapshot.get("totals", {}))  # fmt: skip
        closed.delete()


def org_settings_update(*, changes: dict[str, Any], actor: Any = None) -> OrgSettings:
    row = OrgSettings.get()
    before = {field: getattr(row, field) for field in _MONEY_SETTINGS if field in changes}
    if "recoverability" in changes:
        try:
            recoverability_check(changes["recoverability"])
        except ValueError as exc:
            raise ApiError("invalid", f"recoverability: {exc}", fields={"recoverability": str(exc)}) from None
        changes["recoverability"] = {k: float(v) for k, v in changes["recoverability"].items() if k in CATEGORIES}
    for field, value in changes.items():
        setattr(row, field, value)
    row.save()
    if set(_MONEY_SETTINGS) & set(changes):
        after = {field: getattr(row, field) for field in before}
        if after != before:  # recorded: a closed month names it beside its adjustment
            PolicyChange.objects.create(actor=actor if getattr(actor, "pk", None) else None, before=before, after=after)
        analyses_invalidate()  # every run's dollars of inefficiency and recoverable spend move
    return row


_MONEY_SETTINGS = ("target_mfu", "recoverability")


def user_may_rename(*, user: Any, team: Team) -> bool:
    """Organization admins name every team and project; a team's admins name theirs."""
    if is_org_admin(user):
        return True
    return Membership.objects.filter(user=user, team=team, role=Role.ADMIN).exists()


def display_name_set(*, entity: Team | Project, display_name: str) -> None:
    """What people read for a team or project; blank goes back to the slug."""
    entity.display_name = display_name.strip()
    entity.save(update_fields=["display_name"])

"""Reads: who sees which subscriptions and deliveries (docs/reports.md, "Who may do what").

A person sees and changes their own subscriptions; organization admins see and change everyone's
(they manage the channel subscriptions: webhooks). Finance gets nothing more: a subscription is a
person's standing order, not spend.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from phantomhub.accounts.permissions import is_org_admin
from phantomhub.reports.models import ReportDelivery, Subscription


def subscriptions_visible(user: Any) -> QuerySet[Subscription]:
    rows = Subscription.objects.select_related("owner", "team", "project", "saved_view")
    return rows if is_org_admin(user) else rows.filter(owner_id=getattr(user, "pk", None))


def deliveries_visible(user: Any) -> QuerySet[ReportDelivery]:
    rows = ReportDelivery.objects.select_related("subscription", "subscription__owner")
    return rows if is_org_admin(user) else rows.filter(subscription__owner_id=getattr(user, "pk", None))

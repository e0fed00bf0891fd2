"""Writes: subscriptions, the claim of a period, and the delivery attempts (docs/reports.md).

reports_send() is what Celery beat (tasks.reports_send) and the embedded sweeper call. For each
enabled subscription past its due time it reads the period the latest due moment reports, builds
the report, and **claims** the period: one transaction inserts the period's delivery rows (unique
per subscription, period and channel) and moves the subscription's next due time on. Then every
pending delivery whose time has come is attempted, counted before it is made (as the alerts'):

- two sweepers, or beat and a sweeper, or a pass after a restart, claim a period once: the second
  insert violates the unique constraint and that transaction claims nothing;
- a crash after the claim and before the send leaves the rows pending: the next pass sends them
  (a claim's rows are due at once), with the figures fixed at the claim;
- a row marked sent is never attempted again (only pending rows are); one lost in a crash during
  its send is retried, up to REPORT_MAX_ATTEMPTS: at least once, and never twice once recorded.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.utils import timezone

from phantomhub import egress, sending
from phantomhub.reports import render
from phantomhub.reports.content import Report, ReportRefused, report_build
from phantomhub.reports.models import DeliveryChannel, DeliveryStatus, ReportDelivery, Subscription, WebhookFormat
from phantomhub.reports.schedule import ReportPeriod, Schedule, last_due, next_due, period_of

log = logging.getLogger(__name__)
CLAIM_S = 120  # an attempt in progress is not attempted by anyone else for this long
BUILD_RETRY_S = 300  # a report that could not be built (a defect, the database away) is tried again after this


@dataclass
class SendResult:
    claimed: int = 0  # periods claimed this pass
    refused: int = 0  # periods whose report the subscriber may not read (logged as failed)
    sent: int = 0
    failed: int = 0  # attempts that failed (some are retried)


def schedule_of(sub: Subscription) -> Schedule:
    return Schedule(cadence=sub.cadence, hour=sub.hour, minute=sub.minute, tz=sub.timezone,
                    day_of_month=sub.day_of_month, weekday=sub.weekday)  # fmt: skip


def subscription_save(*, sub: Subscription, changes: dict[str, Any], now: datetime | None = None) -> Subscription:
    """Create or change a subscription; its next due time follows its (new) schedule. A period
    already claimed is not sent again by a schedule moved back over it (the unique claim). One
    edited while due (after its due time, before the sender's pass) stays due: the pass sends
    the period the new schedule's latest due moment reports, rather than the edit skipping it."""
    moment = now or timezone.now()
    due_before = sub.pk is not None and sub.next_due_at is not None and sub.next_due_at <= moment
    for key, value in changes.items():
        setattr(sub, key, value)
    if not sub.enabled:
        sub.next_due_at = None
    elif not due_before:
        sub.next_due_at = next_due(schedule_of(sub), moment)
    sub.save()
    return sub


def _rows(sub: Subscription, period: ReportPeriod, report: Report | None, refusal: str, now: datetime) -> list[ReportDelivery]:
    """The period's delivery rows, one per channel: pending (due `now`) with the report fixed in
    them, or failed with the reason when there is no report to send."""
    base: dict[str, Any] = {"subscription": sub, "period_key": period.key, "period_start": period.start,
                            "period_end": period.end}  # fmt: skip
    if report is None:
        base |= {"status": DeliveryStatus.FAILED, "error": egress.text_clean(refusal, max_chars=500)}
    else:
        base |= {"totals": report.totals, "note": report.note, "next_attempt_at": now}
    rows = []
    if sub.email_to:
        fields = {} if report is None else {
            "subject": render.email_subject(report), "body": render.email_text(report), "html": render.email_html(report),
            "attachment_name": report.csv_name, "attachment": report.csv,
        }  # fmt: skip
        rows.append(ReportDelivery(channel=DeliveryChannel.EMAIL, target=", ".join(sub.email_to), **base, **fields))
    if sub.webhook_url:
        body = ""
        if report is not None:
            raw = (
                render.webhook_slack(report)
                if sub.webhook_format == WebhookFormat.SLACK
                else render.webhook_generic(report, subscription_id=sub.pk)
            )
            body = json.dumps(raw, sort_keys=True)
        rows.append(ReportDelivery(channel=DeliveryChannel.WEBHOOK, target=sub.webhook_url, body=body, **base))
    return rows


def period_claim(*, sub: Subscription, now: datetime) -> str:
    """Claim the period the latest due moment of `sub` reports: "claimed", "refused" (claimed, the
    report refused and logged), "taken" (claimed before: a restart, another sweeper) or "skipped"
    (no longer due, disabled or deleted meanwhile)."""
    schedule = schedule_of(sub)
    period = period_of(schedule, last_due(schedule, now))
    report, refusal = None, ""
    if not ReportDelivery.objects.filter(subscription=sub, period_key=period.key).exists():
        try:
            report = report_build(sub, period, now=now)
        except ReportRefused as exc:
            refusal = str(exc)
    with transaction.atomic():
        locked = Subscription.objects.select_for_update().filter(pk=sub.pk, enabled=True, next_due_at__lte=now).first()
        if locked is None:
            return "skipped"
        locked.next_due_at = next_due(schedule, now)
        locked.save(update_fields=["next_due_at"])
        if report is None and not refusal:
            return "taken"
        try:
            with transaction.atomic():  # a savepoint: the claim's insert fails alone
                ReportDelivery.objects.bulk_create(_rows(locked, period, report, refusal, now))
        except IntegrityError:
            return "taken"
    return "claimed" if report is not None else "refused"


def periods_claim_due(*, now: datetime) -> tuple[int, int]:
    """Claim every due subscription's period; returns (claimed, refused). One that fails to build
    in an unexpected way is logged and tried again after BUILD_RETRY_S, the others go on."""
    claimed = refused = 0
    due = Subscription.objects.filter(enabled=True, next_due_at__lte=now).select_related("owner", "team", "project")
    for sub in due.order_by("next_due_at", "id")[:200]:
        try:
            outcome = period_claim(sub=sub, now=now)
        except Exception:
            log.exception("report subscription %s: the report could not be built; tried again later", sub.pk)
            Subscription.objects.filter(pk=sub.pk).update(next_due_at=now + timedelta(seconds=BUILD_RETRY_S))
            continue
        claimed += outcome == "claimed"
        refused += outcome == "refused"
    return claimed, refused


def _send(item: ReportDelivery) -> sending.Attempt:
    if item.channel == DeliveryChannel.WEBHOOK:
        return sending.webhook_post(
            url=item.target, body=item.body.encode(), secret=item.subscription.webhook_secret,
            delivery_id=f"report-{item.pk}", user_agent="PhantomHub-Reports/1", timeout_s=settings.ALERT_WEBHOOK_TIMEOUT_S,
        )  # fmt: skip
    to = [a.strip() for a in item.target.split(",") if a.strip()]
    message = EmailMultiAlternatives(egress.text_clean(item.subject, max_chars=250), item.body, settings.DEFAULT_FROM_EMAIL, to)
    message.attach_alternative(item.html, "text/html")
    message.attach(item.attachment_name, item.attachment, "text/csv")
    return sending.email_send(message)


OUTBOX = sending.Outbox(
    model=ReportDelivery, send=lambda item: _send(item), max_attempts=lambda: settings.REPORT_MAX_ATTEMPTS,
    retry_base_s=lambda: settings.REPORT_RETRY_BASE_S, claim_s=CLAIM_S, related=("subscription",), label="report delivery",
)  # fmt: skip


def delivery_attempt(*, item: ReportDelivery) -> ReportDelivery:
    """One attempt, counted (and its retry scheduled) before it is made (sending.delivery_attempt)."""
    result: ReportDelivery = sending.delivery_attempt(OUTBOX, item)
    return result


def deliveries_send_due(*, now: datetime | None = None, limit: int = 200) -> tuple[int, int]:
    """Attempt every pending delivery whose time has come (sending.deliveries_send_due)."""
    return sending.deliveries_send_due(OUTBOX, now=now, limit=limit)


def reports_send(*, now: datetime | None = None) -> SendResult:
    """Claim the due periods, then attempt the due deliveries. A pass with nothing due reads the
    subscriptions' due index and the deliveries' due index, and nothing else."""
    now = now or timezone.now()
    result = SendResult()
    try:
        result.claimed, result.refused = periods_claim_due(now=now)
    except Exception:
        log.exception("due report subscriptions could not be read")
    try:
        result.sent, result.failed = deliveries_send_due(now=now)
    except Exception:
        log.exception("due report deliveries could not be read")
    return result

"""Scheduled reports: subscriptions and their delivery log (docs/reports.md).

A Subscription is one person's (or, set by an organization admin, a channel's) standing order for
a report: the finance review of a month, a team's or project's weekly digest, or a saved view, sent
by email and/or webhook at a wall-clock time in a time zone. A ReportDelivery is one channel's
message for one period; its unique (subscription, period, channel) is what makes a report go out
at most once per period, whatever restarts: the period is claimed by inserting the rows, in the
transaction that moves the subscription's next due time on (reports/services.py).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from phantomhub.accounts.models import Project, Team
from phantomhub.sending import WebhookFormat, webhook_secret_new


class ReportKind(models.TextChoices):
    FINANCE_MONTH = "finance_month"  # the finance review of the month before
    DIGEST_TEAM = "digest_team"  # a team's weekly digest
    DIGEST_PROJECT = "digest_project"  # a project's weekly digest
    SAVED_VIEW = "saved_view"  # a saved view, as it reads when sent


class Cadence(models.TextChoices):
    MONTHLY = "monthly"
    WEEKLY = "weekly"


class Subscription(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="report_subscriptions")
    kind = models.CharField(max_length=32, choices=ReportKind.choices)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    saved_view = models.ForeignKey("portal.SavedView", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    email_to = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=2000, blank=True)
    webhook_format = models.CharField(max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    webhook_secret = models.CharField(max_length=128, default=webhook_secret_new)
    cadence = models.CharField(max_length=16, choices=Cadence.choices)
    day_of_month = models.PositiveSmallIntegerField(null=True, blank=True)  # monthly: 1..28
    weekday = models.PositiveSmallIntegerField(null=True, blank=True)  # weekly: 0 Monday .. 6 Sunday
    hour = models.PositiveSmallIntegerField(default=8)
    minute = models.PositiveSmallIntegerField(default=0)
    timezone = models.CharField(max_length=64, default="UTC")  # IANA, checked by reports/schedule.py zone()
    enabled = models.BooleanField(default=True)
    # The next moment it is due (UTC); the periodic job reads only the rows past it, by this index.
    next_due_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["enabled", "next_due_at"], name="subscription_due")]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(kind="finance_month", team__isnull=True, project__isnull=True, saved_view__isnull=True)
                    | models.Q(kind="digest_team", team__isnull=False, project__isnull=True, saved_view__isnull=True)
                    | models.Q(kind="digest_project", team__isnull=True, project__isnull=False, saved_view__isnull=True)
                    | models.Q(kind="saved_view", team__isnull=True, project__isnull=True, saved_view__isnull=False)
                ),
                name="subscription_kind_matches_target",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(cadence="monthly", day_of_month__gte=1, day_of_month__lte=28, weekday__isnull=True)
                    | models.Q(cadence="weekly", weekday__gte=0, weekday__lte=6, day_of_month__isnull=True)
                ),
                name="subscription_cadence_day",
            ),
        ]

    def __str__(self) -> str:
        return f"report subscription {self.pk} ({self.kind}, {self.cadence})"


class DeliveryChannel(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # claimed, waiting for its first attempt or a retry (next_attempt_at)
    SENT = "sent"
    FAILED = "failed"  # gave up: a 4xx, a refused URL or address, or out of attempts


class ReportDelivery(models.Model):
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries")
    period_key = models.CharField(max_length=16)  # "2026-11", "2026-W47"
    period_start = models.DateField()
    period_end = models.DateField()
    channel = models.CharField(max_length=16, choices=DeliveryChannel.choices)
    target = models.CharField(max_length=2000)  # the URL, or the addresses
    # What is sent, fixed at the claim: the email's subject, text, HTML and CSV attachment, or the
    # webhook's raw JSON body (signed afresh at every attempt). A retry sends the same figures.
    subject = models.CharField(max_length=300, blank=True)
    body = models.TextField(blank=True)
    html = models.TextField(blank=True)
    attachment_name = models.CharField(max_length=200, blank=True)
    attachment = models.TextField(blank=True)
    # The headline figures the report carried (the CSV's TOTAL line), for the log.
    totals = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True)  # e.g. a closed month whose live figures now differ
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="reportdelivery_due")]
        constraints = [
            models.UniqueConstraint(fields=["subscription", "period_key", "channel"], name="reportdelivery_once_per_period")
        ]

    def __str__(self) -> str:
        return f"report {self.period_key} via {self.channel} ({self.status})"

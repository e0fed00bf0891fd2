"""Alert rules, the state of each (rule, subject) pair, and the delivery log.

Rules are evaluated from stored analyses only (phantomhub/alerts/evaluate.py); a rule's subject
is a live run, a straggling rank of one, an idle-held GPU, or a budget's month (its forecast). The state machine per subject is
ok -> pending (breached since `pending_since`) -> firing (breached for `for_s`) -> resolved.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from phantomhub.accounts.models import Project, Team
from phantomhub.sending import WebhookFormat, webhook_secret_new


class RuleKind(models.TextChoices):
    WASTE_RATE = "waste_rate"  # a live run's waste $/h, or waste share, above a threshold
    EFFICIENCY_DROP = "efficiency_drop"  # MFU or tokens/s below the project's baseline by > P%
    STRAGGLER = "straggler"  # a straggler rank costing the other ranks more than $X/h
    SILENT_RUN = "silent_run"  # a running (billed) run with no telemetry for for_s
    IDLE_GPU = "idle_gpu"  # a GPU idle-held for more than for_s (fleet collector)
    FORECAST_OVER_BUDGET = "forecast_over_budget"  # a budget's month-end forecast above it (planning)


class Scope(models.TextChoices):
    ORG = "org"
    TEAM = "team"
    PROJECT = "project"


class AlertRule(models.Model):
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=32, choices=RuleKind.choices)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.ORG)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # Thresholds of the kind (phantomhub/alerts/rules.py PARAMS says which, with their bounds).
    params = models.JSONField(default=dict, blank=True)
    for_s = models.FloatField(default=300)  # breached this long before it fires
    window_s = models.FloatField(default=300)  # trailing span of the run's windows a figure covers
    webhook_url = models.URLField(max_length=2000, blank=True)
    webhook_format = models.CharField(max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    webhook_secret = models.CharField(max_length=128, default=webhook_secret_new)
    email_to = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    muted = models.BooleanField(default=False)
    snoozed_until = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(scope="org", team__isnull=True, project__isnull=True)
                    | models.Q(scope="team", team__isnull=False, project__isnull=True)
                    | models.Q(scope="project", project__isnull=False)
                ),
                name="alertrule_scope_matches_target",
            )
        ]

    def __str__(self) -> str:
        return f"alert rule {self.name} ({self.kind})"


class StateKind(models.TextChoices):
    OK = "ok"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class AlertState(models.Model):
    """One rule's view of one subject ("run:<id>", "run:<id>:rank:<r>", "gpu:<node>:<index>",
    "budget:<id>:<YYYY-MM>")."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="states")
    subject = models.CharField(max_length=300)
    subject_label = models.CharField(max_length=300, blank=True)
    run = models.ForeignKey("telemetry.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=16, choices=StateKind.choices, default=StateKind.OK)
    pending_since = models.DateTimeField(null=True, blank=True)
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Whether people were told of the current firing (not while muted or snoozed); a resolve
    # message follows only a firing that was told.
    notified = models.BooleanField(default=False)
    muted = models.BooleanField(default=False)
    snoozed_until = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    usd_per_hour = models.FloatField(null=True, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["rule", "subject"], name="alertstate_rule_subject_unique")]

    def __str__(self) -> str:
        return f"{self.rule_id} on {self.subject}: {self.state}"


class DeliveryEvent(models.TextChoices):
    FIRING = "firing"
    RESOLVED = "resolved"
    TEST = "test"


class DeliveryChannel(models.TextChoices):
    WEBHOOK = "webhook"
    EMAIL = "email"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its first attempt or a retry (next_attempt_at)
    SENT = "sent"
    FAILED = "failed"  # gave up: a 4xx, a refused URL, or out of attempts


class AlertDelivery(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    alert = models.ForeignKey(AlertState, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries")
    event = models.CharField(max_length=16, choices=DeliveryEvent.choices)
    channel = models.CharField(max_length=16, choices=DeliveryChannel.choices)
    target = models.CharField(max_length=2000)  # the URL, or the addresses
    # What is sent, fixed at creation: a webhook's raw body (signed afresh at every attempt with
    # a new timestamp), or an email's subject and text.
    body = models.TextField()
    subject = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="alertdelivery_due")]

    def __str__(self) -> str:
        return f"{self.event} via {self.channel} ({self.status})"


class ServerBeat(models.Model):
    """The evaluator's own liveness (one row): when it last evaluated, and since when it has run
    without a gap. A node's silence is judged only once the server has been back long enough for
    the node's spooled samples to arrive (phantomhub/alerts/liveness.py)."""

    beat_at = models.DateTimeField()
    # The first beat after a gap longer than liveness.GAP_S (the server was down); null while no
    # gap has been seen since the row was made.
    up_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"beat {self.beat_at.isoformat()} (up since {self.up_since.isoformat() if self.up_since else 'first beat'})"

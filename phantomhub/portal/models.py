"""Finance month closes: a frozen copy of a month's figures, and the record of closes and reopens.

A closed month keeps the run-days and project-days it was closed with (ClosedRunDay,
ClosedProjectDay): later price, policy or model changes, and late telemetry, move the live rollups
(waste.models RunDay, ProjectDay) but never these. Pages read RunDayRead and ProjectDayRead, views
over both (migration 0002): a closed month's days from the frozen copy, every other day live.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from phantomhub.accounts.models import Project, Team
from phantomhub.telemetry.models import Run
from phantomhub.waste.models import money


class ClosedMonth(models.Model):
    month = models.DateField(primary_key=True)  # first day of the month
    last_day = models.DateField(null=True)  # its last day (the views read a closed month's days by it)
    closed_at = models.DateTimeField(auto_now_add=True)
    closed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # The whole review as it was when closed (all teams); readers filter it by visibility. Its
    # price_entries are the prices as they were, whatever the price book says later.
    snapshot = models.JSONField()
    model_version = models.PositiveIntegerField(null=True)  # the waste model that computed the figures

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} closed"


class _DayFigures(models.Model):
    """The columns pages sum, as waste.models RunDay and ProjectDay name them."""

    day = models.DateField()
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    gpu_seconds = models.FloatField(default=0)
    cost_usd = money()
    categories_usd = models.JSONField(default=dict)
    waste_usd = money()
    recoverable_usd = money()
    # A job's lost work (rework, restart, checkpoint; part of idle). 0 in a month closed before
    # the column existed (migration 0004): its frozen days were copied without it.
    lost_usd = money()
    mfu_gpu_seconds = models.FloatField(default=0)
    mfu_known_gpu_seconds = models.FloatField(default=0)

    class Meta:
        abstract = True


class ClosedRunDay(_DayFigures):
    """A run's day as it stood when its month was closed, with the prices that priced it."""

    month = models.ForeignKey(ClosedMonth, on_delete=models.CASCADE, related_name="run_days")
    # The run may later be deleted; its closed figures stay.
    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    gpu_key = models.CharField(max_length=128, blank=True)
    price_entry_ids = models.JSONField(default=list)

    class Meta:
        indexes = [models.Index(fields=["day", "project"], name="closedrunday_day_project")]

    def __str__(self) -> str:
        return f"{self.run_id} on {self.day} (closed)"


class ClosedProjectDay(_DayFigures):
    month = models.ForeignKey(ClosedMonth, on_delete=models.CASCADE, related_name="project_days")
    runs = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["day", "project"], name="closedprojectday_day_project")]

    def __str__(self) -> str:
        return f"{self.project_id} on {self.day} (closed)"


class MonthAction(models.TextChoices):
    CLOSE = "close"
    REOPEN = "reopen"


class MonthLog(models.Model):
    """Every close and reopen: who, when, why, and the month's totals at that moment."""

    month = models.DateField()
    action = models.CharField(max_length=16, choices=MonthAction.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(auto_now_add=True)
    reason = models.CharField(max_length=500, blank=True)
    totals = models.JSONField(default=dict)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.month:%Y-%m} at {self.at:%Y-%m-%d %H:%M}"


class RunDayRead(models.Model):
    """What pages read for run-days (a database view): closed months frozen, other days live."""

    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    day = models.DateField()
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    gpu_key = models.CharField(max_length=128, blank=True)
    gpu_seconds = models.FloatField(default=0)
    cost_usd = money()
    categories_usd = models.JSONField(default=dict)
    waste_usd = money()
    recoverable_usd = money()
    lost_usd = money()
    price_entry_ids = models.JSONField(default=list)
    mfu_gpu_seconds = models.FloatField(default=0)
    mfu_known_gpu_seconds = models.FloatField(default=0)

    class Meta:
        managed = False
        db_table = "portal_rundayread"

    def __str__(self) -> str:
        return f"{self.run_id} on {self.day}"


class ProjectDayRead(models.Model):
    """What pages read for project-days (a database view): closed months frozen, other days live."""

    day = models.DateField()
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    runs = models.PositiveIntegerField(default=0)
    gpu_seconds = models.FloatField(default=0)
    cost_usd = money()
    categories_usd = models.JSONField(default=dict)
    waste_usd = money()
    recoverable_usd = money()
    lost_usd = money()
    mfu_gpu_seconds = models.FloatField(default=0)
    mfu_known_gpu_seconds = models.FloatField(default=0)

    class Meta:
        managed = False
        db_table = "portal_projectdayread"

    def __str__(self) -> str:
        return f"{self.project_id} on {self.day}"


class PolicyChange(models.Model):
    """A change to the waste model's organization settings that moves dollar figures (target MFU,
    recoverability caps): who, when, before and after. A closed month names it as a cause."""

    at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"policy change at {self.at:%Y-%m-%d %H:%M}"


class SavedView(models.Model):
    """A runs list, leaderboard or finance filter saved under a name (docs/portal-api.md, "Saved
    views"): the page and its query string, so opening it is opening the shareable URL. Private to
    its owner, or shared with one team the owner belongs to, whose members then see it."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views")
    name = models.CharField(max_length=100)
    page = models.CharField(max_length=16)  # a key of portal.view_query.PAGE_PARAMS
    query = models.CharField(max_length=1000, blank=True)  # cleaned by view_query.query_clean, no '?'
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="saved_views")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="savedview_owner_name_unique")]

    def __str__(self) -> str:
        return f"{self.name} ({self.page})"

"""Budgets: dollars a team or a project (optionally one GPU model of it) may spend per month,
effective-dated by months (docs/budgets.md, "Model")."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from phantomhub.accounts.models import Project, Team


class BudgetScope(models.TextChoices):
    TEAM = "team"
    PROJECT = "project"


class Budget(models.Model):
    """`amount_usd` per calendar month (UTC), for every month from `effective_from` to
    `effective_to` (both the first day of their month, both months included; no end: until
    superseded by a budget that starts after it ends, or is deleted). Two budgets of the same
    scope, target and GPU model never cover the same month (services.budget_check_overlap)."""

    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    gpu_key = models.CharField(max_length=128, blank=True, help_text="blank: every GPU model")
    amount_usd = models.DecimalField(max_digits=14, decimal_places=2)
    effective_from = models.DateField()
    effective_to = models.DateField(null=True, blank=True, help_text="blank: open-ended")
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "team__slug", "project__slug", "gpu_key", "effective_from"]
        indexes = [models.Index(fields=["effective_from"], name="budget_from")]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount_usd__gte=0), name="budget_amount_non_negative"),
            models.CheckConstraint(
                condition=models.Q(effective_to__isnull=True) | models.Q(effective_to__gte=models.F("effective_from")),
                name="budget_to_not_before_from",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(scope="team", team__isnull=False, project__isnull=True)
                    | models.Q(scope="project", team__isnull=True, project__isnull=False)
                ),
                name="budget_scope_matches_target",
            ),
        ]

    def __str__(self) -> str:
        target = self.team.slug if self.team else (self.project.slug if self.project else "?")
        gpu = f" {self.gpu_key}" if self.gpu_key else ""
        end = f"{self.effective_to:%Y-%m}" if self.effective_to else "on"
        return f"{self.scope} {target}{gpu}: ${self.amount_usd}/month {self.effective_from:%Y-%m}..{end}"

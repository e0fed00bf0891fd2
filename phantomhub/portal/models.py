"""Finance month closes: a frozen snapshot of a month's review."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ClosedMonth(models.Model):
    month = models.DateField(primary_key=True)  # first day of the month
    closed_at = models.DateTimeField(auto_now_add=True)
    closed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # The whole review as it was when closed (all teams); readers filter it by visibility.
    snapshot = models.JSONField()

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} closed"

"""Price books: USD per GPU-hour by GPU model, provider, region and tier, with effective dates."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from phantomhub.telemetry.models import PricingTier


class PriceEntry(models.Model):
    # A catalog key ("H100-SXM"), or the name a run reported for a GPU outside the catalog.
    gpu = models.CharField(max_length=128)
    provider = models.CharField(max_length=64, blank=True, help_text="blank: any provider")
    region = models.CharField(max_length=64, blank=True, help_text="blank: any region")
    tier = models.CharField(max_length=16, choices=PricingTier.choices, default=PricingTier.ON_DEMAND)
    usd_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True, help_text="blank: still in force")
    is_example = models.BooleanField(default=False, help_text="shipped example price: replace it with your own")
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["gpu", "provider", "region", "tier", "effective_from"]
        indexes = [models.Index(fields=["gpu", "effective_from"], name="price_gpu_from")]
        constraints = [
            models.CheckConstraint(condition=models.Q(usd_per_gpu_hour__gte=0), name="price_non_negative"),
            models.CheckConstraint(
                condition=models.Q(effective_to__isnull=True) | models.Q(effective_to__gt=models.F("effective_from")),
                name="price_to_after_from",
            ),
        ]

    def __str__(self) -> str:
        where = "/".join(part for part in (self.provider, self.region) if part) or "any provider"
        return f"{self.gpu} {where} {self.tier}: ${self.usd_per_gpu_hour}/GPU-h from {self.effective_from:%Y-%m-%d}"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.gpu, self.provider, self.region, self.tier)


class PriceAudit(models.Model):
    """Every change to the price book: who, when, what before and after."""

    entry_id = models.BigIntegerField(null=True)
    action = models.CharField(max_length=16)  # create | update | close | delete
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_label = models.CharField(max_length=100, blank=True)  # "cli", "import", "migration"
    at = models.DateTimeField(auto_now_add=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} price {self.entry_id} by {self.actor or self.actor_label} at {self.at:%Y-%m-%d %H:%M}"

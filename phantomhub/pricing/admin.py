from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from phantomhub.pricing import services
from phantomhub.pricing.models import PriceAudit, PriceEntry


@admin.register(PriceEntry)
class PriceEntryAdmin(admin.ModelAdmin):
    list_display = [
        "gpu",
        "provider",
        "region",
        "tier",
        "usd_per_gpu_hour",
        "effective_from",
        "effective_to",
        "is_example",
    ]
    list_filter = ["gpu", "provider", "tier", "is_example"]
    search_fields = ["gpu", "provider", "region", "note"]

    def save_model(self, request: HttpRequest, obj: PriceEntry, form: Any, change: bool) -> None:
        # Route admin edits through the services so the audit trail sees them too.
        if change:
            changes = {name: form.cleaned_data[name] for name in form.changed_data}
            services.price_update(
                entry=PriceEntry.objects.get(pk=obj.pk), changes=changes, actor=request.user, actor_label="admin"
            )
        else:
            saved = services.price_set(
                gpu=obj.gpu, usd_per_gpu_hour=obj.usd_per_gpu_hour, provider=obj.provider, region=obj.region,
                tier=obj.tier, effective_from=obj.effective_from, is_example=obj.is_example, note=obj.note,
                actor=request.user, actor_label="admin",
            )  # fmt: skip
            obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: PriceEntry) -> None:
        services.price_delete(entry=obj, actor=request.user, actor_label="admin")


@admin.register(PriceAudit)
class PriceAuditAdmin(admin.ModelAdmin):
    list_display = ["at", "action", "entry_id", "actor", "actor_label"]
    list_filter = ["action"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

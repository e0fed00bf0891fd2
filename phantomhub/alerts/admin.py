from django.contrib import admin

from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "scope", "enabled", "muted", "snoozed_until")


@admin.register(AlertState)
class AlertStateAdmin(admin.ModelAdmin):
    list_display = ("rule", "subject", "state", "pending_since", "fired_at", "resolved_at")


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ("rule", "event", "channel", "status", "attempts", "status_code", "next_attempt_at")

from django.contrib import admin

from phantomhub.fleet.models import AttributionRule, InvoiceImport, Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("hostname", "gpu_model", "gpu_count", "provider", "region", "last_seen_at")
    search_fields = ("hostname", "resource_id")


@admin.register(AttributionRule)
class AttributionRuleAdmin(admin.ModelAdmin):
    list_display = ("position", "match", "key", "pattern", "team", "project")


@admin.register(InvoiceImport)
class InvoiceImportAdmin(admin.ModelAdmin):
    list_display = ("filename", "lines", "lines_new", "imported_at")

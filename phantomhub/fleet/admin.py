from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from phantomhub.fleet.models import AttributionJob, AttributionRule, InvoiceImport, Node, NodeSpec


class NodeSpecInline(admin.TabularInline):
    """The node's spec history: appended by ingest, never edited (edits would re-price history)."""

    model = NodeSpec
    extra = 0
    can_delete = False
    readonly_fields = ("valid_from_ns", "gpu_model", "provider", "region", "recorded_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("hostname", "gpu_model", "gpu_count", "provider", "region", "last_seen_at")
    search_fields = ("hostname", "resource_id")
    inlines = [NodeSpecInline]


@admin.register(AttributionJob)
class AttributionJobAdmin(admin.ModelAdmin):
    list_display = ("pk", "status", "owners_done", "owners_total", "owners_moved", "created_at", "finished_at")
    readonly_fields = ("status", "owners_total", "owners_done", "owners_moved", "error", "actor", "started_at", "finished_at")


@admin.register(AttributionRule)
class AttributionRuleAdmin(admin.ModelAdmin):
    list_display = ("position", "match", "key", "pattern", "team", "project")


@admin.register(InvoiceImport)
class InvoiceImportAdmin(admin.ModelAdmin):
    list_display = ("filename", "lines", "lines_new", "imported_at")

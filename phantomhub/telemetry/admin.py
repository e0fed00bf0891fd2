from django.contrib import admin
from django.http import HttpRequest

from phantomhub.telemetry.models import ProjectRetention, RunArchive


@admin.register(ProjectRetention)
class ProjectRetentionAdmin(admin.ModelAdmin):
    """A project's own raw-row retention (days after a run's end), over PHANTOMHUB_RAW_RETENTION_DAYS."""

    list_display = ["project", "raw_retention_days"]


@admin.register(RunArchive)
class RunArchiveAdmin(admin.ModelAdmin):
    """Written by storage maintenance only (phantomhub/telemetry/retention.py): read-only here."""

    list_display = ["run", "step_rows", "sample_rows", "steps_bytes", "archived_at", "pruned_at"]
    readonly_fields = [f.name for f in RunArchive._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

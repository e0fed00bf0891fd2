from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from phantomhub.waste.models import OrgSettings, ProjectSettings, RunAnalysis


@admin.register(OrgSettings)
class OrgSettingsAdmin(admin.ModelAdmin):
    list_display = ["target_mfu", "crash_after_s", "analysis_debounce_s"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not OrgSettings.objects.exists()


@admin.register(ProjectSettings)
class ProjectSettingsAdmin(admin.ModelAdmin):
    list_display = ["project", "recoverability"]


@admin.register(RunAnalysis)
class RunAnalysisAdmin(admin.ModelAdmin):
    list_display = ["run", "project", "cost_usd", "recoverable_usd", "waste_share", "mfu", "analysed_at", "complete"]
    list_filter = ["complete", "team"]
    exclude = ["state"]
    readonly_fields = [f.name for f in RunAnalysis._meta.fields if f.name != "state"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

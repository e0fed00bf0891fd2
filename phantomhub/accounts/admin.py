from django.contrib import admin

from phantomhub.accounts.models import ApiToken, Membership, Profile, Project, Team


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "team", "target_mfu"]
    list_filter = ["team"]
    search_fields = ["slug", "name"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["team", "role"]


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "is_finance", "is_org_admin"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "prefix",
        "kind",
        "project",
        "user",
        "name",
        "created_by",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["kind"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at", "last_used_address", "replaced_by", "overlap_ends_at"]

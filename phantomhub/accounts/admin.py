from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError

from phantomhub.accounts.models import ApiToken, Membership, Profile, Project, Team
from phantomhub.accounts.passwords import PASSWORDS_OFF_MESSAGE


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
    list_display = ["prefix", "kind", "project", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["kind"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]


class PasswordSignInForm(AdminAuthenticationForm):
    """The admin's sign-in form, refused with a sentence when local passwords are off
    (PHANTOMHUB_LOCAL_PASSWORDS=0; docs/identity.md)."""

    def clean(self) -> dict[str, Any]:
        if not settings.LOCAL_PASSWORDS:
            raise ValidationError(PASSWORDS_OFF_MESSAGE, code="local_passwords_off")
        return super().clean()


admin.site.login_form = PasswordSignInForm

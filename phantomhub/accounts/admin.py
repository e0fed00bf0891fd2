"""The Django admin: staff edits of accounts, refusing the same local edits of synced access as
the people API (accounts/origins.py)."""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from phantomhub.accounts.directory import ORG_FLAGS
from phantomhub.accounts.models import ApiToken, Membership, Profile, Project, Team
from phantomhub.accounts.origins import flag_refusal, membership_refusal
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


class MembershipForm(forms.ModelForm):
    """Refuses, with the people API's sentence (accounts/origins.py), any change to a membership
    the directory gave, and a new local one beside it."""

    class Meta:
        model = Membership
        fields = ["user", "team", "role"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        stored = Membership.objects.filter(pk=self.instance.pk).select_related("user").first() if self.instance.pk else None
        if stored is None and data.get("user") and data.get("team"):
            stored = Membership.objects.filter(user=data["user"], team=data["team"]).select_related("user").first()
        if stored is not None and self.has_changed():
            refusal = membership_refusal(stored)
            if refusal:
                raise forms.ValidationError(refusal, code="synced")
        return data


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    form = MembershipForm
    list_display = ["user", "team", "role", "source"]
    list_filter = ["team", "role", "source"]
    readonly_fields = ["source"]

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, Any]:
        """A synced membership cannot be deleted here: Django's confirmation page lists the
        refusal sentences as what protects the deletion, and deletes nothing."""
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        refusals = [r for r in (membership_refusal(m) for m in objs) if r]
        return deleted, counts, perms, [*protected, *refusals]


class ProfileForm(forms.ModelForm):
    """Refuses, with the people API's sentence, taking off an organization flag the directory gives."""

    class Meta:
        model = Profile
        fields = ["user", "is_finance", "is_org_admin"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        user = data.get("user") or (self.instance.user if self.instance.pk else None)
        if user is None:
            return data
        for grant, flag in ORG_FLAGS.items():
            if flag in self.changed_data:
                refusal = flag_refusal(user, grant, on=bool(data.get(flag)))
                if refusal:
                    self.add_error(flag, forms.ValidationError(refusal, code="synced"))
        return data


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    form = ProfileForm
    list_display = ["user", "is_finance", "is_org_admin", "directory_flags"]
    readonly_fields = ["directory_flags"]


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


class PasswordSignInForm(AdminAuthenticationForm):
    """The admin's sign-in form, refused with a sentence when local passwords are off
    (PHANTOMHUB_LOCAL_PASSWORDS=0; docs/identity.md)."""

    def clean(self) -> dict[str, Any]:
        if not settings.LOCAL_PASSWORDS:
            raise ValidationError(PASSWORDS_OFF_MESSAGE, code="local_passwords_off")
        return super().clean()


admin.site.login_form = PasswordSignInForm

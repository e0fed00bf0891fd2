"""Entries in the Django admin: read only. django-auditlog's admin already refuses adding and
changing; it lets a delete through when it cascades from another object, which here would only
meet the append-only guard (docs/audit.md), so deleting is refused outright."""

from __future__ import annotations

from typing import Any

from auditlog.admin import LogEntryAdmin
from django.contrib import admin
from django.http import HttpRequest

from phantomhub.audit.models import AuditEntry


class AuditEntryAdmin(LogEntryAdmin):
    list_display = ["created", "resource_url", "action", "msg_short", "actor_label", "remote_addr"]
    search_fields = ["object_repr", "actor_label"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


if admin.site.is_registered(AuditEntry):  # auditlog's admin registers the entry model first
    admin.site.unregister(AuditEntry)
admin.site.register(AuditEntry, AuditEntryAdmin)

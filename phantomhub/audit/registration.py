"""What the audit log records: each audited model, the kind of change people filter it by, and
the fields that are left out or masked (docs/audit.md, "What is recorded").

django-auditlog records a model's changes through its model signals (save and delete; the
many-to-many fields named here are recorded by receivers.m2m_recorder), so every change path of
these models goes through `save()` or `delete()` (docs/design-notes.md names the queryset writes
that were changed for it). Models are
named by label, not imported: the audit layer records every app without reaching into its code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from auditlog.registry import auditlog
from django.apps import apps
from django.db import models


@dataclass(frozen=True)
class Recorded:
    model: str  # "app_label.ModelName"
    kind: str
    include: tuple[str, ...] = ()  # only these fields (empty: all but the left-out ones)
    leave_out: Callable[[str], bool] = lambda name: name in ("created_at", "updated_at")
    mask: tuple[str, ...] = ()  # recorded as `mask_value` shows them: changed, never readable
    m2m: tuple[str, ...] = ()  # many-to-many fields whose adds and removes are recorded on this model
    creates: bool = True  # False: a created row is a default, not a change (the settings row)


def _secret_or_digest(name: str) -> bool:
    """A token's digest (today's and any a rotation keeps), its use (last_used_at, and the address
    and whatever else the token lifecycle adds as last_used_*): never recorded, so using a token
    writes no entry and no entry holds what would let someone forge one."""
    return "digest" in name or "secret" in name or name.startswith("last_used") or name in ("created_at", "updated_at")


RECORDED: tuple[Recorded, ...] = (
    Recorded("pricing.PriceEntry", "price"),
    Recorded("portal.MonthLog", "month", leave_out=lambda name: name == "at"),  # a close or a reopen
    Recorded("waste.OrgSettings", "settings", creates=False),  # the policy: target MFU, recoverability, ...
    Recorded("waste.ProjectSettings", "settings"),
    Recorded("telemetry.ProjectRetention", "settings"),  # a project's raw-row retention
    Recorded("alerts.AlertRule", "alert_rule", mask=("webhook_url", "webhook_secret")),
    Recorded("fleet.AttributionRule", "attribution_rule"),
    Recorded("accounts.GroupMappingRule", "group_mapping"),
    Recorded("accounts.Membership", "membership"),
    Recorded("accounts.Profile", "role"),  # organization admin, finance
    Recorded("accounts.Team", "team", include=("slug", "name", "display_name")),
    Recorded("accounts.Project", "project", include=("slug", "name", "display_name", "team", "target_mfu")),
    Recorded("accounts.ApiToken", "token", leave_out=_secret_or_digest),
    Recorded(
        "auth.User", "person", include=("username", "email", "first_name", "last_name", "is_active", "is_staff", "is_superuser")
    ),
    Recorded("accounts.DirectoryGroup", "directory_group", include=("display_name", "external_id"), m2m=("members",)),
    Recorded("portal.SavedView", "saved_view"),  # a saved filter: its name, page, query and team
    # Who receives which figures where. next_due_at moves at every send: not a change anyone made.
    Recorded(
        "reports.Subscription",
        "report_subscription",
        mask=("webhook_url", "webhook_secret"),
        leave_out=lambda name: name in ("created_at", "updated_at", "next_due_at"),
    ),
    Recorded("planning.Budget", "budget"),  # a team's or project's monthly budget (docs/budgets.md)
)

# The kinds as the Audit log page's filter names them, in its order.
KIND_LABELS: dict[str, str] = {
    "price": "Prices",
    "month": "Month close and reopen",
    "settings": "Settings and policies",
    "alert_rule": "Alert rules",
    "attribution_rule": "Attribution rules",
    "group_mapping": "Group mapping",
    "membership": "Memberships",
    "role": "Organization roles",
    "team": "Teams",
    "project": "Projects",
    "token": "Tokens",
    "person": "People",
    "directory_group": "Directory groups",
    "saved_view": "Saved views",
    "report_subscription": "Report subscriptions",
    "budget": "Budgets",
}
# What finance people read: the price book, the month closes and the budgets they set (docs/audit.md, "Who reads it").
FINANCE_KINDS = frozenset({"price", "month", "budget"})

_KIND_OF: dict[type[models.Model], str] = {}
_NO_CREATES: set[type[models.Model]] = set()


def hidden(value: str) -> str | None:
    """A secret: whether it was set, never what it was (auditlog passes None as "None")."""
    return None if value == "None" else "" if value == "" else "(hidden)"


def url_host(value: str) -> str | None:
    """A webhook URL by its scheme and host: the path of a Slack or Teams URL is its credential."""
    if value in ("", "None"):
        return hidden(value)
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.hostname}/…" if parts.hostname else "(hidden)"


def register_all() -> None:
    """Register every model of RECORDED with auditlog (AuditConfig.ready)."""
    for recorded in RECORDED:
        model = apps.get_model(recorded.model)
        names = [f.name for f in model._meta.get_fields() if f.concrete]
        include = [name for name in recorded.include if name in names]
        exclude = [] if include else [name for name in names if recorded.leave_out(name)]
        auditlog.register(
            model,
            include_fields=include,
            exclude_fields=exclude,
            mask_fields=list(recorded.mask),
            mask_callable="phantomhub.audit.registration.mask_value" if recorded.mask else None,
        )  # many-to-many fields: receivers.m2m_recorder, not auditlog's m2m_fields
        _KIND_OF[model] = recorded.kind
        if not recorded.creates:
            _NO_CREATES.add(model)


def mask_value(value: str) -> str | None:
    """auditlog's mask callable for every masked field: a URL keeps its host, anything else is hidden.
    (auditlog passes the value alone, not its field, so the shape of the value decides.)"""
    return url_host(value) if value.startswith(("http://", "https://")) else hidden(value)


def m2m_fields() -> list[tuple[type[models.Model], str]]:
    """(model, many-to-many field) of every recorded many-to-many change."""
    return [(apps.get_model(recorded.model), field) for recorded in RECORDED for field in recorded.m2m]


def kind_of(model: type[models.Model] | None) -> str:
    return _KIND_OF.get(model, "") if model is not None else ""


def records_creates(model: type[models.Model]) -> bool:
    return model not in _NO_CREATES

"""The scheduled reports API (docs/portal-api.md, "Scheduled reports"): subscriptions and the
delivery log.

A person subscribes themselves, by email to their own address, to what they may read: a digest
of a team they belong to (or a project of it), a saved view they see, and (finance and org admins)
the month's finance review. Organization admins also set other addresses and webhooks (a
channel's subscription); every webhook URL passes the egress policy (phantomhub/egress.py).
Personal tokens only read; project tokens reach nothing here (accounts/permissions.py).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub import egress, sending
from phantomhub.accounts.models import Team
from phantomhub.accounts.permissions import is_org_admin
from phantomhub.accounts.selectors import projects_visible, user_sees_everything
from phantomhub.errors import ApiError, invalid
from phantomhub.portal.saved_views import views_visible
from phantomhub.reports import selectors, services
from phantomhub.reports.models import (
    Cadence,
    ReportDelivery,
    ReportKind,
    Subscription,
    WebhookFormat,
    webhook_secret_new,
)
from phantomhub.reports.schedule import DAY_OF_MONTH_MAX, ZoneError, zone
from phantomhub.schema import ErrorSerializer

OBJ = OpenApiTypes.OBJECT
MAX_EMAILS = 20
# A subscription is at most 20 addresses, a 2,000-character URL and a few numbers: refused past this unparsed.
MAX_SUBSCRIPTION_BODY_BYTES = 16 * 1024
FIELDS = ("kind", "team", "project", "saved_view", "email_to", "webhook_url", "webhook_format", "cadence", "day_of_month",
          "weekday", "hour", "minute", "timezone", "enabled")  # fmt: skip


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None


def _view_of(sub: Subscription) -> dict[str, Any] | None:
    view = sub.saved_view
    return {"id": view.pk, "name": view.name, "page": view.page} if view else None


def subscription_view(sub: Subscription, *, admin: bool) -> dict[str, Any]:
    last = sub.deliveries.order_by("-id").first()
    return {
        "id": sub.pk,
        "owner": sub.owner.get_username(),
        "kind": sub.kind,
        "team": sub.team.slug if sub.team else None,
        "project": sub.project.slug if sub.project else None,
        "saved_view": {"id": sub.saved_view.pk, "name": sub.saved_view.name, "page": sub.saved_view.page}
        if sub.saved_view
        else None,
        "email_to": sub.email_to,
        # A webhook URL (Slack's above all) and its signing secret are credentials: admins' only.
        "webhook_url": sub.webhook_url if admin else ("(set by an organization admin)" if sub.webhook_url else ""),
        "webhook_format": sub.webhook_format,
        "webhook_secret": sub.webhook_secret if admin else None,
        "cadence": sub.cadence,
        "day_of_month": sub.day_of_month,
        "weekday": sub.weekday,
        "hour": sub.hour,
        "minute": sub.minute,
        "timezone": sub.timezone,
        "enabled": sub.enabled,
        "next_due_at": _iso(sub.next_due_at),
        "last_delivery": {"period_key": last.period_key, "status": last.status, "sent_at": _iso(last.sent_at)} if last else None,
        "created_at": _iso(sub.created_at),
    }


def delivery_view(item: ReportDelivery, *, admin: bool) -> dict[str, Any]:
    webhook = item.channel == "webhook"
    return {
        "id": item.pk,
        "subscription": item.subscription_id,
        "kind": item.subscription.kind,
        "owner": item.subscription.owner.get_username(),
        "period_key": item.period_key,
        "period_start": item.period_start.isoformat(),
        "period_end": item.period_end.isoformat(),
        "channel": item.channel,
        "target": item.target if admin or not webhook else None,  # as subscription_view's webhook_url
        "status": item.status,
        "attempts": item.attempts,
        "status_code": item.status_code,
        "error": item.error,
        "totals": item.totals,
        "note": item.note or None,
        "created_at": _iso(item.created_at),
        "next_attempt_at": _iso(item.next_attempt_at),
        "sent_at": _iso(item.sent_at),
    }


class SubscriptionInput(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=ReportKind.choices)
    team = serializers.SlugField(required=False, allow_null=True, allow_blank=True)
    project = serializers.SlugField(required=False, allow_null=True, allow_blank=True)
    saved_view = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**31)
    email_to = serializers.ListField(child=serializers.EmailField(), max_length=MAX_EMAILS, required=False, default=list)
    webhook_url = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    webhook_format = serializers.ChoiceField(choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    cadence = serializers.ChoiceField(choices=Cadence.choices)
    day_of_month = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=DAY_OF_MONTH_MAX)
    weekday = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=6, help_text="0 Monday .. 6 Sunday"
    )
    hour = serializers.IntegerField(min_value=0, max_value=23, default=8)
    minute = serializers.IntegerField(min_value=0, max_value=59, default=0)
    timezone = serializers.CharField(max_length=64, default="UTC", help_text="an IANA time zone, e.g. Europe/Berlin")
    enabled = serializers.BooleanField(default=True)
    rotate_secret = serializers.BooleanField(required=False, default=False, help_text="issue a new webhook signing secret")


def _target(data: dict[str, Any], owner: User) -> dict[str, Any]:
    """The report's target, which the owner must be able to read; 400 naming the field (a target
    one may not see reads as not found: its existence is not told)."""
    kind = data["kind"]
    out: dict[str, Any] = {"team": None, "project": None, "saved_view": None}
    if kind == ReportKind.FINANCE_MONTH:
        if not user_sees_everything(owner):
            message = "the finance review is for finance and organization admins"
            raise ApiError("forbidden", f"kind: {message}", fields={"kind": message}, status_code=403)
    elif kind == ReportKind.DIGEST_TEAM:
        if not data.get("team"):
            raise invalid("team", "required for a team's digest")
        out["team"] = Team.objects.filter(slug=data["team"], projects__in=projects_visible(owner)).distinct().first()
        if out["team"] is None:
            raise ApiError("not_found", "team: not found", fields={"team": "not found"}, status_code=400)
    elif kind == ReportKind.DIGEST_PROJECT:
        if not data.get("project"):
            raise invalid("project", "required for a project's digest")
        out["project"] = projects_visible(owner).filter(slug=data["project"]).first()
        if out["project"] is None:
            raise ApiError("not_found", "project: not found", fields={"project": "not found"}, status_code=400)
    else:
        if not data.get("saved_view"):
            raise invalid("saved_view", "required for a saved view's report")
        out["saved_view"] = views_visible(owner).filter(pk=data["saved_view"]).first()
        if out["saved_view"] is None:
            raise ApiError("not_found", "saved_view: not found", fields={"saved_view": "not found"}, status_code=400)
    return out


def _schedule(data: dict[str, Any]) -> dict[str, Any]:
    kind, cadence = data["kind"], data["cadence"]
    if kind == ReportKind.FINANCE_MONTH and cadence != Cadence.MONTHLY:
        raise invalid("cadence", "the finance review is of a month: monthly")
    if kind in (ReportKind.DIGEST_TEAM, ReportKind.DIGEST_PROJECT) and cadence != Cadence.WEEKLY:
        raise invalid("cadence", "a digest is of a week: weekly")
    if cadence == Cadence.MONTHLY and data.get("day_of_month") is None:
        raise invalid("day_of_month", f"required for a monthly report (1 to {DAY_OF_MONTH_MAX})")
    if cadence == Cadence.WEEKLY and data.get("weekday") is None:
        raise invalid("weekday", "required for a weekly report (0 Monday to 6 Sunday)")
    try:
        zone(data["timezone"].strip())
    except ZoneError as exc:
        raise invalid("timezone", str(exc)) from None
    return {
        "cadence": cadence,
        "day_of_month": data.get("day_of_month") if cadence == Cadence.MONTHLY else None,
        "weekday": data.get("weekday") if cadence == Cadence.WEEKLY else None,
        "hour": data["hour"],
        "minute": data["minute"],
        "timezone": data["timezone"].strip(),
    }


def _channels(request: Request, data: dict[str, Any], owner: User, before: Subscription | None) -> dict[str, Any]:
    """Who may send where: a person to their own address; org admins to any address and webhook."""
    admin = is_org_admin(request.user)
    emails = sorted(set(data["email_to"]))
    url = data["webhook_url"].strip()
    if not admin:
        own = (owner.email or "").strip()
        if not emails and not url:
            if not own:
                raise invalid("email_to", "your account has no email address: ask an admin to set one")
            emails = [own]
        # Their own address, and those an admin already put on this subscription (a pause keeps them).
        allowed = {own.lower(), *(e.lower() for e in (before.email_to if before else []))}
        if any(e.lower() not in allowed for e in emails):
            raise ApiError("forbidden", "email_to: you may subscribe your own address only; admins set others",
                           fields={"email_to": "your own address only"}, status_code=403)  # fmt: skip
        if url and (before is None or url != before.webhook_url):
            raise ApiError("forbidden", "webhook_url: webhooks are set by organization admins",
                           fields={"webhook_url": "set by organization admins"}, status_code=403)  # fmt: skip
    if url and (before is None or url != before.webhook_url):
        problem = egress.url_problem(url)
        if problem:
            raise invalid("webhook_url", problem)
    if not emails and not url:
        raise invalid("email_to", "give an email address or a webhook URL")
    changes = {"email_to": emails, "webhook_url": url, "webhook_format": data["webhook_format"]}
    if data.get("rotate_secret"):
        changes["webhook_secret"] = webhook_secret_new()
    return changes


def _changes(request: Request, data: dict[str, Any], owner: User, before: Subscription | None = None) -> dict[str, Any]:
    return {"kind": data["kind"], **_target(data, owner), **_schedule(data), **_channels(request, data, owner, before),
            "enabled": data["enabled"]}  # fmt: skip


def _person(request: Request) -> User:
    user = request.user
    if not isinstance(user, User):
        raise ApiError("forbidden", "reports are subscribed by signed-in people", status_code=403)
    return user


def _visible(request: Request, sub_id: int) -> Subscription:
    sub = selectors.subscriptions_visible(request.user).filter(pk=sub_id).first()
    if sub is None:
        raise ApiError("not_found", "subscription not found", status_code=404)
    return sub


class _ReportsView(APIView):
    max_body_bytes = MAX_SUBSCRIPTION_BODY_BYTES


class SubscriptionListApi(_ReportsView):
    @extend_schema(responses=OBJ, summary="Report subscriptions: yours (organization admins: everyone's)",
                   operation_id="reports_subscriptions_list")  # fmt: skip
    def get(self, request: Request) -> Response:
        admin = is_org_admin(request.user)
        subs = selectors.subscriptions_visible(request.user).order_by("id")
        return Response({"subscriptions": [subscription_view(s, admin=admin) for s in subs]})

    @extend_schema(request=SubscriptionInput, responses={201: OBJ, 400: ErrorSerializer, 403: ErrorSerializer})
    def post(self, request: Request) -> Response:
        owner = _person(request)
        data = SubscriptionInput(data=request.data)
        data.is_valid(raise_exception=True)
        changes = _changes(request, dict(data.validated_data), owner)
        sub = services.subscription_save(sub=Subscription(owner=owner), changes=changes)
        return Response(subscription_view(sub, admin=is_org_admin(request.user)), status=status.HTTP_201_CREATED)


class SubscriptionDetailApi(_ReportsView):
    @extend_schema(responses=OBJ)
    def get(self, request: Request, sub_id: int) -> Response:
        return Response(subscription_view(_visible(request, sub_id), admin=is_org_admin(request.user)))

    @extend_schema(request=SubscriptionInput, responses={200: OBJ, 400: ErrorSerializer, 403: ErrorSerializer})
    def patch(self, request: Request, sub_id: int) -> Response:
        sub = _visible(request, sub_id)
        if not isinstance(request.data, dict):
            raise ApiError("invalid", "the body must be a JSON object")
        admin = is_org_admin(request.user)
        current = {k: v for k, v in subscription_view(sub, admin=True).items() if k in FIELDS}
        current["saved_view"] = sub.saved_view_id
        data = SubscriptionInput(data={**current, **request.data})
        data.is_valid(raise_exception=True)
        if not admin and data.validated_data["webhook_url"] != sub.webhook_url:
            raise ApiError("forbidden", "webhook_url: webhooks are set by organization admins",
                           fields={"webhook_url": "set by organization admins"}, status_code=403)  # fmt: skip
        changes = _changes(request, dict(data.validated_data), cast(User, sub.owner), before=sub)
        services.subscription_save(sub=sub, changes=changes)
        return Response(subscription_view(sub, admin=admin))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, sub_id: int) -> Response:
        _visible(request, sub_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListApi(_ReportsView):
    @extend_schema(
        parameters=[
            OpenApiParameter("subscription", int, description="one subscription's deliveries"),
            OpenApiParameter("status", str, description="pending, sent or failed"),
            OpenApiParameter("limit", int, description="1 to 500 (default 100)"),
        ],
        responses=OBJ,
        summary="The reports' delivery log: each period's email and webhook, newest first",
    )
    def get(self, request: Request) -> Response:
        page = sending.log_page(selectors.deliveries_visible(request.user), request.query_params, owner="subscription")
        admin = is_org_admin(request.user)
        return Response({"deliveries": [delivery_view(d, admin=admin) for d in page]})

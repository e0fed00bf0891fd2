"""The alerts API (docs/api.md, "Alerts"): rules, alert states (mute, snooze), the delivery log.

Reads: what the caller's role lets them see (selectors.rules_visible, states_visible,
deliveries_visible: a member sees no other team's runs through an org-wide rule). A rule's
destinations (webhook URL, signing secret, email addresses; a Slack URL is a credential) are
null to those who may not change it. Writes: organization admins for every rule, a team's admins
for its team's and projects' rules, signed in (personal tokens only read, project tokens reach
nothing here: accounts/permissions.py TokenScopes). A team's admins may point webhooks only at
PHANTOMHUB_ALERT_WEBHOOK_HOSTS; every URL passes the egress policy (phantomhub/egress.py).
"""

from __future__ import annotations

import re
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub import egress, sending
from phantomhub.accounts.models import Project, Team
from phantomhub.accounts.permissions import is_org_admin
from phantomhub.alerts import selectors, services
from phantomhub.alerts.evaluate import run_link
from phantomhub.alerts.models import (
    AlertDelivery,
    AlertRule,
    AlertState,
    RuleKind,
    Scope,
    WebhookFormat,
    webhook_secret_new,
)
from phantomhub.alerts.rules import FOR_S_MAX, PARAMS, WINDOW_S_MAX, WINDOW_S_MIN, params_clean
from phantomhub.errors import ApiError, invalid, query_int
from phantomhub.schema import ErrorSerializer

OBJ = OpenApiTypes.OBJECT
MAX_EMAILS = 20
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # CR/LF would end an email header
SILENT_FOR_S_MIN = 90.0  # the agent sends a rank's batch every 60 s (flush_interval_s): silence shorter is normal


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None


def _writable(user: Any, rule: AlertRule) -> bool:
    return selectors.rule_writable(user=user, scope=rule.scope, team_id=rule.team_id, project=rule.project)


def _firing(user: Any) -> dict[int, int]:
    """Firing alerts per rule, of those the caller sees (an org rule's count is theirs too)."""
    rows = selectors.states_visible(user).filter(state="firing").order_by().values_list("rule_id").annotate(n=Count("id"))
    return {int(rule_id): int(n) for rule_id, n in rows}


def rule_view(rule: AlertRule, *, user: Any, editor: selectors.Editor | None = None, firing: int | None = None) -> dict[str, Any]:
    writable = (editor or selectors.editor_of(user)).may_edit(rule)
    now = timezone.now()
    return {
        "id": rule.pk,
        "name": rule.name,
        "kind": rule.kind,
        "scope": rule.scope,
        "team": rule.team.slug if rule.team else (rule.project.team.slug if rule.project else None),
        "project": rule.project.slug if rule.project else None,
        "params": rule.params,
        "for_s": rule.for_s,
        "window_s": rule.window_s,
        # Where it sends, to those who may change the rule (they configure the receiver); null to
        # the others: a webhook URL (Slack's above all) is a credential, addresses are personal.
        "webhook_url": rule.webhook_url if writable else None,
        "webhook_format": rule.webhook_format,
        "webhook_secret": rule.webhook_secret if writable else None,
        "email_to": rule.email_to if writable else None,
        "enabled": rule.enabled,
        "muted": rule.muted,
        "snoozed_until": _iso(rule.snoozed_until if rule.snoozed_until and rule.snoozed_until > now else None),
        "firing": firing if firing is not None else _firing(user).get(rule.pk, 0),
        "writable": writable,
        "created_at": _iso(rule.created_at),
        "updated_at": _iso(rule.updated_at),
    }


def state_view(state: AlertState, *, user: Any, editor: selectors.Editor | None = None) -> dict[str, Any]:
    return {
        "id": state.pk,
        "rule": state.rule_id,
        "rule_name": state.rule.name,
        "subject": state.subject,
        "subject_label": state.subject_label,
        "run_id": str(state.run_id) if state.run_id else None,
        "url": run_link(state.run_id) if state.run_id else None,
        "state": state.state,
        "value": state.value,
        "figure": state.evidence.get("figure"),
        "threshold": state.evidence.get("threshold"),
        "usd_per_hour": state.usd_per_hour,
        "evidence": state.evidence,
        "pending_since": _iso(state.pending_since),
        "fired_at": _iso(state.fired_at),
        "resolved_at": _iso(state.resolved_at),
        "notified": state.notified,
        "muted": state.muted,
        "snoozed_until": _iso(state.snoozed_until),
        "evaluated_at": _iso(state.evaluated_at),
        "writable": (editor or selectors.editor_of(user)).may_edit(state.rule),
    }


def delivery_view(item: AlertDelivery, *, editor: selectors.Editor) -> dict[str, Any]:
    return {
        "id": item.pk,
        "rule": item.rule_id,
        "rule_name": item.rule.name,
        "alert": item.alert_id,
        "subject_label": item.alert.subject_label if item.alert else None,
        "event": item.event,
        "channel": item.channel,
        "target": item.target if editor.may_edit(item.rule) else None,  # as rule_view's webhook_url
        "status": item.status,
        "attempts": item.attempts,
        "status_code": item.status_code,
        "error": item.error,
        "next_attempt_at": _iso(item.next_attempt_at),
        "created_at": _iso(item.created_at),
        "sent_at": _iso(item.sent_at),
    }


class RuleInput(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=RuleKind.choices)
    scope = serializers.ChoiceField(choices=Scope.choices, default=Scope.ORG)
    team = serializers.SlugField(required=False, allow_null=True, allow_blank=True)
    project = serializers.SlugField(required=False, allow_null=True, allow_blank=True)
    params = serializers.JSONField(required=False, default=dict)
    for_s = serializers.FloatField(min_value=0, max_value=FOR_S_MAX, default=300)
    window_s = serializers.FloatField(min_value=WINDOW_S_MIN, max_value=WINDOW_S_MAX, default=300)
    webhook_url = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    webhook_format = serializers.ChoiceField(choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    email_to = serializers.ListField(child=serializers.EmailField(), max_length=MAX_EMAILS, required=False, default=list)
    enabled = serializers.BooleanField(default=True)
    muted = serializers.BooleanField(default=False)
    snoozed_until = serializers.DateTimeField(required=False, allow_null=True, default=None)
    rotate_secret = serializers.BooleanField(required=False, default=False, help_text="issue a new signing secret")


def evaluation_interval_s() -> float:
    """How often the rules are evaluated (the beat schedule's ``alerts-evaluate``): the shortest
    duration a rule may ask a condition to hold."""
    schedule = settings.CELERY_BEAT_SCHEDULE["alerts-evaluate"]["schedule"]  # seconds (settings.py)
    return float(cast(float, schedule))


def _target(data: dict[str, Any]) -> tuple[Team | None, Project | None]:
    scope = data["scope"]
    team = project = None
    if scope == Scope.TEAM:
        if not data.get("team"):
            raise invalid("team", "required for a team rule")
        team = Team.objects.filter(slug=data["team"]).first()
        if team is None:
            raise ApiError("not_found", "team: not found", fields={"team": "not found"}, status_code=400)
    elif scope == Scope.PROJECT:
        if not data.get("project"):
            raise invalid("project", "required for a project rule")
        project = Project.objects.filter(slug=data["project"]).select_related("team").first()
        if project is None:
            raise ApiError("not_found", "project: not found", fields={"project": "not found"}, status_code=400)
    return team, project


def _webhook_check(request: Request, url: str) -> None:
    """A new webhook URL: on the public-host allowlist unless an organization admin sets it (403
    naming webhook_url), and through the egress policy now (400 with its reason)."""
    host = egress.url_host(url)  # "" for a URL the policy cannot read: its 400 says why
    if host and not is_org_admin(request.user) and host not in settings.ALERT_WEBHOOK_HOSTS:
        message = "only organization admins may send to hosts outside PHANTOMHUB_ALERT_WEBHOOK_HOSTS"
        listed = ", ".join(settings.ALERT_WEBHOOK_HOSTS) or "none are listed"
        raise ApiError("forbidden", f"webhook_url: {message} ({listed})", fields={"webhook_url": message}, status_code=403)
    problem = egress.url_problem(url)
    if problem:
        raise invalid("webhook_url", problem)


def _changes(request: Request, data: dict[str, Any], *, before: AlertRule | None = None) -> dict[str, Any]:
    """Validated model fields of a rule from the input, 4xx naming the field at fault. A webhook
    URL is checked when it is new or changed (`before`: the rule as it was)."""
    team, project = _target(data)
    if not selectors.rule_writable(user=request.user, scope=data["scope"], team_id=team.pk if team else None, project=project):
        raise ApiError(
            "forbidden",
            "rules are set by organization admins, and a team's by its admins",
            status_code=403,
        )
    name = data["name"].strip()
    if CONTROL_CHARS.search(name):
        raise invalid("name", "must be one line of text, without control characters")
    url = data["webhook_url"].strip()
    if url and (before is None or url != before.webhook_url):
        _webhook_check(request, url)
    params = params_clean(data["kind"], data.get("params") or {})
    interval = evaluation_interval_s()
    if data["for_s"] < interval:
        # Rules are evaluated every interval: a condition held for less is never seen to hold.
        message = f"must be at least one evaluation interval ({interval:g} s): rules are checked every {interval:g} s"
        raise invalid("for_s", message)
    if data["kind"] == RuleKind.SILENT_RUN and data["for_s"] < SILENT_FOR_S_MIN:
        # A shorter silence is every healthy run between two of its flushes (SILENT_FOR_S_MIN).
        raise invalid("for_s", f"a silent-run rule needs at least {SILENT_FOR_S_MIN:.0f} s of silence")
    changes = {
        "name": name or "alert",
        "kind": data["kind"],
        "scope": data["scope"],
        "team": team,
        "project": project,
        "params": params,
        "for_s": data["for_s"],
        "window_s": data["window_s"],
        "webhook_url": url,
        "webhook_format": data["webhook_format"],
        "email_to": sorted(set(data["email_to"])),
        "enabled": data["enabled"],
        "muted": data["muted"],
        "snoozed_until": data.get("snoozed_until"),
    }
    if data.get("rotate_secret"):
        changes["webhook_secret"] = webhook_secret_new()
    return changes


def _rule_visible(request: Request, rule_id: int) -> AlertRule:
    rule = selectors.rules_visible(request.user).filter(pk=rule_id).first()
    if rule is None:
        raise ApiError("not_found", "alert rule not found", status_code=404)
    return rule


def _may_write(request: Request, rule: AlertRule) -> None:
    if not _writable(request.user, rule):
        raise ApiError("forbidden", "rules are set by organization admins, and a team's by its admins", status_code=403)


class AlertRuleListApi(APIView):
    @extend_schema(
        responses=OBJ, summary="Alert rules you may see, with the thresholds each kind takes", operation_id="alerts_rules_list"
    )
    def get(self, request: Request) -> Response:
        rules = selectors.rules_visible(request.user).order_by("id")
        kinds = {
            kind: [{"name": p.name, "lo": p.lo, "hi": p.hi, "choices": list(p.choices), "help": p.help} for p in spec]
            for kind, spec in PARAMS.items()
        }
        editor, firing = selectors.request_editor(request), _firing(request.user)
        views = [rule_view(r, user=request.user, editor=editor, firing=firing.get(r.pk, 0)) for r in rules]
        return Response({"rules": views, "kinds": kinds, "evaluation_interval_s": evaluation_interval_s()})

    @extend_schema(request=RuleInput, responses={201: OBJ, 400: ErrorSerializer, 403: ErrorSerializer})
    def post(self, request: Request) -> Response:
        data = RuleInput(data=request.data)
        data.is_valid(raise_exception=True)
        changes = _changes(request, dict(data.validated_data))
        rule = services.rule_save(rule=AlertRule(created_by=cast(User, request.user)), changes=changes)
        return Response(
            rule_view(rule, user=request.user, editor=selectors.request_editor(request)), status=status.HTTP_201_CREATED
        )


class AlertRuleDetailApi(APIView):
    @extend_schema(responses=OBJ)
    def get(self, request: Request, rule_id: int) -> Response:
        return Response(rule_view(_rule_visible(request, rule_id), user=request.user, editor=selectors.request_editor(request)))

    @extend_schema(request=RuleInput, responses={200: OBJ, 400: ErrorSerializer, 403: ErrorSerializer})
    def patch(self, request: Request, rule_id: int) -> Response:
        rule = _rule_visible(request, rule_id)
        _may_write(request, rule)
        current = rule_view(rule, user=request.user, editor=selectors.request_editor(request))
        merged = {k: current[k] for k in ("name", "kind", "scope", "team", "project", "params", "for_s", "window_s",
                                          "webhook_url", "webhook_format", "email_to", "enabled", "muted")}  # fmt: skip
        merged["snoozed_until"] = rule.snoozed_until
        if merged["scope"] != Scope.TEAM:
            merged["team"] = None
        if not isinstance(request.data, dict):
            raise ApiError("invalid", "the body must be a JSON object")
        if "kind" in request.data and request.data["kind"] != rule.kind and "params" not in request.data:
            merged["params"] = {}
        data = RuleInput(data={**merged, **request.data})
        data.is_valid(raise_exception=True)
        with transaction.atomic():
            services.rule_save(rule=rule, changes=_changes(request, dict(data.validated_data), before=rule))
        return Response(rule_view(rule, user=request.user, editor=selectors.request_editor(request)))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, rule_id: int) -> Response:
        rule = _rule_visible(request, rule_id)
        _may_write(request, rule)
        rule.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertRuleTestApi(APIView):
    @extend_schema(request=None, responses=OBJ, summary="Send a test message through the rule's webhook and email now")
    def post(self, request: Request, rule_id: int) -> Response:
        rule = _rule_visible(request, rule_id)
        _may_write(request, rule)
        if not rule.webhook_url and not rule.email_to:
            raise invalid("webhook_url", "the rule has no webhook URL and no email address to test")
        made = services.rule_test_send(rule=rule)
        editor = selectors.request_editor(request)
        return Response({"deliveries": [delivery_view(d, editor=editor) for d in made]})


class StateInput(serializers.Serializer[Any]):
    muted = serializers.BooleanField(required=False, allow_null=True, default=None)
    snoozed_until = serializers.DateTimeField(required=False, allow_null=True)


class AlertStateListApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, description="pending, firing, resolved or ok; default: all but ok"),
            OpenApiParameter("rule", int, description="one rule's alerts"),
            OpenApiParameter("limit", int, description="1 to 500 (default 100)"),
        ],
        responses=OBJ,
        summary="Alerts: each rule's subjects that are pending, firing or recently resolved",
    )
    def get(self, request: Request) -> Response:
        states = selectors.states_visible(request.user)
        wanted = request.query_params.get("state", "").strip()
        if wanted:
            if wanted not in ("ok", "pending", "firing", "resolved"):
                raise invalid("state", "must be ok, pending, firing or resolved")
            states = states.filter(state=wanted)
        else:
            states = states.exclude(state="ok")
        if request.query_params.get("rule"):
            states = states.filter(rule_id=query_int(request.query_params, "rule", 0, 1, 2**31))
        limit = query_int(request.query_params, "limit", 100, 1, 500)
        editor = selectors.request_editor(request)
        return Response({"alerts": [state_view(s, user=request.user, editor=editor) for s in states.order_by("-id")[:limit]]})


class AlertStateDetailApi(APIView):
    @extend_schema(request=StateInput, responses={200: OBJ, 403: ErrorSerializer}, summary="Mute or snooze one subject of a rule")
    def patch(self, request: Request, state_id: int) -> Response:
        state = selectors.states_visible(request.user).filter(pk=state_id).first()
        if state is None:
            raise ApiError("not_found", "alert not found", status_code=404)
        _may_write(request, state.rule)
        data = StateInput(data=request.data)
        data.is_valid(raise_exception=True)
        clear = "snoozed_until" in data.validated_data and data.validated_data["snoozed_until"] is None
        services.state_silence(
            state=state,
            muted=data.validated_data.get("muted"),
            snoozed_until=data.validated_data.get("snoozed_until"),
            clear_snooze=clear,
        )
        return Response(state_view(state, user=request.user))


class AlertDeliveryListApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("rule", int, description="one rule's deliveries"),
            OpenApiParameter("status", str, description="pending, sent or failed"),
            OpenApiParameter("limit", int, description="1 to 500 (default 100)"),
        ],
        responses=OBJ,
        summary="The delivery log: every webhook and email attempt's outcome, newest first",
    )
    def get(self, request: Request) -> Response:
        page = sending.log_page(selectors.deliveries_visible(request.user), request.query_params, owner="rule")
        editor = selectors.request_editor(request)
        return Response({"deliveries": [delivery_view(d, editor=editor) for d in page]})

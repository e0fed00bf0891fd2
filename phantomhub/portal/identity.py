"""Settings → People & groups: the group mapping with its preview, and people's memberships and
organization flags (docs/portal-api.md, "People and the group mapping"; the rules' meaning in
docs/identity.md, "Groups to teams and roles").

Thin views: the body is checked here (every bad row named at once, nothing written), the work is
done by accounts.mapping and accounts.people, and a local edit of access the directory gives is
refused with 409 and the sentence saying where it comes from (accounts/origins.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.directory import ORG_FLAGS, Rule, mapping_preview
from phantomhub.accounts.mapping import (
    MAX_RULES,
    changes_by_person,
    changes_grouped,
    directory_groups,
    mapping_replace,
    rule_matches,
)
from phantomhub.accounts.models import TEAM_GRANT_ROLES, Grant, GroupMappingRule, Role, Team
from phantomhub.accounts.origins import Refused
from phantomhub.accounts.people import (
    may_manage_team,
    membership_remove,
    membership_set,
    org_flags_set,
    people_page,
    person_view,
    teams_led,
)
from phantomhub.accounts.permissions import OrgAdminOnly, TokenScopes, is_org_admin
from phantomhub.errors import ApiError, invalid, query_int
from phantomhub.schema import ErrorSerializer

OBJ = OpenApiTypes.OBJECT
PATTERN_MAX = GroupMappingRule._meta.get_field("pattern").max_length or 255
MAPPING_BODY_BYTES = 256 * 1024  # 500 rules of the longest pattern fit; nothing else is this large
PERSON_BODY_BYTES = 4 * 1024


class OrgAdminOrTeamLead(TokenScopes):
    """Organization admins, and the leads of some team (which team they may touch is the view's
    business: accounts.people.may_manage_team)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if is_org_admin(request.user) or teams_led(request.user):
            return True
        self.message = "this needs an organization admin or a team's lead"
        return False


def _refused(exc: Refused, field: str) -> ApiError:
    return ApiError(exc.code, exc.message, fields={field: exc.message}, status_code=status.HTTP_409_CONFLICT)


# --- the group mapping ----------------------------------------------------------------------------


def rules_from_body(body: Any) -> list[Rule]:
    """``{"rules": [{"pattern", "grant", "team"}, ...]}`` checked row by row; every bad field is
    named with its row (`rules[3].team`) in one 400."""
    if not isinstance(body, dict) or set(body) - {"rules"} or not isinstance(body.get("rules"), list):
        raise invalid("rules", 'send {"rules": [...]} (a list of {pattern, grant, team})')
    raw = body["rules"]
    if len(raw) > MAX_RULES:
        raise invalid("rules", f"at most {MAX_RULES} rules")
    teams = dict(Team.objects.values_list("slug", "pk"))
    errors: dict[str, str] = {}
    seen: dict[tuple[str, str, int | None], int] = {}
    out: list[Rule] = []
    for i, item in enumerate(raw):
        where = f"rules[{i}]"
        if not isinstance(item, dict):
            errors[where] = "must be an object with pattern, grant and team"
            continue
        bad = len(errors)
        for name in sorted(set(item) - {"pattern", "grant", "team"}):
            errors[f"{where}.{name}"] = "unknown field"
        pattern = item.get("pattern")
        if not isinstance(pattern, str) or not pattern.strip():
            errors[f"{where}.pattern"] = "a group name or glob is required"
        elif len(pattern.strip()) > PATTERN_MAX:
            errors[f"{where}.pattern"] = f"at most {PATTERN_MAX} characters"
        grant = item.get("grant")
        team = item.get("team")
        if grant not in Grant.values:
            errors[f"{where}.grant"] = f"must be one of {', '.join(Grant.values)}"
        elif team is not None and not isinstance(team, str):
            errors[f"{where}.team"] = "must be a team slug or null"
        elif grant in ORG_FLAGS and team:
            errors[f"{where}.team"] = f"must be empty: {grant} is an organization role, not a team's"
        elif grant in TEAM_GRANT_ROLES and not team:
            errors[f"{where}.team"] = f"a {grant} rule names its team"
        elif grant in TEAM_GRANT_ROLES and team not in teams:
            errors[f"{where}.team"] = f"no team {team!r}"
        if len(errors) > bad:
            continue
        rule = Rule(str(pattern).strip(), str(grant), teams[str(team)] if grant in TEAM_GRANT_ROLES else None)
        key = (rule.pattern, rule.grant, rule.team_id)
        if key in seen:
            errors[f"{where}.pattern"] = f"the same rule as rules[{seen[key]}]"
            continue
        seen[key] = i
        out.append(rule)
    if errors:
        raise ApiError("invalid", "; ".join(f"{k}: {v}" for k, v in errors.items()), fields=errors)
    return out


def _rule_out(rule: Rule, slugs: dict[int, str]) -> dict[str, Any]:
    return {"pattern": rule.pattern, "grant": rule.grant, "team": slugs.get(rule.team_id) if rule.team_id else None}


def _mapping_view(rules: list[Rule]) -> dict[str, Any]:
    """The rules with the directory's groups and, per rule, the groups it matches."""
    slugs = dict(Team.objects.values_list("pk", "slug"))
    groups = directory_groups()
    matches = rule_matches(rules, [g["name"] for g in groups])
    return {
        "rules": [_rule_out(r, slugs) | {"matches": m} for r, m in zip(rules, matches, strict=True)],
        "groups": groups,
        "teams": sorted(slugs.values()),  # for the team grants' choices
    }


def _stored() -> list[Rule]:
    return [Rule(r.pattern, r.grant, r.team_id) for r in GroupMappingRule.objects.select_related("team")]


class GroupMappingApi(APIView):
    permission_classes = [OrgAdminOnly]
    max_body_bytes = MAPPING_BODY_BYTES

    @extend_schema(responses=OBJ, summary="The group mapping: rules (pattern, grant, team), the directory's groups with "
                   "their active members, and the groups each rule matches")  # fmt: skip
    def get(self, request: Request) -> Response:
        return Response(_mapping_view(_stored()))

    @extend_schema(
        request=OBJ,
        responses={200: OBJ, 400: ErrorSerializer, 409: ErrorSerializer},
        summary="Replace the group mapping and re-sync everyone the directory knows; answers what changed",
    )
    def put(self, request: Request) -> Response:
        rules = rules_from_body(request.data)
        try:
            saved = mapping_replace(rules)
        except IntegrityError:
            raise ApiError("conflict", "the mapping was saved by someone else meanwhile; reload it and try again",
                           status_code=status.HTTP_409_CONFLICT) from None  # fmt: skip
        body = _mapping_view(_stored())
        return Response(
            body
            | {
                "changes": changes_grouped(saved.changes),
                "people": changes_by_person(saved.changes),
                "deactivated": saved.deactivated,
                "synced": saved.synced,
            }
        )


class GroupMappingPreviewApi(APIView):
    permission_classes = [OrgAdminOnly]
    max_body_bytes = MAPPING_BODY_BYTES

    @extend_schema(
        request=OBJ,
        responses={200: OBJ, 400: ErrorSerializer},
        summary="What a proposed group mapping would change for active people (nothing saved)",
    )
    def post(self, request: Request) -> Response:
        rules = rules_from_body(request.data)
        changes = mapping_preview(rules)
        return Response(_mapping_view(rules) | {"changes": changes_grouped(changes), "people": changes_by_person(changes)})


# --- people -----------------------------------------------------------------------------------------


def _person(username: str) -> Any:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ApiError("not_found", f"no person {username!r}", status_code=status.HTTP_404_NOT_FOUND)
    return user


def _managed_team(request: Request, slug: str) -> Team:
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise ApiError("not_found", f"no team {slug!r}", status_code=status.HTTP_404_NOT_FOUND)
    if not may_manage_team(request.user, team):
        raise ApiError("forbidden", f"memberships of {slug} are managed by organization admins and {slug}'s leads",
                       status_code=status.HTTP_403_FORBIDDEN)  # fmt: skip
    return team


def _body_of(request: Request, allowed: set[str]) -> dict[str, Any]:
    body = request.data
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise invalid(unknown[0], "unknown field")
    return dict(body)


class PeopleApi(APIView):
    permission_classes = [OrgAdminOrTeamLead]

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, description="part of a username, name or email"),
            OpenApiParameter("page", int, description="page number, from 1"),
            OpenApiParameter("page_size", int, description="people per page, 1 to 500 (default 100)"),
        ],
        responses=OBJ,
        summary="People with their memberships and organization flags, each with its source (organization admins: "
        "everyone; a team's leads: the people of their teams)",
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        page, page_size = query_int(params, "page", 1, 1, 10**6), query_int(params, "page_size", 100, 1, 500)
        q = params.get("q", "").strip()
        if len(q) > 150:
            raise invalid("q", "at most 150 characters")
        return Response(people_page(viewer=request.user, q=q, page=page, page_size=page_size))


class PersonApi(APIView):
    permission_classes = [OrgAdminOnly]
    max_body_bytes = PERSON_BODY_BYTES

    @extend_schema(
        request=OBJ,
        responses={200: OBJ, 400: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
        summary="Set a person's organization flags by hand (is_org_admin, is_finance); refused (409) for a flag "
        "the directory gives",
    )
    def patch(self, request: Request, username: str) -> Response:
        body = _body_of(request, set(ORG_FLAGS.values()))
        if not body:
            raise invalid("body", f"name a flag to set: {', '.join(ORG_FLAGS.values())}")
        for name, value in body.items():
            if not isinstance(value, bool):
                raise invalid(name, "must be true or false")
        user = _person(username)
        try:
            org_flags_set(user=user, changes=body)
        except Refused as exc:
            raise _refused(exc, next(iter(body)) if len(body) == 1 else "body") from None
        return Response(person_view(viewer=request.user, user=user))


class PersonMembershipApi(APIView):
    permission_classes = [OrgAdminOrTeamLead]
    max_body_bytes = PERSON_BODY_BYTES

    @extend_schema(
        request=OBJ,
        responses={200: OBJ, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
        summary='Give a person a role in a team by hand ({"role": "viewer" | "member" | "admin"}); refused (409) for '
        "a membership the directory gives",
    )
    def put(self, request: Request, username: str, slug: str) -> Response:
        team = _managed_team(request, slug)
        role = _body_of(request, {"role"}).get("role")
        if role not in Role.values:
            raise invalid("role", f"must be one of {', '.join(Role.values)}")
        user = _person(username)
        try:
            membership_set(user=user, team=team, role=role)
        except Refused as exc:
            raise _refused(exc, "role") from None
        return Response(person_view(viewer=request.user, user=user))

    @extend_schema(
        request=None,
        responses={200: OBJ, 403: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
        summary="Take a person out of a team by hand; refused (409) for a membership the directory gives",
    )
    def delete(self, request: Request, username: str, slug: str) -> Response:
        team = _managed_team(request, slug)
        user = _person(username)
        try:
            removed = membership_remove(user=user, team=team)
        except Refused as exc:
            raise _refused(exc, "membership") from None
        if not removed:
            raise ApiError("not_found", f"{username} is not in {slug}", status_code=status.HTTP_404_NOT_FOUND)
        return Response(person_view(viewer=request.user, user=user))

"""The token API of Settings (docs/portal-api.md, "Tokens"): list, create, rotate, revoke.

Tokens are managed by signed-in people only (no token manages tokens), each person the tokens
`accounts.selectors.tokens_manageable` gives them; another's token answers 404, as if absent.
The lifecycle itself (expiry, rotation's overlap, the refusals) is accounts' (docs/identity.md,
"Tokens")."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.accounts.permissions import is_org_admin
from phantomhub.accounts.selectors import projects_administered, tokens_manageable
from phantomhub.accounts.services import (
    TOKEN_MAX_EXPIRY_DAYS,
    TOKEN_MAX_OVERLAP_S,
    personal_token_create,
    project_token_create,
    scim_token_create,
    token_expiry,
    token_revoke,
    token_rotate,
)
from phantomhub.accounts.token_life import token_ends_at, token_state
from phantomhub.errors import ApiError, invalid
from phantomhub.schema import ErrorSerializer

# A token request is a few hundred bytes; refused past this before it is parsed.
MAX_TOKEN_BODY_BYTES = 16 * 1024


def _when(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def token_row_fields() -> dict[str, serializers.Field[Any, Any, Any, Any]]:
    return {
        "id": serializers.IntegerField(),
        "prefix": serializers.CharField(),
        "kind": serializers.CharField(help_text="project, personal, node or scim"),
        "name": serializers.CharField(),
        "project": serializers.CharField(allow_null=True),
        "user": serializers.CharField(allow_null=True, help_text="a personal token's person"),
        "owner": serializers.CharField(allow_null=True, help_text="the person it belongs to: personal, its user; else its maker"),
        "created_at": serializers.DateTimeField(),
        "expires_at": serializers.DateTimeField(allow_null=True),
        "last_used_at": serializers.DateTimeField(allow_null=True),
        "last_used_address": serializers.CharField(allow_null=True, help_text="the client address of that use"),
        "revoked_at": serializers.DateTimeField(allow_null=True),
        "state": serializers.CharField(help_text="active, expiring (within 7 days), rotated, expired or revoked"),
        "replaced_by": serializers.IntegerField(allow_null=True, help_text="the id of the token that replaced it"),
        "overlap_ends_at": serializers.DateTimeField(allow_null=True, help_text="a rotated token works until then"),
        "ends_at": serializers.DateTimeField(allow_null=True, help_text="when it stops (or stopped) working"),
        "hostnames": serializers.ListField(
            child=serializers.CharField(), help_text="a node token's nodes (exact or globs); empty for other kinds"
        ),
    }


def token_row(token: ApiToken) -> dict[str, Any]:
    owner = token.owner
    return {
        "id": token.pk,
        "prefix": token.prefix,
        "kind": token.kind,
        "name": token.name,
        "project": token.project.slug if token.project else None,
        "user": token.user.get_username() if token.user else None,
        "owner": owner.get_username() if owner is not None else None,
        "created_at": _when(token.created_at),
        "expires_at": _when(token.expires_at),
        "last_used_at": _when(token.last_used_at),
        "last_used_address": token.last_used_address,
        "revoked_at": _when(token.revoked_at),
        "state": token_state(token, timezone.now()).value,
        "replaced_by": token.replaced_by_id,
        "overlap_ends_at": _when(token.overlap_ends_at),
        "ends_at": _when(token_ends_at(token)),
        "hostnames": list(token.hostnames or []) if token.kind == TokenKind.NODE else [],
    }


ISSUED = inline_serializer(
    "TokenIssued", {**token_row_fields(), "token": serializers.CharField(help_text="the token, shown only once")}
)


class _TokenView(APIView):
    max_body_bytes = MAX_TOKEN_BODY_BYTES

    def people_only(self, request: Request) -> User:
        if isinstance(request.user, ProjectPrincipal) or request.auth is not None:
            raise ApiError("forbidden", "tokens are managed by signed-in people", status_code=403)
        return cast(User, request.user)

    def manageable(self, request: Request, token_id: int) -> ApiToken:
        token = tokens_manageable(self.people_only(request)).filter(pk=token_id).select_related("project", "user").first()
        if token is None:
            raise ApiError("not_found", "token not found", status_code=404)
        return token


class TokenListApi(_TokenView):
    class TokenInput(serializers.Serializer[Any]):
        kind = serializers.ChoiceField(choices=TokenKind.choices, default=TokenKind.PROJECT)
        project = serializers.SlugField(required=False)
        name = serializers.CharField(max_length=200, help_text="what it is for, e.g. 'training cluster'")
        hostnames = serializers.JSONField(required=False, default=None, help_text="a node token's nodes: exact or globs")
        expires_in_days = serializers.IntegerField(
            required=False, min_value=1, max_value=TOKEN_MAX_EXPIRY_DAYS, help_text="expire this many days from now"
        )
        expires_at = serializers.DateTimeField(required=False, help_text="expire at this time (ISO 8601)")

    @extend_schema(responses=inline_serializer("TokenRow", token_row_fields(), many=True))
    def get(self, request: Request) -> Response:
        tokens = tokens_manageable(self.people_only(request)).select_related("project", "user", "created_by")
        return Response([token_row(t) for t in tokens.order_by("-created_at", "-id")])

    @extend_schema(request=TokenInput, responses={201: ISSUED, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer})
    def post(self, request: Request) -> Response:
        user = self.people_only(request)
        data = self.TokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        given = data.validated_data
        expires_at = token_expiry(expires_in_days=given.get("expires_in_days"), expires_at=given.get("expires_at"))
        if given["kind"] == TokenKind.PERSONAL:
            issued = personal_token_create(user=user, name=given["name"], expires_at=expires_at)
        elif given["kind"] == TokenKind.NODE:
            if not is_org_admin(user):
                raise ApiError(
                    "forbidden", "node tokens are created by organization admins", fields={"kind": "admins only"}, status_code=403
                )
            from phantomhub.fleet.services import node_token_create

            try:
                issued = node_token_create(
                    name=given["name"], hostnames=given["hostnames"], created_by=user, expires_at=expires_at
                )
            except ValueError as exc:
                raise invalid("hostnames", str(exc)) from None
        elif given["kind"] == TokenKind.SCIM:  # the identity provider's (docs/identity.md, "SCIM provisioning")
            if not is_org_admin(user):
                raise ApiError(
                    "forbidden", "SCIM tokens are created by organization admins", fields={"kind": "admins only"}, status_code=403
                )
            issued = scim_token_create(name=given["name"], created_by=user, expires_at=expires_at)
        else:
            slug = given.get("project")
            if not slug:
                raise invalid("project", "required for a project token")
            project = projects_administered(user).filter(slug=slug).first()
            if project is None:
                raise ApiError(
                    "not_found",
                    "project not found, or you do not administer it",
                    fields={"project": "not found"},
                    status_code=404,
                )
            issued = project_token_create(project=project, name=given["name"], created_by=user, expires_at=expires_at)
        return Response({**token_row(issued.token), "token": issued.raw}, status=status.HTTP_201_CREATED)


class TokenDetailApi(_TokenView):
    @extend_schema(responses={204: None, 404: ErrorSerializer}, summary="Revoke a token: refused from the next request on")
    def delete(self, request: Request, token_id: int) -> Response:
        token_revoke(token=self.manageable(request, token_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenRotateApi(_TokenView):
    class RotateInput(serializers.Serializer[Any]):
        overlap_s = serializers.IntegerField(
            required=False,
            min_value=0,
            max_value=TOKEN_MAX_OVERLAP_S,
            help_text="seconds the old token keeps working (default PHANTOMHUB_TOKEN_ROTATION_OVERLAP_S; 0: stops at once)",
        )

    @extend_schema(
        request=RotateInput,
        responses={
            201: inline_serializer(
                "TokenRotated", {"token": ISSUED, "old": inline_serializer("TokenRotatedOld", token_row_fields())}
            ),
            400: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,  # revoked, expired or already rotated
        },
        summary="Rotate a token: a new one now, the old one until the overlap ends",
    )
    def post(self, request: Request, token_id: int) -> Response:
        token = self.manageable(request, token_id)
        data = self.RotateInput(data=request.data if request.data is not None else {})
        data.is_valid(raise_exception=True)
        issued = token_rotate(token=token, overlap_s=data.validated_data.get("overlap_s"))
        token.refresh_from_db()
        return Response(
            {"token": {**token_row(issued.token), "token": issued.raw}, "old": token_row(token)}, status=status.HTTP_201_CREATED
        )

"""The saved views API (docs/portal-api.md, "Saved views"): list, create, rename/share/unshare, delete.

Saved views are signed-in people's (no token of any kind reaches them); a view one may not see
answers 404, as if absent. Who may do what is `portal.saved_views`'.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.auth import ProjectPrincipal
from phantomhub.errors import ApiError
from phantomhub.portal.models import SavedView
from phantomhub.portal.saved_views import (
    ViewInput,
    ViewRefused,
    view_create,
    view_deletable,
    view_delete,
    view_update,
    views_visible,
)
from phantomhub.portal.view_query import MAX_QUERY_CHARS, PAGE_PARAMS, view_url
from phantomhub.schema import ErrorSerializer

# A view is a name, a page, a team and a query of at most MAX_QUERY_CHARS; refused past this unparsed.
MAX_VIEW_BODY_BYTES = 8 * 1024


def view_row_fields() -> dict[str, serializers.Field[Any, Any, Any, Any]]:
    return {
        "id": serializers.IntegerField(),
        "name": serializers.CharField(),
        "page": serializers.CharField(help_text="runs, leaderboards or finance"),
        "query": serializers.CharField(help_text="the page's query string, without '?'"),
        "url": serializers.CharField(help_text="the page's path and query: what opening the view opens"),
        "team": serializers.CharField(allow_null=True, help_text="the team it is shared with; null: private"),
        "team_name": serializers.CharField(allow_null=True),
        "owner": serializers.CharField(),
        "mine": serializers.BooleanField(help_text="the caller owns it (may rename, share, unshare)"),
        "can_delete": serializers.BooleanField(help_text="its owner, or a lead of the team it is shared with"),
        "created_at": serializers.DateTimeField(),
        "updated_at": serializers.DateTimeField(),
    }


def view_row(view: SavedView, user: User) -> dict[str, Any]:
    return {
        "id": view.pk,
        "name": view.name,
        "page": view.page,
        "query": view.query,
        "url": view_url(view.page, view.query),
        "team": view.team.slug if view.team else None,
        "team_name": view.team.label if view.team else None,
        "owner": view.owner.get_username(),
        "mine": view.owner_id == user.pk,
        "can_delete": view_deletable(user, view),
        "created_at": view.created_at.isoformat(),
        "updated_at": view.updated_at.isoformat(),
    }


ROW = inline_serializer("SavedViewRow", view_row_fields())


def _refusal(exc: ViewRefused) -> ApiError:
    code = {400: "invalid", 403: "forbidden", 409: "conflict"}.get(exc.status, "invalid")
    return ApiError(code, f"{exc.field}: {exc}", fields={exc.field: str(exc)}, status_code=exc.status)


class _ViewsView(APIView):
    max_body_bytes = MAX_VIEW_BODY_BYTES

    def people_only(self, request: Request) -> User:
        if isinstance(request.user, ProjectPrincipal) or request.auth is not None:
            raise ApiError("forbidden", "saved views are signed-in people's", status_code=403)
        return cast(User, request.user)

    def visible(self, request: Request, view_id: int) -> tuple[User, SavedView]:
        user = self.people_only(request)
        view = views_visible(user).filter(pk=view_id).first()
        if view is None:
            raise ApiError("not_found", "saved view not found", status_code=404)
        return user, view


class SavedViewListApi(_ViewsView):
    class ViewCreate(serializers.Serializer[Any]):
        name = serializers.CharField(max_length=100)
        page = serializers.ChoiceField(choices=sorted(PAGE_PARAMS))
        query = serializers.CharField(
            max_length=MAX_QUERY_CHARS + 1,
            allow_blank=True,
            default="",
            trim_whitespace=False,
            help_text="the page's query string",
        )
        team = serializers.SlugField(max_length=64, required=False, allow_null=True, allow_blank=True,
                                     help_text="share with this team (one you belong to); absent or null: private")  # fmt: skip

    @extend_schema(responses=inline_serializer("SavedViewList", {"views": serializers.ListField(child=ROW)}))
    def get(self, request: Request) -> Response:
        user = self.people_only(request)
        return Response({"views": [view_row(v, user) for v in views_visible(user)]})

    @extend_schema(request=ViewCreate, responses={201: ROW, 400: ErrorSerializer, 403: ErrorSerializer, 409: ErrorSerializer})
    def post(self, request: Request) -> Response:
        user = self.people_only(request)
        data = self.ViewCreate(data=request.data)
        data.is_valid(raise_exception=True)
        given = data.validated_data
        try:
            view = view_create(
                owner=user, given=ViewInput(name=given["name"], page=given["page"], query=given["query"], team=given.get("team"))
            )
        except ViewRefused as exc:
            raise _refusal(exc) from None
        return Response(view_row(view, user), status=status.HTTP_201_CREATED)


class SavedViewDetailApi(_ViewsView):
    class ViewChange(serializers.Serializer[Any]):
        name = serializers.CharField(max_length=100, required=False)
        team = serializers.SlugField(max_length=64, required=False, allow_null=True, allow_blank=True,
                                     help_text="share with this team (one you belong to); null: unshare")  # fmt: skip

    @extend_schema(
        request=ViewChange,
        responses={200: ROW, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
    )
    def patch(self, request: Request, view_id: int) -> Response:
        user, view = self.visible(request, view_id)
        data = self.ViewChange(data=request.data)
        data.is_valid(raise_exception=True)
        changes: dict[str, Any] = dict(data.validated_data)
        try:
            view = view_update(user=user, view=view, **changes)
        except ViewRefused as exc:
            raise _refusal(exc) from None
        return Response(view_row(view, user))

    @extend_schema(responses={204: None, 403: ErrorSerializer, 404: ErrorSerializer})
    def delete(self, request: Request, view_id: int) -> Response:
        user, view = self.visible(request, view_id)
        try:
            view_delete(user=user, view=view)
        except ViewRefused as exc:
            raise _refusal(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)

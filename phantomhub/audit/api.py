"""The audit log's read API: GET /api/v1/audit (a page of entries) and /api/v1/audit.csv (docs/audit.md).

Organization admins read every entry; finance people the price and month entries; everyone else
is refused, and so are project and node tokens (TokenScopes). A personal token reads with its
owner's permission.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from phantomhub.accounts.permissions import TokenScopes, is_finance, is_org_admin
from phantomhub.audit import selectors
from phantomhub.audit.registration import KIND_LABELS
from phantomhub.csvfile import csv_lines
from phantomhub.errors import ApiError, invalid, query_int
from phantomhub.schema import ErrorSerializer

MAX_TEXT = 200
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
PAGE = 50
MAX_PAGE = 200

FILTERS = [
    OpenApiParameter("actor", str, description='who: a username, "SCIM", "system", "sign-in" or "token phk_…"'),
    OpenApiParameter("kind", str, description="the kind of thing changed: " + ", ".join(KIND_LABELS)),
    OpenApiParameter("object_id", str, description="the changed object's id"),
    OpenApiParameter("action", str, description="create, update or delete"),
    OpenApiParameter("from", str, description="from this day (YYYY-MM-DD, UTC) or moment (ISO 8601), inclusive"),
    OpenApiParameter("to", str, description="up to this day (YYYY-MM-DD, UTC, the whole day) or moment (ISO 8601), exclusive"),
    OpenApiParameter("q", str, description="text in the object's name, the actor or the change"),
]
PAGING = [
    OpenApiParameter("cursor", int, description="the `next` of the previous page: entries older than it"),
    OpenApiParameter("limit", int, description=f"entries per page, 1 to {MAX_PAGE} (default {PAGE})"),
]


class AuditReaders(TokenScopes):
    """Organization admins and finance people (and their personal tokens); no one else."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        if is_org_admin(request.user) or is_finance(request.user):
            return True
        self.message = "the audit log is read by organization admins (and finance people, for prices and months)"
        return False


def _text(params: Any, name: str) -> str | None:
    value = str(params.get(name, "")).strip()
    if len(value) > MAX_TEXT:
        raise invalid(name, f"at most {MAX_TEXT} characters")
    return value or None


def _moment(params: Any, name: str, *, end_of_day: bool) -> datetime | None:
    raw = _text(params, name)
    if raw is None:
        return None
    try:
        if len(raw) == 10:  # a day: from its start, or (to) through its end
            day = date.fromisoformat(raw)
            if not EARLIEST.date() <= day < LATEST.date():
                raise invalid(name, "between 2000-01-01 and 2100-01-01")
            return datetime.combine(day + timedelta(days=1 if end_of_day else 0), time.min, tzinfo=UTC)
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(name, "a day YYYY-MM-DD or a moment in ISO 8601 (2026-09-01T12:00:00Z)") from None
    moment = moment if timezone.is_aware(moment) else moment.replace(tzinfo=UTC)
    if not EARLIEST <= moment <= LATEST:  # also keeps the UTC conversion away from year 9999's edge
        raise invalid(name, "between 2000-01-01 and 2100-01-01")
    return moment


def filters_parse(params: Any) -> selectors.Filters:
    """The filters of a request's query; 400 naming the parameter that is wrong."""
    kind = _text(params, "kind")
    if kind is not None and kind not in KIND_LABELS:
        raise invalid("kind", "one of " + ", ".join(KIND_LABELS))
    action = _text(params, "action")
    if action is not None and action not in selectors.ACTIONS:
        raise invalid("action", "create, update or delete")
    since = _moment(params, "from", end_of_day=False)
    until = _moment(params, "to", end_of_day=True)
    if since and until and until <= since:
        raise invalid("to", "must be after from")
    return selectors.Filters(
        actor=_text(params, "actor"),
        kind=kind,
        object_id=_text(params, "object_id"),
        action=action,
        since=since,
        until=until,
        text=_text(params, "q"),
    )


def _readable(request: Request, filters: selectors.Filters) -> frozenset[str]:
    kinds = selectors.kinds_readable(request.user)
    if filters.kind is not None and filters.kind not in kinds:
        raise ApiError(
            "forbidden",
            "finance people read the price and month entries of the audit log",
            fields={"kind": "not readable by finance"},
            status_code=403,
        )
    return kinds


class AuditListApi(APIView):
    permission_classes = [AuditReaders]

    @extend_schema(
        parameters=[*FILTERS, *PAGING],
        responses={200: OpenApiTypes.OBJECT, 400: ErrorSerializer, 403: ErrorSerializer},
        summary="Audit log entries, newest first (org admins; finance: prices and months)",
    )
    def get(self, request: Request) -> Response:
        filters = filters_parse(request.query_params)
        kinds = _readable(request, filters)
        cursor = query_int(request.query_params, "cursor", 0, 0, 2**62)
        limit = query_int(request.query_params, "limit", PAGE, 1, MAX_PAGE)
        rows = selectors.entries(filters, kinds)
        if cursor:
            rows = rows.filter(id__lt=cursor)
        page = list(rows[: limit + 1])
        more = len(page) > limit
        page = page[:limit]
        return Response(
            {
                "entries": [selectors.entry_row(entry) for entry in page],
                "next": page[-1].pk if more else None,
                "kinds": [{"kind": kind, "label": label} for kind, label in KIND_LABELS.items() if kind in kinds],
            }
        )


class AuditCsvApi(APIView):
    permission_classes = [AuditReaders]

    @extend_schema(
        parameters=FILTERS,
        responses={(200, "text/csv"): str, 400: ErrorSerializer, 403: ErrorSerializer},
        summary="The audit log's entries matching the filters as CSV, one row per changed field",
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        filters = filters_parse(request.query_params)
        rows = selectors.entries(filters, _readable(request, filters))
        response = StreamingHttpResponse(csv_lines(selectors.CSV_COLUMNS, selectors.csv_rows(rows)), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="phantomhub-audit-{timezone.now():%Y%m%d-%H%M%S}.csv"'
        return response

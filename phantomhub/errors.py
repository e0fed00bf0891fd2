"""One error shape for the whole API: {"error": {"code", "message", "fields"}}."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django import db
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response


class ApiError(exceptions.APIException):
    """A client error with a machine-readable code and the fields at fault."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        fields: dict[str, str] | None = None,
        status_code: int = status.HTTP_400_BAD_REQUEST,
    ) -> None:
        super().__init__(detail=message, code=code)
        self.code = code
        self.message = message
        self.fields = fields or {}
        self.status_code = status_code


def invalid(field: str, message: str, code: str = "invalid") -> ApiError:
    return ApiError(code, f"{field}: {message}", fields={field: message})


@contextmanager
def fields_within(prefix: str | None) -> Iterator[None]:
    """The 400s raised inside name their fields under `prefix`, the place of one part of a larger
    body (`batches[2]`: `steps.dur_ns` becomes `batches[2].steps.dur_ns`); None leaves them as raised."""
    if prefix is None:
        yield
        return
    try:
        yield
    except ApiError as exc:
        if exc.status_code != status.HTTP_400_BAD_REQUEST:
            raise
        fields = {f"{prefix}.{name}": message for name, message in exc.fields.items()} or {prefix: exc.message}
        message = "; ".join(f"{name}: {text}" for name, text in fields.items())
        raise ApiError(exc.code, message, fields=fields, status_code=exc.status_code) from None
    except exceptions.ValidationError as exc:
        raise exceptions.ValidationError({prefix: exc.detail}) from None


_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def _flatten(detail: Any, prefix: str = "") -> dict[str, str]:
    """DRF ValidationError details are nested dicts/lists; flatten to {"a.b": "message"}."""
    if isinstance(detail, dict):
        out: dict[str, str] = {}
        for key, value in detail.items():
            if isinstance(key, int):  # ListSerializer reports items by index
                path = f"{prefix}[{key}]"
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
            out.update(_flatten(value, path))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return {prefix or "non_field_errors": " ".join(str(item) for item in detail)}
        out = {}
        for index, value in enumerate(detail):
            out.update(_flatten(value, f"{prefix}[{index}]"))
        return out
    return {prefix or "non_field_errors": str(detail)}


def query_int(params: Any, name: str, default: int, lo: int, hi: int) -> int:
    """An integer query parameter within [lo, hi], or `default` when absent; 400 naming it otherwise."""
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(str(raw))
    except ValueError:
        raise invalid(name, "must be an integer") from None
    if not lo <= value <= hi:
        raise invalid(name, f"must be in [{lo}, {hi}]")
    return value


log = logging.getLogger(__name__)
DB_RETRY_AFTER_S = 5


def error_body(code: str, message: str, fields: dict[str, str] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    from rest_framework.views import exception_handler  # late: rest_framework.views imports our parser

    if isinstance(exc, ApiError):
        return Response(error_body(exc.code, exc.message, exc.fields), status=exc.status_code)
    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        # The database is restarting or unreachable: nothing is wrong with the request. A 503 with
        # Retry-After in the API's shape, which the agent waits out (its telemetry stays spooled).
        log.warning("database unavailable: %s", exc)
        body = error_body("unavailable", "the database is unavailable; retry shortly")
        return Response(body, status=503, headers={"Retry-After": str(DB_RETRY_AFTER_S)})
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    code = _CODES.get(response.status_code, "error")
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        message = "; ".join(f"{k}: {v}" for k, v in fields.items()) or "invalid input"
        response.data = error_body("invalid", message, fields)
    else:
        detail = getattr(exc, "detail", str(exc))
        response.data = error_body(code, str(detail))
    return response


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: under /api/ a URL no route takes (a run id that is no UUID, a month that is no
    YYYY-MM) answers in the API's error shape, like every other API error; Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "no such API endpoint or object"), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Http404())


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a refused CSRF check (signing in without the token) in the API's error
    shape under /api/; Django's page elsewhere (the admin's sign-in)."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("forbidden", f"CSRF check failed: {reason}"), status=403)
    from django.views.csrf import csrf_failure as django_csrf_failure

    return django_csrf_failure(request, reason=reason)


class LenientNegotiation(DefaultContentNegotiation):
    """Accept chooses among a view's renderers, but one it does not name is no 406: the view
    answers in its first renderer. A download (CSV, PDF, Parquet) is an HttpResponse of its own
    type whatever the renderer, so `Accept: text/csv` on a CSV, or `application/pdf` on the PDF,
    gets the file, and an error on the way is the one JSON error shape (REST_FRAMEWORK's
    DEFAULT_CONTENT_NEGOTIATION_CLASS; tests/test_api_errors.py)."""

    def select_renderer(self, request: Any, renderers: Any, format_suffix: str | None = None) -> Any:
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except exceptions.NotAcceptable:
            return renderers[0], renderers[0].media_type

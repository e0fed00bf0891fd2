"""Every request's changes carry who made them and from which address (context.py).

In settings.MIDDLEWARE after AuthenticationMiddleware. django-auditlog's own middleware is not
used: it believes X-Forwarded-For from anyone, and knows only the session's user."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from phantomhub.audit.context import request_context


class AuditContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with request_context(request):
            return self.get_response(request)

"""Sign-in lockout (django-axes): the answer given while a username is locked out from an address.

Axes counts failed sign-ins per (username, client address) in the database, so every web process
agrees and the embedded default (SQLite, no Redis) is covered too; it refuses a locked-out pair
before the password is hashed, on the portal's sign-in and on the admin's. Limits and cool-off
come from PHANTOMHUB_SIGN_IN_FAILURE_LIMIT and PHANTOMHUB_SIGN_IN_LOCKOUT_S (docs/deployment.md).
"""

from __future__ import annotations

import math
from typing import Any

from axes.helpers import get_client_parameters, get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.db.models import Max, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from phantomhub.errors import error_body


def sign_in_retry_after_s(*, request: HttpRequest, credentials: dict[str, Any] | None) -> int:
    """Seconds until the lockout of this request's (username, address) ends: the cool-off counts
    from the last recorded failure (failures during a lockout are not recorded, so it ends)."""
    cool_off = get_cool_off(request)
    if cool_off is None:
        return 0
    username = get_client_username(request, credentials)
    filters = get_client_parameters(
        username, getattr(request, "axes_ip_address", None), getattr(request, "axes_user_agent", None), request, credentials
    )
    match = Q()
    for kwargs in filters:
        match |= Q(**kwargs)
    last = AccessAttempt.objects.filter(match).aggregate(t=Max("attempt_time"))["t"] if filters else None
    if last is None:
        return math.ceil(cool_off.total_seconds())
    return max(1, math.ceil((last + cool_off - timezone.now()).total_seconds()))


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: 429 with Retry-After; the API's error shape under /api/."""
    wait_s = sign_in_retry_after_s(request=request, credentials=credentials)
    message = f"too many failed sign-ins for this username from this address; try again in {wait_s} s"
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(error_body("throttled", message), status=429)
    else:
        response = HttpResponse(message + "\n", status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(wait_s)
    return response

"""Sign-in lockout (django-axes): the answer given while a username is locked out from an address,
and a limit per address across usernames.

Axes counts failed sign-ins per (username, client address) in the database, so every web process
agrees and the embedded default (SQLite, no Redis) is covered too; it refuses a locked-out pair
before the password is hashed, on the portal's sign-in and on the admin's. Limits and cool-off
come from PHANTOMHUB_SIGN_IN_FAILURE_LIMIT and PHANTOMHUB_SIGN_IN_LOCKOUT_S (docs/deployment.md).

That pair never stops one password tried over many usernames from one address, so the same rows
are also summed per address: once an address has PHANTOMHUB_SIGN_IN_ADDRESS_FAILURE_LIMIT failed
sign-ins (any usernames) within the cool-off, `AddressSignInLimitBackend` refuses its sign-ins,
before any password is hashed, with 429 and Retry-After until enough of them are older than the
cool-off. Refused attempts are not recorded (as axes does), so waiting ends it.

Both count by the client's address, which behind a TLS proxy is not the connection's: every
client would share the proxy's, and 30 failures anywhere would stop everyone. So when the
connection comes from PHANTOMHUB_TRUSTED_PROXIES (gunicorn drops X-Forwarded-For from anyone
else, deploy/gunicorn.py), the address is the last one in X-Forwarded-For that is not a trusted
proxy: each proxy appends the address it was reached from (`client_address`, axes'
AXES_CLIENT_IP_CALLABLE).
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any

from axes.helpers import get_client_ip_address, get_client_parameters, get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import Max, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from phantomhub.errors import error_body

# Set on a request refused by the address limit: its Retry-After, for lockout_response.
_ADDRESS_WAIT = "phantomhub_sign_in_address_wait_s"


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_proxy(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    proxies: list[str] = settings.TRUSTED_PROXIES
    return "*" in proxies or any(address in ipaddress.ip_network(entry) for entry in proxies if entry != "*")


def client_address(request: HttpRequest) -> str | None:
    """The address a sign-in comes from: the connection's, or, when that is a trusted proxy (a
    Unix socket's peer is the local one, as gunicorn takes it), the last address of
    X-Forwarded-For that is not a trusted proxy (with `*`, any peer may say anything: the first)."""
    peer = request.META.get("REMOTE_ADDR") or ""
    peer_ip = _ip(peer)
    if not settings.TRUSTED_PROXIES or (peer_ip is not None and not _is_proxy(peer_ip)):
        return peer or None
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        hop_ip = _ip(hop)
        if hop_ip is None:
            break  # not an address: nothing before it can be believed
        if not _is_proxy(hop_ip):
            return str(hop_ip)
    return str(_ip(hops[0])) if hops and _ip(hops[0]) is not None else peer or None


def address_retry_after_s(*, request: HttpRequest) -> int:
    """Seconds until the request's address has fewer than SIGN_IN_ADDRESS_FAILURE_LIMIT failed
    sign-ins within the cool-off (0: it has fewer now). Axes keeps one row per (username, address,
    user agent) with its failures and the time of its last; a row leaves the count as a whole."""
    cool_off = get_cool_off(request)
    address = getattr(request, "axes_ip_address", None) or get_client_ip_address(request)  # client_address
    if cool_off is None or address is None:
        return 0
    now = timezone.now()
    rows = (
        AccessAttempt.objects.filter(ip_address=address, attempt_time__gt=now - cool_off)
        .order_by("-attempt_time")
        .values_list("attempt_time", "failures_since_start")
    )
    failures = 0
    for attempt_time, count in rows:  # newest first: the row that takes the sum to the limit
        failures += count
        if failures >= settings.SIGN_IN_ADDRESS_FAILURE_LIMIT:
            return max(1, math.ceil((attempt_time + cool_off - now).total_seconds()))
    return 0


class AddressSignInLimitBackend:
    """An authentication backend that lets no sign-in through from an address past its limit
    (after axes' own, before the one that hashes passwords): it marks the request as locked out,
    which AxesMiddleware answers with lockout_response, and stops authentication there."""

    def authenticate(self, request: HttpRequest | None, **credentials: Any) -> None:
        if request is None:
            return None
        wait_s = address_retry_after_s(request=request)
        if wait_s:
            setattr(request, _ADDRESS_WAIT, wait_s)
            request.axes_locked_out = True  # type: ignore[attr-defined]  # also: axes records no failure
            raise PermissionDenied("too many failed sign-ins from this address")
        return None  # no opinion: the next backend checks the password

    # No get_user: it signs nobody in, so sessions (and the test client's force_login, which takes
    # the first backend that has one) keep naming the backend that did.


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
    address_wait_s = getattr(request, _ADDRESS_WAIT, None)
    if address_wait_s is not None:
        wait_s = int(address_wait_s)
        message = f"too many failed sign-ins from this address; try again in {wait_s} s"
    else:
        wait_s = sign_in_retry_after_s(request=request, credentials=credentials)
        message = f"too many failed sign-ins for this username from this address; try again in {wait_s} s"
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(error_body("throttled", message), status=429)
    else:
        response = HttpResponse(message + "\n", status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(wait_s)
    return response

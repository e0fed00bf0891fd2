"""A single sign-on session after its sign-in: what it keeps, its refresh, its end
(docs/identity.md, "Refresh" and "Sign-out").

Every PHANTOMHUB_OIDC_REFRESH_S the person's next request reads their claims again with the
refresh-token grant, server-side, and re-syncs their groups, so someone removed from a group at
the provider loses that access at that request. Where the provider gives no refresh token or
refuses it, the session ends there: an API request is answered 401 `session_ended`, which the web
UI turns into the sign-in page with a sentence. A session ends PHANTOMHUB_SESSION_AGE_S after its
sign-in however active it is (its expiry is set at sign-in, not slid by refreshes).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import login, logout
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils import timezone

from phantomhub.accounts.oidc import BACKEND, OidcBackend, SignedIn
from phantomhub.accounts.oidc_provider import OidcError, provider
from phantomhub.errors import error_body

log = logging.getLogger(__name__)

SUBJECT = "phantomhub_oidc_subject"
ID_TOKEN = "phantomhub_oidc_id_token"
REFRESH_TOKEN = "phantomhub_oidc_refresh_token"
REFRESH_AT = "phantomhub_oidc_refresh_at"
ENDED_MESSAGE = "Your single sign-on session has ended; sign in again."
_LOCK_S = 60


def session_start(request: HttpRequest, signed_in: SignedIn) -> None:
    """Sign the person in and keep what the refresh and the sign-out need."""
    login(request, signed_in.user, backend=BACKEND)
    _keep(request, signed_in)
    request.session.set_expiry(timezone.now() + timedelta(seconds=settings.SESSION_COOKIE_AGE))


def _keep(request: HttpRequest, signed_in: SignedIn) -> None:
    request.session[SUBJECT] = signed_in.subject
    if signed_in.id_token:
        request.session[ID_TOKEN] = signed_in.id_token
    request.session[REFRESH_TOKEN] = signed_in.refresh_token
    request.session[REFRESH_AT] = time.time() + settings.OIDC_REFRESH_S


def session_refresh(request: HttpRequest) -> None:
    """Read the signed-in person's claims again and apply them; OidcError ends the session."""
    refresh_token = request.session.get(REFRESH_TOKEN)
    if not refresh_token:
        raise OidcError("session_ended", "the provider gave no refresh token at sign-in")
    signed_in = OidcBackend().refresh(refresh_token=refresh_token, subject=request.session[SUBJECT])
    user = getattr(request, "user", None)
    if user is None or signed_in.user.pk != user.pk:
        raise OidcError("session_ended", "the refreshed claims name another person")
    _keep(request, signed_in)


def logout_url(request: HttpRequest) -> str | None:
    """The provider's end-session URL for this session (RP-Initiated Logout 1.0), back to the
    sign-in page afterwards; None where the session is not single sign-on or the provider has none."""
    id_token = request.session.get(ID_TOKEN)
    if not id_token or not settings.OIDC_ISSUER:
        return None
    try:
        endpoint = provider().end_session_endpoint
    except OidcError as exc:
        log.warning("OIDC sign-out: the provider's session is left as is: %s", exc.detail)
        return None
    if endpoint is None:
        return None
    query = {
        "id_token_hint": id_token,
        "post_logout_redirect_uri": settings.PUBLIC_URL.rstrip("/") + "/login",
        "client_id": settings.OIDC_CLIENT_ID,
    }
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


class OidcSessionMiddleware:
    """After AuthenticationMiddleware: refreshes a single sign-on session that is due. Requests
    without such a session (tokens, password sessions, anonymous) only read the session dict."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        due = request.session.get(REFRESH_AT)
        if due is not None and time.time() >= float(due) and request.user.is_authenticated:
            refused = self._refresh(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    def _refresh(self, request: HttpRequest) -> HttpResponse | None:
        # One refresh per session at a time: a second request meanwhile goes on with the access
        # it had (a refresh token used twice may be refused, or revoke the grant).
        lock = f"phantomhub:oidc-refresh:{request.session.session_key}"
        try:
            if not cache.add(lock, 1, timeout=_LOCK_S):
                return None
        except Exception:  # the cache (Redis) is away: refresh without the lock rather than not at all
            log.warning("OIDC refresh without its lock: the cache is unreachable")
        try:
            session_refresh(request)
            return None
        except OidcError as exc:
            who: Any = request.user
            log.warning("OIDC session of %s ended at its refresh (%s): %s", who.get_username(), exc.code, exc.detail)
            logout(request)
            if request.path.startswith("/api/"):
                return JsonResponse(error_body("session_ended", ENDED_MESSAGE), status=401)
            return None
        finally:
            with contextlib.suppress(Exception):
                cache.delete(lock)


def sign_in_methods() -> dict[str, Any]:
    """What the sign-in page offers: the single sign-on button (its label and where it starts)
    when configured, and whether the password form is on."""
    oidc = {"label": settings.OIDC_LABEL, "url": reverse("oidc-start")} if settings.OIDC_ISSUER else None
    return {"oidc": oidc, "local_passwords": settings.LOCAL_PASSWORDS}

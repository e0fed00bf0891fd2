"""The browser's side of single sign-on: the start (to the provider, with state, nonce and PKCE),
the callback, and the break-glass link (docs/identity.md).

Every refusal sends the browser to the sign-in page with `?error=<code>`, which the page turns
into a sentence (frontend/src/pages/SignIn.tsx), and logs the reason: never a 500, never a
provider's error text shown as is.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import login, logout
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from phantomhub.accounts import breakglass
from phantomhub.accounts.oidc import OidcBackend, redirect_uri
from phantomhub.accounts.oidc_provider import OidcError, provider
from phantomhub.accounts.oidc_session import session_start
from phantomhub.accounts.signin import client_address

log = logging.getLogger(__name__)

# A sign-in started longer ago than this is refused at its callback (its state is dropped).
STATE_MAX_AGE_S = 600
# Provider error codes passed on as they are (RFC 6749, 4.1.2.1); any other is `provider_error`.
PROVIDER_ERRORS = {"access_denied", "login_required", "consent_required", "interaction_required"}


def refused(request: HttpRequest, code: str, detail: str) -> HttpResponse:
    """To the sign-in page with the code; a failed sign-in leaves nobody signed in in this browser
    (not whoever was before: a replayed or planted callback must not leave the page ambiguous)."""
    log.warning("OIDC sign-in refused (%s) from %s: %s", code, client_address(request), detail)
    if request.user.is_authenticated:
        logout(request)
    return HttpResponseRedirect("/login?" + urlencode({"error": code}))


class OidcStartView(OIDCAuthenticationRequestView):
    """GET: to the provider's authorization endpoint. The library makes the state, nonce and
    PKCE pair and keeps them in the session; the endpoint comes from discovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        View.__init__(self, *args, **kwargs)  # the library's reads fixed endpoint settings

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ISSUER:
            return refused(request, "oidc_off", "single sign-on is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider().authorization_endpoint
        except OidcError as exc:
            return refused(request, exc.code, exc.detail)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        response: HttpResponse = super().get(request)
        return response

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        return {"redirect_uri": redirect_uri()}  # PUBLIC_URL's, not the request's Host


class OidcCallbackView(OIDCAuthenticationCallbackView):
    """GET: the provider's answer. The state must be one this browser's session holds and is
    used once (a replayed or forged callback finds none); then the code is exchanged and the ID
    token checked against the state's nonce (accounts/oidc.py)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        states: dict[str, Any] = request.session.get("oidc_states") or {}
        state = request.GET.get("state", "")
        entry = states.pop(state, None) if state else None
        if entry is not None:
            request.session["oidc_states"] = states
            request.session.save()  # used once, even if what follows fails
        error = request.GET.get("error")
        if error:
            code = error if error in PROVIDER_ERRORS else "provider_error"
            return refused(request, code, f"the provider answered {error[:64]!r}")
        if not state:
            return refused(request, "state_missing", "the callback carries no state")
        if entry is None:
            return refused(
                request,
                "state_mismatch",
                "the state is not one this browser's session is waiting for (replayed, or another browser's)",
            )
        if time.time() - float(entry.get("added_on", 0)) > STATE_MAX_AGE_S:
            return refused(request, "state_mismatch", f"the sign-in started more than {STATE_MAX_AGE_S} s ago")
        code = request.GET.get("code", "")
        if not code:
            return refused(request, "provider_error", "the callback carries no code")
        try:
            signed_in = OidcBackend().sign_in(
                code=code, nonce=entry.get("nonce") or "", code_verifier=entry.get("code_verifier") or ""
            )
        except OidcError as exc:
            return refused(request, exc.code, exc.detail)
        session_start(request, signed_in)
        log.info("OIDC sign-in of %s from %s", signed_in.user.get_username(), client_address(request))
        return HttpResponseRedirect(_next(request))


def _next(request: HttpRequest) -> str:
    target = request.session.pop("oidc_login_next", None) or "/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts=None) or not target.startswith("/"):
        return "/"
    return str(target)


class BreakGlassView(View):
    """GET ?token=: the single-use sign-in link `manage.py breakglass` printed (accounts/breakglass.py)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            user = breakglass.link_use(request.GET.get("token", ""))
        except breakglass.LinkRefused as exc:
            log.warning("break-glass sign-in refused from %s: %s", client_address(request), exc)
            return HttpResponseRedirect("/login?" + urlencode({"error": "breakglass_invalid"}))
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        log.warning("break-glass sign-in of %s from %s", user.get_username(), client_address(request))
        return HttpResponseRedirect("/")

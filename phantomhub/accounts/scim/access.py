"""Who may call /scim/v2/, and how much they may send (docs/identity.md "SCIM provisioning").

Only a SCIM token (`ApiToken.kind == "scim"`, made by an organization admin) gets through. SCIM
is machine to machine: a signed-in session, even an organization admin's, is refused (403), as is
every other kind of token; no credentials is a 401. The token is looked up in the database at
every request, not through the per-process token cache, so revoking it stops the identity
provider at once. And the other way round: the API refuses a SCIM token everywhere else
(accounts/auth.py).

A body is bounded before anything reads it: its declared length above SCIM_MAX_BODY_BYTES is a
413, and Django reads no more than the declared length (WSGIRequest's LimitedStream), so nothing
past the bound is ever read. Compressed bodies are refused (415): identity providers send none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from phantomhub.accounts.auth import token_touch
from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.accounts.scim.errors import error_response, refusal
from phantomhub.accounts.services import TOKEN_PREFIX, token_digest
from phantomhub.accounts.token_life import token_refusal

WWW_AUTHENTICATE = 'Bearer realm="PhantomHub SCIM"'
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _unauthenticated(detail: str) -> HttpResponse:
    return error_response(refusal(401, detail), headers={"WWW-Authenticate": WWW_AUTHENTICATE})


def scim_token(request: HttpRequest) -> ApiToken | HttpResponse:
    """The request's SCIM token, or the refusal to answer."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            detail = "SCIM is for the identity provider: send a SCIM token (Authorization: Bearer), not a signed-in session"
            return error_response(refusal(403, detail))
        return _unauthenticated("a SCIM token is required (Authorization: Bearer phk_...)")
    parts = header.split()
    if len(parts) != 2 or parts[0] != "Bearer" or not parts[1].startswith(TOKEN_PREFIX):
        return _unauthenticated("Authorization must be 'Bearer phk_...'")
    token = ApiToken.objects.filter(digest=token_digest(parts[1])).first()
    if token is None:
        return _unauthenticated("unknown token")
    refused = token_refusal(token, timezone.now())  # revoked, expired, or rotated past its overlap
    if refused is not None:
        return _unauthenticated(refused)
    if token.kind != TokenKind.SCIM:
        return error_response(refusal(403, f"a {token.kind} token does not reach /scim/v2/: only a SCIM token does"))
    return token


def body_refusal(request: HttpRequest) -> HttpResponse | None:
    """413 for a body declared over SCIM_MAX_BODY_BYTES, 415 for a compressed one, before a byte is read."""
    if request.method not in BODY_METHODS:
        return None
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding not in ("", "identity"):
        return error_response(refusal(415, f"Content-Encoding {encoding!r} is not supported: send the body uncompressed"))
    limit = settings.SCIM_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return error_response(refusal(400, "Content-Length: not a number"))
    if declared > limit:
        return error_response(refusal(413, f"request body: over the limit of {limit} bytes"))
    return None


class ScimAccess:
    """Wraps a SCIM view's dispatch (django-scim2's AUTH_CHECK_MIDDLEWARE hook, and our views'
    own dispatch): the refusals above, else the view with `request.scim_token` set."""

    def __init__(self, get_response: Callable[..., HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        token = scim_token(request)
        if isinstance(token, HttpResponse):
            return token
        too_large = body_refusal(request)
        if too_large is not None:
            return too_large
        token_touch(token, request)
        request.scim_token = token  # type: ignore[attr-defined]
        return self.get_response(request, *args, **kwargs)

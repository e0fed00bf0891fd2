"""Single sign-on: mozilla-django-oidc's backend, with its HTTP through egress, every ID token
checked in full, and the person found by their provider identity (docs/identity.md).

The library's backend finds people by e-mail and checks only signature and nonce; PhantomHub's
finds them by (issuer, subject), never takes over a local account of the same name, checks the
issuer, audience and times as well (accounts/oidc_tokens.py), replaces the person's directory
groups with the groups claim and re-syncs their access (accounts/directory.py `user_sync`).

Sign-in goes through `OidcBackend.sign_in`, called by the callback view with the state's nonce
and PKCE verifier; `authenticate` answers None to everything, so a password sign-in (or a
request carrying a stray `code`) never reaches this backend.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from phantomhub import egress
from phantomhub.accounts.directory import user_sync
from phantomhub.accounts.models import DirectoryAccount, DirectoryGroup
from phantomhub.accounts.oidc_provider import (
    MAX_DOCUMENT_BYTES,
    OidcError,
    fetch_json,
    issuer_host,
    provider,
    reply_json,
    signing_keys,
)
from phantomhub.accounts.oidc_tokens import UnknownKey, id_token_verify

log = logging.getLogger(__name__)

BACKEND = "phantomhub.accounts.oidc.OidcBackend"
MAX_GROUPS = 1000
_USERNAME_BAD = re.compile(r"[^\w.@+-]")


@dataclass(frozen=True)
class SignedIn:
    """What a sign-in or a refresh leaves for the session."""

    user: Any
    subject: str
    id_token: str
    refresh_token: str | None


def redirect_uri() -> str:
    """Where the provider sends the browser back: PHANTOMHUB_PUBLIC_URL's callback (registered at
    the provider exactly so), not the request's Host."""
    return settings.PUBLIC_URL.rstrip("/") + reverse("oidc-callback")


class OidcBackend(OIDCAuthenticationBackend):
    """The library's backend with PhantomHub's endpoints, HTTP, checks and people (module docstring).
    Listed in AUTHENTICATION_BACKENDS so that a single sign-on session's person is loaded by it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library reads fixed endpoint settings here; ours come from discovery at sign-in.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET

    def authenticate(self, request: Any, **credentials: Any) -> None:
        return None  # sign-in is `sign_in`, from the callback view only (module docstring)

    def get_user(self, user_id: Any) -> Any:
        """The session's person, while they may sign in: a person deactivated (SCIM, the admin)
        is signed out at their next request."""
        user = self.UserModel.objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None

    # --- the provider's HTTP, through egress -------------------------------------------------

    def get_token(self, payload: dict[str, str]) -> dict[str, Any]:
        """The token endpoint's answer (client_secret_post), or OidcError with the provider's error."""
        fields = {**payload, "client_id": self.OIDC_RP_CLIENT_ID, "client_secret": self.OIDC_RP_CLIENT_SECRET}
        reply = egress.post_form(
            provider().token_endpoint, fields, headers={"Accept": "application/json"}, timeout_s=settings.OIDC_TIMEOUT_S,
            max_bytes=MAX_DOCUMENT_BYTES, trusted_hosts=[issuer_host()],
        )  # fmt: skip
        data = reply_json(reply, what="token endpoint")
        if not isinstance(data, dict):
            raise OidcError("provider_error", "token endpoint: not a JSON object")
        if reply.status_code != 200 or "error" in data:
            error = egress.text_clean(data.get("error", ""), max_chars=64)
            description = egress.text_clean(data.get("error_description", ""), max_chars=200)
            raise OidcError("token_refused", f"token endpoint: HTTP {reply.status_code} {error} {description}".strip())
        return data

    def verify_token(self, token: Any, **kwargs: Any) -> dict[str, Any]:
        """Every check of accounts/oidc_tokens.py; the keys fetched again once if the token
        names one the cached set lacks."""
        if not isinstance(token, str) or not token:
            raise OidcError("provider_error", "the token answer has no id_token")
        nonce = kwargs.get("nonce")

        def check(keys: list[dict[str, Any]]) -> dict[str, Any]:
            issuer, client_id = str(settings.OIDC_ISSUER), self.OIDC_RP_CLIENT_ID
            return id_token_verify(token, keys=keys, issuer=issuer, client_id=client_id, nonce=nonce, now=time.time())

        try:
            return check(signing_keys())
        except UnknownKey:
            try:
                return check(signing_keys(refetch=True))
            except UnknownKey as exc:
                raise OidcError(
                    "bad_signature", f"the ID token is signed with a key the provider does not publish ({exc})"
                ) from None

    def get_userinfo(self, access_token: Any, id_token: Any, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims with the user info endpoint's added (where the groups often are);
        user info about another subject is refused (OpenID Connect Core 1.0, section 5.3.2)."""
        endpoint = provider().userinfo_endpoint
        if endpoint is None or not access_token:
            return dict(payload)
        info = fetch_json(endpoint, what="user info", headers={"Authorization": f"Bearer {access_token}"})
        if not isinstance(info, dict) or "error" in info:
            raise OidcError("provider_error", "user info: refused or not a JSON object")
        if info.get("sub") != payload["sub"]:
            raise OidcError("claims_missing", "user info is about another subject than the ID token")
        protected = {"iss", "aud", "azp", "exp", "iat", "nbf", "nonce", "sub"}
        return {**payload, **{k: v for k, v in info.items() if k not in protected}}

    # --- the person -------------------------------------------------------------------------

    def sign_in(self, *, code: str, nonce: str, code_verifier: str) -> SignedIn:
        """The authorization code exchanged (with the PKCE verifier), the ID token checked against
        this sign-in's nonce, and the person found or created with their groups re-synced."""
        if not nonce:
            raise OidcError("nonce_mismatch", "this sign-in has no nonce")
        answer = self.get_token(
            {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri(), "code_verifier": code_verifier}
        )
        id_token = answer.get("id_token")
        claims = self.get_userinfo(answer.get("access_token"), id_token, self.verify_token(id_token, nonce=nonce))
        user = self.get_or_create_user(claims)
        refresh = answer.get("refresh_token")
        return SignedIn(user, claims["sub"], str(id_token), refresh if isinstance(refresh, str) else None)

    def refresh(self, *, refresh_token: str, subject: str) -> SignedIn:
        """The refresh-token grant: fresh claims for the same subject, groups re-synced."""
        answer = self.get_token({"grant_type": "refresh_token", "refresh_token": refresh_token})
        id_token = answer.get("id_token")
        claims = self.verify_token(id_token) if id_token else {"sub": subject}
        if claims["sub"] != subject:
            raise OidcError("claims_missing", "the refreshed ID token is about another subject")
        access = answer.get("access_token")
        if not id_token and not (access and provider().userinfo_endpoint):
            raise OidcError("session_ended", "the refresh answer carries neither an ID token nor an access token for user info")
        claims = self.get_userinfo(access, id_token, claims)
        user = self.get_or_create_user(claims)
        rotated = answer.get("refresh_token")
        return SignedIn(user, subject, str(id_token or ""), rotated if isinstance(rotated, str) else refresh_token)

    def get_or_create_user(self, *args: Any) -> Any:  # the library's signature: (access, id_token, payload)
        claims: dict[str, Any] = args[-1]
        for attempt in range(2):
            try:
                return self._user_apply(claims)
            except IntegrityError:  # another sign-in of the same new person committed first
                if attempt:
                    raise
        raise AssertionError("unreachable")

    @transaction.atomic
    def _user_apply(self, claims: dict[str, Any]) -> Any:
        issuer, subject = str(settings.OIDC_ISSUER), claims["sub"]
        account = DirectoryAccount.objects.select_related("user").filter(oidc_issuer=issuer, oidc_subject=subject).first()
        wanted = _claim_str(claims, settings.OIDC_USERNAME_CLAIM)
        if account is None and wanted:
            # Provisioned by SCIM before their first sign-in: the same provider names them alike.
            account = DirectoryAccount.objects.select_related("user").filter(oidc_subject="", user__username=wanted).first()
            if account is not None:
                account.oidc_issuer, account.oidc_subject = issuer, subject
                account.save(update_fields=["oidc_issuer", "oidc_subject"])
        if account is None:
            user = self.create_user(claims)
            account = DirectoryAccount.objects.create(user=user, oidc_issuer=issuer, oidc_subject=subject)
        user = account.user
        if not user.is_active:
            raise OidcError("account_inactive", f"{user.username} is deactivated")
        self.update_user(user, claims)
        groups_replace(user, _groups(claims))
        user_sync(user)
        return user

    def create_user(self, claims: dict[str, Any]) -> Any:
        """A new person; the username is the claim's, made unique (`ann-2`) when a local account
        already has it: a provider's `ann` never signs in as the local `ann`."""
        base = _username(claims)
        username, n = base, 1
        while self.UserModel.objects.filter(username__iexact=username).exists():
            n += 1
            username = f"{base[: 150 - len(str(n)) - 1]}-{n}"
        if username != base:
            log.info("OIDC: the username %r is taken; the new person is %r", base, username)
        user = self.UserModel.objects.create_user(username, email=_claim_str(claims, settings.OIDC_EMAIL_CLAIM)[:254])
        user.set_unusable_password()
        user.save(update_fields=["password"])
        return user

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        email = _claim_str(claims, settings.OIDC_EMAIL_CLAIM)[:254]
        if email and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        return user


def _claim_str(claims: dict[str, Any], name: str) -> str:
    value = claims.get(name)
    return value.strip() if isinstance(value, str) else ""


def _username(claims: dict[str, Any]) -> str:
    """The username claim (else the e-mail, else the subject) in the characters Django allows."""
    raw = _claim_str(claims, settings.OIDC_USERNAME_CLAIM) or _claim_str(claims, settings.OIDC_EMAIL_CLAIM) or claims["sub"]
    return _USERNAME_BAD.sub("_", raw)[:150] or "user"


def _groups(claims: dict[str, Any]) -> list[str]:
    """The groups claim as names (a missing claim is no groups: access follows what the provider
    says now); names longer than a group's column or past MAX_GROUPS are left out, and logged."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM, [])
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    names = sorted({g.strip() for g in items if isinstance(g, str) and 0 < len(g.strip()) <= 255})
    if len(names) > MAX_GROUPS or len(names) < len(items):
        log.warning(
            "OIDC: %s groups claim entries left out (not names, too long or past %s)",
            len(items) - min(len(names), MAX_GROUPS),
            MAX_GROUPS,
        )
    return names[:MAX_GROUPS]


def groups_replace(user: Any, names: Iterable[str]) -> None:
    """The person's directory groups become exactly `names` (groups created as needed)."""
    wanted = set(names)
    existing = {g.display_name: g for g in DirectoryGroup.objects.filter(display_name__in=wanted)}
    for name in sorted(wanted - existing.keys()):
        existing[name], _ = DirectoryGroup.objects.get_or_create(display_name=name)
    user.directory_groups.set(existing.values())

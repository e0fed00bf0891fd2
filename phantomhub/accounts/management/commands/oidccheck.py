"""`manage.py oidccheck`: fetch the configured provider's discovery document and signing keys the
way a sign-in does (through the egress policy) and say what was found, or why it failed: for
setting up single sign-on, or a start-up check in a deployment (docs/identity.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from phantomhub.accounts.oidc_provider import OidcError, provider, signing_keys


class Command(BaseCommand):
    help = "Check that the single sign-on provider answers: its discovery document and signing keys."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.OIDC_ISSUER:
            raise CommandError("single sign-on is off: PHANTOMHUB_OIDC_ISSUER is not set")
        try:
            found = provider()
            keys = signing_keys()
        except OidcError as exc:
            raise CommandError(f"{settings.OIDC_ISSUER}: {exc.detail}") from None
        self.stdout.write(f"issuer                {found.issuer}")
        self.stdout.write(f"authorization         {found.authorization_endpoint}")
        self.stdout.write(f"token                 {found.token_endpoint}")
        self.stdout.write(f"user info             {found.userinfo_endpoint or '(none: claims from the ID token only)'}")
        end = found.end_session_endpoint or "(none: sign-out ends only PhantomHub's session)"
        self.stdout.write(f"end session           {end}")
        self.stdout.write(f"signing keys          {len(keys)} ({', '.join(str(k.get('kid', '?')) for k in keys)})")
        self.stdout.write(f"redirect URI to register: {settings.PUBLIC_URL.rstrip('/')}/api/v1/auth/oidc/callback")

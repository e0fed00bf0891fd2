"""`manage.py scimtoken [--name N]`: print a new SCIM token (the identity provider's), alone, on
stdout, and the SCIM base URL to give the identity provider on stderr (docs/identity.md, "SCIM
provisioning"). Revoke one with `manage.py revoketoken PREFIX`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from phantomhub.accounts.services import scim_token_create


class Command(BaseCommand):
    help = "Create a SCIM token for the identity provider's provisioning and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="identity provider", help="a label for the token")

    def handle(self, *args: Any, **options: Any) -> None:
        issued = scim_token_create(name=options["name"])
        base = settings.PUBLIC_URL.rstrip("/") + "/scim/v2"
        self.stderr.write(f"SCIM token {issued.token.prefix}… for {base}; it is shown only once")
        self.stdout.write(issued.raw)

"""`manage.py revoketoken PREFIX`: revoke the token whose visible prefix is given."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.accounts.models import ApiToken
from phantomhub.accounts.services import token_revoke


class Command(BaseCommand):
    help = "Revoke an API token by its visible prefix (phk_xxxxxxxx)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, **options: Any) -> None:
        tokens = list(ApiToken.objects.filter(prefix=options["prefix"], revoked_at__isnull=True))
        if not tokens:
            raise CommandError(f"no active token with prefix {options['prefix']!r}")
        if len(tokens) > 1:
            raise CommandError("several tokens share that prefix; revoke them in the admin")
        token_revoke(token=tokens[0])
        self.stdout.write(f"revoked {tokens[0].prefix}…")

"""`manage.py breakglass USERNAME`: a single-use sign-in link for an organization admin, for when
single sign-on is the only way in and cannot be used (accounts/breakglass.py, docs/identity.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.accounts.breakglass import LINK_MAX_AGE_S, LinkRefused, link_create


class Command(BaseCommand):
    help = f"Print a sign-in link for an organization admin, valid {LINK_MAX_AGE_S // 60} minutes and once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            link = link_create(options["username"])
        except LinkRefused as exc:
            raise CommandError(f"refused: {exc}") from None
        self.stdout.write(link)

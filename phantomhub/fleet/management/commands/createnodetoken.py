"""`manage.py createnodetoken --hostname H [--hostname 'gpu-a-*' ...] [--name N]`: print a new node
token (the node collector's), alone, on stdout. It reports only for the hostnames it names, exact
or globs (docs/fleet.md, "Trust")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.accounts.services import token_expiry
from phantomhub.fleet.services import node_token_create


class Command(BaseCommand):
    help = "Create a node token for the node collector and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--hostname",
            action="append",
            default=[],
            help="a hostname the token reports for, exact or a glob like 'gpu-a-*' (repeatable; required)",
        )
        parser.add_argument("--name", default="", help="a label for the token")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            node = node_token_create(name=options["name"], hostnames=options["hostname"], expires_at=token_expiry())
        except ValueError as exc:
            raise CommandError(f"--hostname: {exc}") from None
        self.stderr.write(f"node token {node.token.prefix}… for {', '.join(node.token.hostnames)}; it is shown only once")
        self.stdout.write(node.raw)

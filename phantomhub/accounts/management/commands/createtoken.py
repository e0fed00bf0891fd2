"""`manage.py createtoken --team T --project P`: print a new project token, alone, on stdout.
`manage.py createtoken --node --hostname H [--hostname 'gpu-a-*' ...] --name N`: a node token
instead (the node collector's), which reports only for the hostnames it names (exact or globs)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from phantomhub.accounts.services import project_token_for_slugs


class Command(BaseCommand):
    help = "Create a project API token (creating the team and project if missing) and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", help="team slug")
        parser.add_argument("--project", help="project slug")
        parser.add_argument("--node", action="store_true", help="a node token (only sends node telemetry for its hostnames)")
        parser.add_argument(
            "--hostname",
            action="append",
            default=[],
            help="with --node: a hostname the token reports for, exact or a glob like 'gpu-a-*' (repeatable; required)",
        )
        parser.add_argument("--name", default="", help="a label for the token")

    def handle(self, *args: Any, **options: Any) -> None:
        team, project = options["team"], options["project"]
        if options["node"]:
            if team or project:
                raise CommandError("a node token belongs to no team or project: drop --team and --project")
            from phantomhub.fleet.services import node_token_create

            try:
                node = node_token_create(name=options["name"], hostnames=options["hostname"])
            except ValueError as exc:
                raise CommandError(f"--hostname: {exc}") from None
            self.stderr.write(f"node token {node.token.prefix}… for {', '.join(node.token.hostnames)}; it is shown only once")
            self.stdout.write(node.raw)
            return
        if options["hostname"]:
            raise CommandError("--hostname names a node token's nodes: add --node")
        if not team or not project:
            raise CommandError("--team and --project are required (or --node for a node token)")
        for flag, value in (("--team", team), ("--project", project)):
            if slugify(value) != value:
                raise CommandError(f"{flag} {value!r} is not a slug (lowercase letters, digits, '-', '_')")
        try:
            issued = project_token_for_slugs(team_slug=team, project_slug=project, name=options["name"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"token {issued.token.prefix}… for {team}/{project}; it is shown only once")
        self.stdout.write(issued.raw)

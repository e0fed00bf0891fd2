"""`manage.py createtoken --team T --project P`: print a new project token, alone, on stdout.
A node collector's token is made by `manage.py createnodetoken` (the fleet app's)."""

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
        parser.add_argument("--name", default="", help="a label for the token")

    def handle(self, *args: Any, **options: Any) -> None:
        team, project = options["team"], options["project"]
        if not team or not project:
            raise CommandError("--team and --project are required (a node token: manage.py createnodetoken)")
        for flag, value in (("--team", team), ("--project", project)):
            if slugify(value) != value:
                raise CommandError(f"{flag} {value!r} is not a slug (lowercase letters, digits, '-', '_')")
        try:
            issued = project_token_for_slugs(team_slug=team, project_slug=project, name=options["name"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"token {issued.token.prefix}… for {team}/{project}; it is shown only once")
        self.stdout.write(issued.raw)

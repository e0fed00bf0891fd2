"""`manage.py importfocus FILE`: import a FinOps FOCUS CSV invoice (all or nothing, idempotent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.fleet.focus import focus_import


class Command(BaseCommand):
    help = "Import a FOCUS CSV invoice; GPU lines are matched to nodes by resource id or tag."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the FOCUS CSV file")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: {exc}") from None
        result = focus_import(text=text, filename=path.name)
        if result.errors:
            more = result.error_count - len(result.errors)
            raise CommandError("nothing imported:\n" + "\n".join(result.errors) + (f"\n… and {more:,} more" if more else ""))
        if result.duplicate_file:
            self.stdout.write(f"{path.name}: already imported; nothing changed")
            return
        self.stdout.write(
            f"{path.name}: {result.lines} lines, {result.lines_new} new, {result.matched} matched to nodes, "
            f"{result.billed_usd} billed in the new lines"
        )

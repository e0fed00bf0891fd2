"""`manage.py exportprices [FILE]`: the price book as CSV (stdout when no file is given)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from phantomhub.pricing.services import prices_export_csv


class Command(BaseCommand):
    help = "Export the price book as CSV."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?")

    def handle(self, *args: Any, **options: Any) -> None:
        text = prices_export_csv()
        if options["file"]:
            Path(options["file"]).write_text(text)
            self.stderr.write(f"wrote {options['file']}")
        else:
            self.stdout.write(text, ending="")

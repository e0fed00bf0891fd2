"""`manage.py importprices FILE`: add prices from CSV (all rows, or none when any row is bad)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.pricing.services import CSV_FIELDS, prices_import_csv


class Command(BaseCommand):
    help = f"Import prices from a CSV with the columns {', '.join(CSV_FIELDS)} (gpu and usd_per_gpu_hour required)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        result = prices_import_csv(text=path.read_text(encoding="utf-8-sig"), actor_label="cli import")
        if result.errors:
            raise CommandError("nothing imported:\n  " + "\n  ".join(result.errors))
        self.stdout.write(f"imported {result.created} price(s)")

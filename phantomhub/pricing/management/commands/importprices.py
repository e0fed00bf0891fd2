"""`manage.py importprices FILE`: add prices from CSV (all rows, or none when any row is bad)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.pricing.services import CSV_FIELDS, prices_import_csv, prices_import_reach


class Command(BaseCommand):
    help = f"Import prices from a CSV with the columns {', '.join(CSV_FIELDS)} (gpu and usd_per_gpu_hour required)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument(
            "--confirm-closed", action="store_true", help="go ahead although a price reaches into a closed finance month"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        text = path.read_text(encoding="utf-8-sig")
        closed = prices_import_reach(text=text)
        if closed and not options["confirm_closed"]:
            raise CommandError(
                f"nothing imported: the prices reach into closed month(s) {', '.join(closed)}; their closed figures stay, "
                "and finance shows the difference as an adjustment. Add --confirm-closed to go ahead"
            )
        result = prices_import_csv(text=text, actor_label="cli import")
        if result.errors:
            raise CommandError("nothing imported:\n  " + "\n  ".join(result.errors))
        self.stdout.write(f"imported {result.created} price(s)")

"""`manage.py retention [--dry-run]`: one storage maintenance pass, step by step (retention.py):
weekly partitions made ahead, finished runs archived to Parquet, expired raw rows retired. The
same pass Celery beat and the embedded sweeper run every PHANTOMHUB_STORAGE_INTERVAL_S."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from phantomhub.telemetry.retention import storage_maintain


class Command(BaseCommand):
    help = "Archive finished runs and retire expired raw telemetry (--dry-run: only say what would be done)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="change nothing; list what would be archived, dropped, deleted"
        )
        parser.add_argument("--json", action="store_true", help="print the result as JSON at the end")

    def handle(self, *args: Any, **options: Any) -> None:
        result = storage_maintain(dry_run=options["dry_run"], progress=self.stdout.write)
        summary = result.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            counts = {k: (len(v) if isinstance(v, list) else v) for k, v in summary.items() if not isinstance(v, bool)}
            self.stdout.write(("dry run: " if result.dry_run else "") + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if result.archive_failed or result.prune_failed:
            self.stderr.write(f"{result.archive_failed} archive and {result.prune_failed} prune failures (see the log)")

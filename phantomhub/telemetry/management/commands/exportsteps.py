"""`manage.py exportsteps <run-id> -o steps.parquet`: a run's raw steps as one Parquet file, from
PostgreSQL or the archive, the same file GET /api/v1/runs/{id}/steps.parquet answers."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from phantomhub.telemetry.exports import steps_parquet_write
from phantomhub.telemetry.models import Run


class Command(BaseCommand):
    help = "Export a run's raw steps to a Parquet file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run's id")
        parser.add_argument("-o", "--output", required=True, help="the Parquet file to write")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_id = uuid.UUID(options["run_id"])
        except ValueError as exc:
            raise CommandError(f"run_id: {options['run_id']!r} is not a UUID") from exc
        run = Run.objects.select_related("project").filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"run_id: no run {run_id}")
        size = steps_parquet_write(run, options["output"])
        self.stdout.write(f"wrote {options['output']}: {size:,} bytes")

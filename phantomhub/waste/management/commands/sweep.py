"""`manage.py sweep`: analyse every dirty run now and rebuild pending rollups (what beat does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from phantomhub.waste.sweeps import analysis_sweep


class Command(BaseCommand):
    help = "Mark silent runs crashed, analyse dirty runs in this process, rebuild pending daily rollups."

    def handle(self, *args: Any, **options: Any) -> None:
        total = 0
        while True:  # runs_dirty() hands out a bounded page; loop until nothing is left
            result = analysis_sweep(inline=True)
            total += result.analysed
            if result.analysed == 0:
                break
            self.stderr.write(f"analysed {total} run(s)…")
        self.stdout.write(f"analysed {total} run(s); rollups current")

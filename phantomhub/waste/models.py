"""Derived tables written by analysis: per-run analyses, per-run-per-day costs, daily rollups.

Pages and leaderboards read these, never raw steps. Everything here can be recomputed from raw
telemetry and the price book; analysis overwrites it idempotently.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from phantomhub.accounts.models import Project, Team
from phantomhub.telemetry.models import Run


class FastJSONField(models.JSONField):
    """JSONField written with orjson on PostgreSQL: a 1,024-rank run's result is ~1 MB of JSON,
    rewritten by every analysis, and the standard library's encoder was a good part of that cost.
    Reads, lookups and the schema are JSONField's (``deconstruct`` names it so: no migration).
    Other databases (SQLite) get JSONField's text; tests/test_sql_pairs.py holds the two encoders
    to the same jsonb on PostgreSQL."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor == "postgresql" and value is not None and not prepared and not hasattr(value, "as_sql"):
            from psycopg.types.json import Jsonb

            return Jsonb(self.get_prep_value(value), dumps=_orjson_dumps)
        return super().get_db_prep_value(value, connection, prepared)

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


def _orjson_dumps(value: Any) -> bytes:
    # Non-string keys become strings, as the standard library's encoder makes them.
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def money() -> models.DecimalField[Decimal, Decimal]:
    """US dollars to the cent."""
    return models.DecimalField(default=Decimal(0), max_digits=16, decimal_places=2)


class OrgSettings(models.Model):
    """Organization-wide defaults of the waste model (one row, pk=1)."""

    target_mfu = models.FloatField(
        default=settings.TARGET_MFU_DEFAULT, validators=[MinValueValidator(0.01), MaxValueValidator(1.0)]
    )
    # Overrides of the default recoverability factors, {category: 0..1}; missing ones use defaults.
    recoverability = models.JSONField(default=dict, blank=True)
    # A running run with no sign of life for this long is marked crashed and stops accruing cost.
    crash_after_s = models.PositiveIntegerField(default=900)
    # A busy run is analysed at most once per this many seconds. 30: agents report every 10 s, so
    # a run is analysed within ~40 s of its telemetry, and analysis costs ~12 ms of worker CPU per
    # GPU-minute instead of ~70 at 5 s (bench/fleet.py; docs/performance.md, "Fleet").
    analysis_debounce_s = models.PositiveIntegerField(default=30)
    # A privacy setting: the "people" leaderboard (runs' dollars summed per launched_by) is shown
    # only when an org admin turns it on (docs/ui.md, "Privacy"). Off, runs still show who
    # launched them to those who may see the runs.
    people_leaderboard = models.BooleanField(default=False)

    def __str__(self) -> str:
        return "organization settings"

    @classmethod
    def get(cls) -> OrgSettings:
        settings_row, _ = cls.objects.get_or_create(pk=1)
        return settings_row


class ProjectSettings(models.Model):
    """Per-project overrides of OrgSettings (None / empty: use the organization's)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, primary_key=True, related_name="waste_settings")
    recoverability = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"waste settings of {self.project}"


class RunAnalysis(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="analysis")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    analysed_seq = models.BigIntegerField(default=-1)  # Run.ingest_seq this analysis has seen
    analysed_at = models.DateTimeField(null=True)
    complete = models.BooleanField(default=False)  # run ended and everything it sent is analysed
    # Denormalised headline figures, for sorting and leaderboards without reading `result`.
    started_at = models.DateTimeField(null=True)
    gpu_key = models.CharField(max_length=128, blank=True)
    gpu_hours = models.FloatField(default=0)
    cost_usd = money()
    waste_usd = money()
    recoverable_usd = money()
    waste_share = models.FloatField(default=0)
    mfu = models.FloatField(null=True)
    # The full analysis (categories, ranks, stragglers, series, diagnostics, explain) and its rules.
    result = FastJSONField(default=dict)
    # The per-rank figures (a JSON list, what the API serves as the analysis's `ranks`), apart
    # from `result`: three quarters of a 1,024-rank run's result, and PostgreSQL's jsonb parse of
    # it was most of the pass's write (bench/pg_result_write.py). Bytes, written as serialized;
    # None for an analysis stored before this column (its `result` holds them: rank_figures_of).
    rank_figures = models.BinaryField(null=True)
    recommendations = FastJSONField(default=list)
    # Step signature and per-step figures (waste/evidence.py RunProfile): what later runs of the
    # project compare themselves with. None until the run has step rows.
    profile = FastJSONField(null=True, blank=True)
    # A job's lost work in this attempt (docs/waste-model.md, "Jobs"), small so a job's page reads
    # it for every attempt without `result`: {"usd", "gpu_seconds", "causes": {cause: {"usd",
    # "gpu_seconds"}}, "restart_sides": {"before" | "after": {"usd", "gpu_seconds"}}} for the causes
    # rework, restart and checkpoint (services.lost_json). None before model version 4.
    lost = FastJSONField(null=True, blank=True)
    # No longer written: the incremental state lives in RunAnalysisState (migration 0009 empties
    # these). Kept so that readers deferring them keep working.
    state = models.BinaryField(null=True)
    rank_rows = models.JSONField(default=dict)
    rank_last_step = models.JSONField(default=dict)
    # A failed analysis: the error, how often it failed at this run's ingest_seq, when to retry.
    # Failures back off and stop after MAX_ANALYSIS_FAILURES until new telemetry arrives; they
    # never hold up other runs (waste/services.py run_analyze_isolated).
    error = models.TextField(blank=True)
    failures = models.PositiveIntegerField(default=0)
    failed_seq = models.BigIntegerField(default=-1)
    retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["-recoverable_usd"], name="analysis_recoverable"),
            models.Index(fields=["project", "-started_at"], name="analysis_project_started"),
        ]

    def __str__(self) -> str:
        return f"analysis of {self.run_id}"


class RunAnalysisState(models.Model):
    """A run's incremental analysis state (waste/state.py), kept apart from RunAnalysis: reading an
    analysis never loads it, and an incremental pass rewrites only the parts that changed (the
    per-rank arrays only when steps arrived, the chart windows only when they moved)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="analysis_state")
    header = models.BinaryField()  # orjson: run-wide scalars, per-host sample sums, bookkeeping
    ranks = models.BinaryField()  # packed arrays: one row per rank, straggler tails, piece sums
    windows = models.BinaryField()  # packed arrays: the chart windows' sums

    def __str__(self) -> str:
        return f"analysis state of {self.run_id}"


class RunDay(models.Model):
    """A run's cost on one UTC day (a run spanning midnight has two rows)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="days")
    day = models.DateField()
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    gpu_key = models.CharField(max_length=128, blank=True)
    gpu_seconds = models.FloatField(default=0)
    cost_usd = money()
    categories_usd = models.JSONField(default=dict)
    waste_usd = money()  # every category but useful_compute: a column so SQL can sum it
    recoverable_usd = money()
    lost_usd = money()  # a job's lost work (rework, restart, checkpoint): part of idle
    price_entry_ids = models.JSONField(default=list)  # the price-book entries that priced this day
    # For GPU-hour-weighted MFU: sum of mfu × gpu_seconds over runs whose MFU is known.
    mfu_gpu_seconds = models.FloatField(default=0)
    mfu_known_gpu_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "day"], name="runday_run_day_unique")]
        indexes = [models.Index(fields=["day", "project"], name="runday_day_project")]

    def __str__(self) -> str:
        return f"{self.run_id} on {self.day}"


class ProjectDay(models.Model):
    """Rollup of RunDay per project and day: what leaderboards and finance read."""

    day = models.DateField()
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    runs = models.PositiveIntegerField(default=0)
    gpu_seconds = models.FloatField(default=0)
    cost_usd = money()
    categories_usd = models.JSONField(default=dict)
    waste_usd = money()
    recoverable_usd = money()
    lost_usd = money()
    mfu_gpu_seconds = models.FloatField(default=0)
    mfu_known_gpu_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "project"], name="projectday_day_project_unique")]

    def __str__(self) -> str:
        return f"{self.project_id} on {self.day}"


class RollupPending(models.Model):
    """Days whose ProjectDay rows must be rebuilt (marked by analysis, cleared by the sweep)."""

    day = models.DateField(primary_key=True)
    marked_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"rollup pending for {self.day}"

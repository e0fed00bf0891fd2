"""Runs and their raw telemetry: steps, system samples (packed a chunk per rank and batch), events.

Raw rows are append-only and unique by what identifies them on the wire: steps by
(run, rank, step), samples by (run, rank, device, t_ns), events by (run, event_id). Steps and
samples are stored as chunks (storage.py says how a replayed batch is recognised).
"""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from phantomhub.accounts.models import Project
from phantomhub.telemetry.partitions import week_now


class RunStatus(models.TextChoices):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CRASHED = "crashed"


class PricingTier(models.TextChoices):
    ON_DEMAND = "on_demand"
    RESERVED = "reserved"
    SPOT = "spot"


class EndCause(models.TextChoices):
    """How an attempt ended (docs/api.md, "Jobs and attempts"). Empty while it runs; a run the
    server marked crashed after silence, with no cause reported, reads as ``silent``."""

    FINISHED = "finished"
    OOM = "oom"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    EXCEPTION = "exception"
    SIGTERM = "sigterm"
    SIGKILL = "sigkill"
    SILENT = "silent"


class JobSource(models.TextChoices):
    EXPLICIT = "explicit"
    TORCHELASTIC = "torchelastic"
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


class Job(models.Model):
    """One training objective across attempts: the runs its launcher restarted (a crash, a
    preemption, a requeue), each resuming from the last checkpoint. Keyed by (project, key): the
    key is what the agent was told (``job=``) or read from the launcher (torchrun's rendezvous
    id, Slurm's job id, a Kubernetes Job's name). Attempts are the job's runs in the order they
    started (``Run.attempts_ordered``); the launcher's own count is kept on each run."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    key = models.CharField(max_length=200)
    source = models.CharField(max_length=16, choices=JobSource.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "key"], name="job_project_key_unique")]

    def __str__(self) -> str:
        return self.key


class Run(models.Model):
    """A training run. Its `id` is unique server-wide; `client_id` is the id its agent chose,
    unique within the project only: runs are keyed by (project, client id), so no project can
    take, probe or collide with an id another project's agents derive. The id is the client id
    when no other run has it, else a fresh UUID (docs/api.md, "Run ids")."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="runs")
    # Null for runs made outside the API (fixtures, benchmarks): the run answers to its id.
    client_id = models.UUIDField(null=True, blank=True)
    name = models.CharField(max_length=200, blank=True)
    tags = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    gpu_model = models.CharField(max_length=128, blank=True)
    gpu_count = models.PositiveIntegerField(default=1)
    world_size = models.PositiveIntegerField(default=1)
    nodes = models.PositiveIntegerField(default=1)
    provider = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=64, blank=True)
    pricing_tier = models.CharField(max_length=16, choices=PricingTier.choices, default=PricingTier.ON_DEMAND)
    dtype = models.CharField(max_length=16, blank=True)
    allocation_start = models.DateTimeField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField()
    config = models.JSONField(default=dict, blank=True)
    environment = models.JSONField(default=dict, blank=True)
    # Set by an admin when this run was billed at a negotiated rate: replaces the price book.
    price_override_usd_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    # Bumped by every batch that stored something: analysis compares it with the sequence it
    # last analysed to know whether the run is dirty.
    ingest_seq = models.BigIntegerField(default=0)
    # The week whose partition holds the run's raw rows on PostgreSQL (partitions.py): the week it
    # was registered in, never changed afterwards; 0 for runs stored before partitioning.
    storage_week = models.IntegerField(default=week_now, editable=False)
    # The job this run is an attempt of (null: a job of one), and the launcher's restart count
    # when it gave one. Attempts are ordered by start, not by this number (it may be missing or
    # out of order: the job page says so).
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="attempts")
    attempt = models.PositiveIntegerField(null=True, blank=True)
    # How the run ended, from its ranks' finish events (EndCause); end_detail is the exception's
    # type when the agent caught one.
    end_cause = models.CharField(max_length=24, choices=EndCause.choices, blank=True)
    end_detail = models.CharField(max_length=200, blank=True)
    # Who launched the run, as its agent read it (the Unix or Slurm user, a pod's owner label or
    # service account; blank: not said). A label for filters and the people board, not an account.
    launched_by = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "client_id"], name="run_project_client_unique")]
        indexes = [
            models.Index(fields=["project", "-started_at"], name="run_project_started"),
            models.Index(fields=["status", "last_seen_at"], name="run_status_seen"),
            models.Index(fields=["storage_week"], name="run_storage_week"),
            models.Index(fields=["job", "started_at"], name="run_job_started"),
            models.Index(fields=["launched_by"], name="run_launched_by"),
        ]

    def __str__(self) -> str:
        return f"{self.name or self.id}"


class RunRank(models.Model):
    """One rank (process) of a run: where it ran and the agent's latest drop counters."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="ranks")
    rank = models.IntegerField()
    host = models.CharField(max_length=255, blank=True)
    counters = models.JSONField(default=dict, blank=True)
    # Step rows stored for this rank, counted in the same transaction as the insert: analysis
    # compares it with the rows it has seen to know whether a late batch arrived out of order.
    step_rows = models.BigIntegerField(default=0)
    # The highest step number stored for this rank (null: none yet), kept by the same upsert: a
    # restarted agent continues its numbering after it instead of reusing stored step numbers.
    last_step = models.BigIntegerField(null=True, blank=True)
    # Step rows refused because their step number was already stored with another start (a
    # process that restarted its numbering): counted in the batch's transaction, never stored.
    reused_step_rows = models.BigIntegerField(default=0)
    # The largest sample time stored for this rank (null: none yet): with last_step, the mark a
    # batch must pass to be stored without looking at the stored chunks (storage.py).
    last_sample_ns = models.BigIntegerField(null=True, blank=True)
    # Chunk sequence numbers handed out so far (storage.ranks_lock): two a batch, one a kind.
    chunk_seq = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "rank"], name="runrank_run_rank_unique")]

    def __str__(self) -> str:
        return f"{self.run_id} rank {self.rank}"


class RunGpu(models.Model):
    """A GPU one rank of a run holds, as its agent reported at registration (`environment.gpus`):
    the node collector's samples of that GPU are the run's (phantomhub/fleet/runs.py), however
    the node reads it. `host` is the rank's host name, lower-cased and cut at the first dot, so a
    short and a full name match; `gpu_index` is the physical (NVML) index, null when unknown."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpus")
    rank = models.IntegerField()
    host = models.CharField(max_length=255, blank=True)
    gpu_index = models.IntegerField(null=True, blank=True)
    gpu_uuid = models.CharField(max_length=96, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["gpu_uuid"], name="rungpu_uuid"),
            models.Index(fields=["host", "gpu_index"], name="rungpu_host_index"),
        ]
        constraints = [models.UniqueConstraint(fields=["run", "rank", "gpu_index", "gpu_uuid"], name="rungpu_unique")]

    def __str__(self) -> str:
        return f"{self.run_id} rank {self.rank} GPU {self.gpu_uuid or self.gpu_index} on {self.host}"


class _Chunk(models.Model):
    """One rank's batch of raw rows, packed (storage.py): the key range it covers, its row count
    and every row as a fixed-width record. On PostgreSQL the table is partitioned by week on a
    column the model does not know, run_week (partitions.py)."""

    # No database constraint: ingest checks the run once per batch (migration 0008 says why).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+")
    rank = models.IntegerField()
    seq = models.BigIntegerField()  # the rank's chunks in the order they were stored (RunRank.chunk_seq)
    key_lo = models.BigIntegerField()  # smallest and largest step (samples: t_ns) in the chunk
    key_hi = models.BigIntegerField()
    n = models.IntegerField()
    payload = models.BinaryField()

    class Meta:
        abstract = True


class StepChunk(_Chunk):
    """Steps of one rank's batch: per step its timings (ns), FLOPs, tokens, samples and memory (bytes)."""

    pk = models.CompositePrimaryKey("run_id", "rank", "key_hi", "seq")

    def __str__(self) -> str:
        return f"{self.run_id} rank {self.rank} steps {self.key_lo}-{self.key_hi}"


class SampleChunk(_Chunk):
    """System samples of one rank's batch: about one a second per device (device -1: host-only)."""

    pk = models.CompositePrimaryKey("run_id", "rank", "key_hi", "seq")

    def __str__(self) -> str:
        return f"{self.run_id} rank {self.rank} samples {self.key_lo}-{self.key_hi}"


class EventKind(models.TextChoices):
    PHASE = "phase"
    FINISH = "finish"
    COUNTERS = "counters"
    OOM = "oom"
    LOG = "log"


class RunEvent(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    event_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    rank = models.IntegerField(default=0)
    t_ns = models.BigIntegerField()
    name = models.CharField(max_length=100, blank=True)
    t_start_ns = models.BigIntegerField(null=True)
    dur_ns = models.BigIntegerField(null=True)
    status = models.CharField(max_length=16, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "event_id"], name="runevent_run_event_unique")]
        indexes = [models.Index(fields=["run", "kind", "t_ns"], name="runevent_run_kind_t")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} of {self.run_id}"


class RunArchive(models.Model):
    """A run's raw rows written to Parquet (archive.py), and whether they have left PostgreSQL.

    The archive is current while `ingest_seq` equals the run's: a batch stored after archiving
    (a late spool, a reopened run) makes it stale, and the run is archived again before any of
    its rows may be pruned."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="archive")
    ingest_seq = models.BigIntegerField()
    step_rows = models.BigIntegerField()
    sample_rows = models.BigIntegerField()
    steps_bytes = models.BigIntegerField()
    samples_bytes = models.BigIntegerField()
    steps_path = models.CharField(max_length=1024)
    samples_path = models.CharField(max_length=1024)
    archived_at = models.DateTimeField()
    # Set once the run's raw rows are gone from PostgreSQL (partition dropped or rows deleted):
    # from then on the selectors read the archive.
    pruned_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"archive of {self.run_id}"


class ProjectRetention(models.Model):
    """A project's own retention of raw rows in PostgreSQL, over PHANTOMHUB_RAW_RETENTION_DAYS."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, primary_key=True, related_name="raw_retention")
    raw_retention_days = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(36_500)])

    def __str__(self) -> str:
        return f"{self.project_id}: {self.raw_retention_days} days"

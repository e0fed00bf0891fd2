"""The fleet: GPU nodes as the node collector sees them, every GPU-minute classified and priced.

Volume drives the shape. 10,000 GPUs sampled every 15 s are 57.6 M GPU samples a day, so a raw
GPU sample is one narrow row (smallint / real / bigint columns, its class and holder decided once at
ingest), kept for PHANTOMHUB_FLEET_RAW_DAYS and purged after; pages read `FleetDay` (one row per
node, day, class and holder) and `GpuState` (one row per GPU: what it is doing now), never raw rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from phantomhub.accounts.models import Project, Team


class GpuClass(models.IntegerChoices):
    INSTRUMENTED = 1, "instrumented"  # a PhantomHub run holds it: its own analysis prices it
    BUSY_UNINSTRUMENTED = 2, "busy_uninstrumented"  # a process computes, no agent sees it
    IDLE_HELD = 3, "idle_held"  # memory held, no compute
    EMPTY = 4, "empty"  # no process
    UNKNOWN = 9, "unknown"  # not reporting: a gap longer than twice the interval (shown, not priced)


CLASS_NAMES = {c.value: c.label for c in GpuClass}
PRICED_CLASSES = ("instrumented", "busy_uninstrumented", "idle_held", "empty")


class Node(models.Model):
    hostname = models.CharField(max_length=255, unique=True)
    provider = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=64, blank=True)
    instance_type = models.CharField(max_length=64, blank=True)
    resource_id = models.CharField(max_length=255, blank=True, db_index=True)
    gpu_model = models.CharField(max_length=128, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    collector_version = models.CharField(max_length=64, blank=True)
    source = models.CharField(max_length=8, blank=True)  # nvml | dcgm
    interval_s = models.PositiveIntegerField(default=15)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # The collector's latest sender counters (sent, spooled, dropped, ...): those of the request
    # with the latest samples (`counters_t_ns`), so a request replayed from the spool later never
    # replaces newer ones; `counters_at` is when the server received them.
    counters = models.JSONField(default=dict, blank=True)
    counters_t_ns = models.BigIntegerField(null=True, blank=True)
    counters_at = models.DateTimeField(null=True, blank=True)
    # The newest GPU sample time accepted: a sample older than this by more than
    # FLEET_REPLAY_WINDOW_S is refused (a spool replays within that window).
    last_t_ns = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname


class NodeSpec(models.Model):
    """What a node is (GPU model, provider, region) from `valid_from_ns` on. Appended when a
    request's new samples report a different spec, never rewritten: derivation prices each sample
    with the spec in force at its time, so a change never re-prices history already priced."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="specs")
    valid_from_ns = models.BigIntegerField()
    gpu_model = models.CharField(max_length=128, blank=True)
    provider = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=64, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "valid_from_ns"], name="nodespec_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} from {self.valid_from_ns}: {self.gpu_model} {self.provider} {self.region}"


class Owner(models.Model):
    """Who holds a process: a run, a Kubernetes pod, a Slurm job or a Unix user (deduplicated by
    `digest`, the SHA-256 of its canonical JSON)."""

    digest = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=8)  # run | k8s | slurm | user
    data = models.JSONField()
    # Attribution (rules, or the run's project); recomputed for every owner when rules change.
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # The node whose request created it: new owners per node and UTC day are bounded
    # (FLEET_MAX_NEW_OWNERS_PER_NODE_DAY).
    first_node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False)

    class Meta:
        indexes = [models.Index(fields=["first_node", "created_at"], name="owner_first_node_created")]

    def __str__(self) -> str:
        return f"{self.kind} {self.data}"


class GpuSample(models.Model):
    # No index of their own on the foreign keys: the unique constraint leads with the node, and
    # an owner is never deleted while samples name it. At 10,000 GPUs every 15 s, each index is
    # tens of bytes on 57.6 M rows a day.
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    gpu_index = models.SmallIntegerField()
    t_ns = models.BigIntegerField()
    interval_s = models.SmallIntegerField()
    util_pct = models.FloatField(null=True)
    mem_used_bytes = models.BigIntegerField(null=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    power_w = models.FloatField(null=True)
    sm_clock_mhz = models.FloatField(null=True)
    sm_active = models.FloatField(null=True)  # DCGM_FI_PROF_SM_ACTIVE (0-1), dcgm sources only
    cls = models.SmallIntegerField(choices=GpuClass.choices)
    holder = models.ForeignKey(Owner, null=True, on_delete=models.PROTECT, related_name="+", db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "gpu_index", "t_ns"], name="gpusample_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} GPU {self.gpu_index} at {self.t_ns}"


class ProcessSample(models.Model):
    # No index of their own on the foreign keys: the unique constraint leads with the node, and
    # an owner is never deleted while samples name it. At 10,000 GPUs every 15 s, each index is
    # tens of bytes on 57.6 M rows a day.
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    gpu_index = models.SmallIntegerField()
    t_ns = models.BigIntegerField()
    pid = models.IntegerField()
    mem_used_bytes = models.BigIntegerField(null=True)
    owner = models.ForeignKey(Owner, null=True, on_delete=models.PROTECT, related_name="+", db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "gpu_index", "t_ns", "pid"], name="processsample_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} GPU {self.gpu_index} pid {self.pid} at {self.t_ns}"


class GpuState(models.Model):
    """A GPU's latest class and holder, and since when (the start of the current streak)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    gpu_index = models.SmallIntegerField()
    gpu_uuid = models.CharField(max_length=96, blank=True)
    cls = models.SmallIntegerField(choices=GpuClass.choices)
    holder = models.ForeignKey(Owner, null=True, on_delete=models.PROTECT, related_name="+")
    since_ns = models.BigIntegerField()
    last_t_ns = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "gpu_index"], name="gpustate_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} GPU {self.gpu_index}: {self.get_cls_display()}"


class FleetDay(models.Model):
    """GPU time and its cost per node, UTC day, class and holder: what every fleet page reads.
    The cents of one node-day add up to the node-day's cost (largest remainder)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    cls = models.SmallIntegerField(choices=GpuClass.choices)
    holder = models.ForeignKey(Owner, null=True, on_delete=models.PROTECT, related_name="+")
    team = models.ForeignKey(Team, null=True, on_delete=models.SET_NULL, related_name="+")
    project = models.ForeignKey(Project, null=True, on_delete=models.SET_NULL, related_name="+")
    gpu_ns = models.BigIntegerField()
    # Exact cost in units of 1e-4 USD x ns per GPU-hour: sum of covered ns x price in 1/10,000 USD
    # (price-book prices have four decimals), so cents are re-footed without re-reading samples.
    exact_units = models.DecimalField(max_digits=36, decimal_places=0, default=0)
    cost_cents = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["day", "node"], name="fleetday_day_node")]

    def __str__(self) -> str:
        return f"{self.node_id} on {self.day}: {self.get_cls_display()}"


class DayPending(models.Model):
    """(node, day) pairs whose FleetDay rows must be rebuilt (marked at ingest, cleared by derive)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    from_ns = models.BigIntegerField(default=0)  # the earliest new sample: at or before `derived_to_ns`, a rebuild

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "day"], name="daypending_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} on {self.day}"


class DayDerived(models.Model):
    """How far a node-day's FleetDay rows reach: samples after `derived_to_ns` are added to them."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    derived_to_ns = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "day"], name="dayderived_unique")]

    def __str__(self) -> str:
        return f"{self.node_id} on {self.day} to {self.derived_to_ns}"


class MatchKind(models.TextChoices):
    K8S_NAMESPACE = "k8s_namespace"
    K8S_LABEL = "k8s_label"  # `key` names the label
    SLURM_ACCOUNT = "slurm_account"
    SLURM_PARTITION = "slurm_partition"
    UNIX_USER = "unix_user"  # a Slurm job's user or a plain process's Unix user


class AttributionRule(models.Model):
    """Ordered; the first rule matching an owner decides its team and project."""

    position = models.PositiveIntegerField()
    match = models.CharField(max_length=24, choices=MatchKind.choices)
    key = models.CharField(max_length=128, blank=True)
    pattern = models.CharField(max_length=200)  # exact, or a shell glob (`ml-*`)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")

    class Meta:
        ordering = ["position"]

    def __str__(self) -> str:
        return f"{self.position}: {self.match} {self.key} {self.pattern}"


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SUPERSEDED = "superseded"  # a later rule save queued its own job; that one finishes the work


class AttributionJob(models.Model):
    """Re-attribution of every owner after a rule save: a background job, never the request path.
    Progress is `owners_done` of `owners_total`; `owners_moved` changed team or project."""

    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)
    owners_total = models.PositiveIntegerField(default=0)
    owners_done = models.PositiveIntegerField(default=0)
    owners_moved = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"attribution job {self.pk}: {self.status} {self.owners_done}/{self.owners_total}"


class ImportStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class InvoiceImport(models.Model):
    """One FOCUS file. A small one is imported in its request (stored `done`); a large one is a
    background job (phantomhub/fleet/focus.py): `queued` with its CSV in `text` until the job
    ends, `running` with `lines_checked` as progress, then `done` (text emptied) or `failed` with the
    first errors and their `error_count` (nothing of it stored: all or nothing)."""

    content_sha256 = models.CharField(max_length=64, unique=True)
    filename = models.CharField(max_length=255, blank=True)
    lines = models.PositiveIntegerField(default=0)
    lines_new = models.PositiveIntegerField(default=0)
    imported_at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    status = models.CharField(max_length=8, choices=ImportStatus.choices, default=ImportStatus.DONE)
    lines_checked = models.PositiveIntegerField(default=0)
    matched_lines = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    error_count = models.PositiveIntegerField(default=0)
    text = models.TextField(blank=True)  # the CSV while its job waits or runs (bounded by the upload cap)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.filename or self.content_sha256[:12]} ({self.lines} lines)"


class InvoiceLine(models.Model):
    """One FOCUS charge row. `identity` is the SHA-256 of the columns that name the charge, so a
    line imported again (in the same file or another) is recognised and stored once."""

    invoice = models.ForeignKey(InvoiceImport, on_delete=models.CASCADE, related_name="+")
    identity = models.CharField(max_length=64, unique=True)
    row = models.PositiveIntegerField()
    billed_cost = models.DecimalField(max_digits=16, decimal_places=6)
    currency = models.CharField(max_length=8)
    resource_id = models.CharField(max_length=512, blank=True)
    service_name = models.CharField(max_length=200, blank=True)
    sku_id = models.CharField(max_length=200, blank=True)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    tags = models.JSONField(default=dict)
    node = models.ForeignKey(Node, null=True, on_delete=models.SET_NULL, related_name="+")
    matched_by = models.CharField(max_length=16, blank=True)  # resource_id | tag | ""

    def __str__(self) -> str:
        return f"line {self.row}: {self.billed_cost} {self.currency}"

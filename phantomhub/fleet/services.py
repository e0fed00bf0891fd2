"""Writes of the fleet: node tokens, node samples (ingest), attribution rules and their jobs.

Ingest, in order: the node row is locked; the request is checked against what this node may do
(samples within the replay window of its newest, owners within their bounds); its spec (GPU
model, provider, region) is appended to the node's history when its new samples report another;
samples are matched to the registered runs holding their GPUs (phantomhub/fleet/runs.py), stored,
each classified once (phantomhub/fleet/classify.py), and the node-days to
re-derive are marked. It never prices anything (phantomhub/fleet/derive.py does, off the request
path). A refusal raises inside the transaction, so nothing of a refused request is written.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from phantomhub.accounts.models import Project, Team, TokenKind
from phantomhub.accounts.services import IssuedToken, token_issue
from phantomhub.errors import ApiError, invalid
from phantomhub.fleet.attribution import Rule, owner_attribute
from phantomhub.fleet.classify import gpu_classify
from phantomhub.fleet.models import (
    AttributionJob,
    AttributionRule,
    DayPending,
    FleetDay,
    GpuSample,
    GpuState,
    JobStatus,
    Node,
    NodeSpec,
    Owner,
    ProcessSample,
)
from phantomhub.fleet.runs import gpu_runs, owner_digest, run_owners
from phantomhub.fleet.trust import hostname_allowed, hostnames_clean
from phantomhub.fleet.wire import NodeBatch
from phantomhub.jobs import job_start

NS = 10**9
SPEC_FIELDS = ("gpu_model", "provider", "region")
log = logging.getLogger(__name__)
REATTRIBUTE = "phantomhub.fleet.tasks.fleet_reattribute"  # the task (fleet/tasks.py), sent by name


def node_token_create(
    *, name: str = "", hostnames: Any, created_by: Any = None, expires_at: datetime | None = None
) -> IssuedToken:
    """A node token for these hostnames (exact or globs); ValueError when they are not valid."""
    patterns = hostnames_clean(hostnames)
    return token_issue(kind=TokenKind.NODE, name=name, hostnames=patterns, created_by=created_by, expires_at=expires_at)


def node_token_check(*, token: Any, hostname: str) -> None:
    """403 naming node.hostname unless the node token names this hostname."""
    patterns = getattr(token, "hostnames", None) or []
    if not hostname_allowed(patterns, hostname):
        raise ApiError(
            "forbidden",
            f"this node token reports for {', '.join(patterns[:5]) or 'no hostname'}, not {hostname!r}",
            fields={"node.hostname": "not a hostname of this node token"},
            status_code=403,
        )


def day_of_ns(t_ns: int) -> date:
    return datetime.fromtimestamp(t_ns // NS, tz=UTC).date()


def rules_load() -> list[Rule]:
    return [Rule(r.match, r.key, r.pattern, r.team_id, r.project_id) for r in AttributionRule.objects.order_by("position")]


def _run_project(owner: dict[str, Any], cache: dict[str, Project | None] | None = None) -> Project | None:
    slug = owner.get("project", "")
    if cache is not None and slug in cache:
        return cache[slug]
    project = Project.objects.filter(slug=slug).first()
    if cache is not None:
        cache[slug] = project
    return project


def owner_team_project(
    owner: dict[str, Any], rules: list[Rule], projects: dict[str, Project | None] | None = None
) -> tuple[int | None, int | None]:
    """Where an owner's time goes: a run to its project (and team), anything else by the rules."""
    if owner.get("kind") == "run":
        project = _run_project(owner, projects)
        return (project.team_id, project.pk) if project else (None, None)
    team_id, project_id, _ = owner_attribute(owner, rules)
    return team_id, project_id


def _day_start(now: datetime) -> datetime:
    return datetime.combine(now.astimezone(UTC).date(), time(0), tzinfo=UTC)


def _owners_resolve(node: Node, owners: list[dict[str, Any]], now: datetime) -> list[Owner]:
    """The request's owners, the new ones created for this node within its daily bound (else a
    400 naming the first owner past it)."""
    if len(owners) > settings.FLEET_MAX_OWNERS_PER_REQUEST:
        raise invalid("owners", f"at most {settings.FLEET_MAX_OWNERS_PER_REQUEST} owners in one request")
    digests = [owner_digest(o) for o in owners]
    found = {o.digest: o for o in Owner.objects.filter(digest__in=digests)}
    missing: dict[str, tuple[int, dict[str, Any]]] = {}
    for index, (digest, owner) in enumerate(zip(digests, owners, strict=True)):
        if digest not in found and digest not in missing:
            missing[digest] = (index, owner)
    if missing:
        limit = settings.FLEET_MAX_NEW_OWNERS_PER_NODE_DAY
        today = Owner.objects.filter(first_node=node, created_at__gte=_day_start(now)).count() if node.pk else 0
        if today + len(missing) > limit:
            index = list(missing.values())[max(limit - today, 0)][0]
            raise invalid(
                f"owners[{index}]", f"node {node.hostname!r} may create at most {limit} new owners a day ({today} so far)"
            )
        rules = rules_load()
        fresh = []
        for digest, (_, owner) in missing.items():
            team_id, project_id = owner_team_project(owner, rules)
            fresh.append(
                Owner(digest=digest, kind=owner["kind"], data=owner, team_id=team_id, project_id=project_id, first_node=node)
            )
        Owner.objects.bulk_create(fresh, ignore_conflicts=True)
        found = {o.digest: o for o in Owner.objects.filter(digest__in=digests)}
    return [found[d] for d in digests]


def _node_lock(batch: NodeBatch, now: datetime) -> Node:
    """The node's row, locked (counters, spec and newest sample compare then write); created
    with the request's description when new."""
    fields = {k: v for k, v in batch.node.items() if k != "hostname"}
    node, _ = Node.objects.select_for_update().get_or_create(
        hostname=batch.node["hostname"], defaults={**fields, "interval_s": batch.interval_s, "last_seen_at": now}
    )
    return node


def _replay_window_check(node: Node, batch: NodeBatch) -> None:
    """A sample older than the node's newest accepted one (or the request's own newest) by more
    than FLEET_REPLAY_WINDOW_S is refused: a collector's spool replays within that window, and
    older history is not rewritten."""
    times = batch.gpus["t_ns"]
    newest = max([node.last_t_ns or 0, *times])
    window_ns = settings.FLEET_REPLAY_WINDOW_S * NS
    oldest = newest - window_ns
    hours = settings.FLEET_REPLAY_WINDOW_S / 3600
    for column, values in (("gpus.t_ns", times), ("processes.t_ns", batch.processes["t_ns"])):
        for i, t in enumerate(values):
            if t < oldest:
                raise invalid(
                    f"{column}[{i}]",
                    f"older than node {node.hostname!r}'s newest sample by more than the replay window ({hours:g} h)",
                )


def _spec_latest(node: Node) -> NodeSpec:
    spec = NodeSpec.objects.filter(node=node).order_by("-valid_from_ns").first()
    if spec is None:  # a node from before spec history, or just created: its spec from the beginning
        spec = NodeSpec.objects.create(node=node, valid_from_ns=0, **{f: getattr(node, f) for f in SPEC_FIELDS})
    return spec


def _node_update(node: Node, batch: NodeBatch, now: datetime) -> None:
    """Describe the node as its newest samples do. Only a request with samples after the newest
    accepted one moves it forward: a changed spec is appended to the history from its first such
    sample (the time before keeps the spec it was priced with), and a replayed older request
    changes neither the spec nor the description."""
    times = batch.gpus["t_ns"]
    newer = [t for t in times if node.last_t_ns is None or t > node.last_t_ns]
    spec = _spec_latest(node)
    if newer:
        reported = {f: batch.node[f] for f in SPEC_FIELDS}
        if reported != {f: getattr(spec, f) for f in SPEC_FIELDS}:
            NodeSpec.objects.create(node=node, valid_from_ns=min(newer), **reported)
        for name, value in batch.node.items():
            if name != "hostname":
                setattr(node, name, value)
        node.interval_s = batch.interval_s
        node.last_t_ns = max(newer)
    node.last_seen_at = now
    _counters_keep(node, batch, now)
    node.save()


def _counters_keep(node: Node, batch: NodeBatch, now: datetime) -> None:
    """Keep the request's counters when its samples are the node's latest: a request replayed from
    the spool carries the counters of when it was built, older than those already kept. A request
    without GPU samples has no time to order it by and leaves the counters alone."""
    if batch.counters is None or not batch.gpus["t_ns"]:
        return
    t_ns = max(batch.gpus["t_ns"])
    if node.counters_t_ns is not None and t_ns <= node.counters_t_ns:
        return
    node.counters, node.counters_t_ns, node.counters_at = batch.counters, t_ns, now


@dataclass(frozen=True)
class NodeIngestResult:
    node: str
    gpu: int
    processes: int
    duplicates: int

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "stored": {"gpu": self.gpu, "processes": self.processes}, "duplicates": self.duplicates}


def _process_rows(node: Node, batch: NodeBatch, owners: list[Owner]) -> list[ProcessSample]:
    p = batch.processes
    return [
        ProcessSample(
            node=node,
            gpu_index=p["gpu_index"][i],
            t_ns=p["t_ns"][i],
            pid=p["pid"][i],
            mem_used_bytes=p["mem_used_bytes"][i],
            owner_id=owners[p["owner"][i]].pk if p["owner"][i] is not None else None,
        )
        for i in range(len(p["t_ns"]))
    ]


def _gpu_rows(
    node: Node, batch: NodeBatch, procs: list[ProcessSample], owners: dict[int, Owner], runs: dict[tuple[int, int], int]
) -> list[GpuSample]:
    held: dict[tuple[int, int], list[tuple[int | None, str | None, int | None]]] = defaultdict(list)
    for ps in procs:
        kind = owners[ps.owner_id].kind if ps.owner_id is not None else None
        held[(ps.gpu_index, ps.t_ns)].append((ps.owner_id, kind, ps.mem_used_bytes))
    g = batch.gpus
    rows = []
    for i in range(len(g["t_ns"])):
        key = (g["gpu_index"][i], g["t_ns"][i])
        cls, holder = gpu_classify(
            util_pct=g["util_pct"][i],
            mem_used_bytes=g["mem_used_bytes"][i],
            processes=held.get(key, []),
            sm_active=g["sm_active"][i],
            run_holder=runs.get(key),
        )
        rows.append(
            GpuSample(
                node=node,
                gpu_index=key[0],
                t_ns=key[1],
                interval_s=batch.interval_s,
                util_pct=g["util_pct"][i],
                mem_used_bytes=g["mem_used_bytes"][i],
                mem_total_bytes=g["mem_total_bytes"][i],
                power_w=g["power_w"][i],
                sm_clock_mhz=g["sm_clock_mhz"][i],
                sm_active=g["sm_active"][i],
                cls=cls,
                holder_id=holder,
            )
        )
    return rows


def _new_only(model: Any, node: Node, rows: list[Any], key: tuple[str, ...]) -> list[Any]:
    if not rows:
        return []
    times = {r.t_ns for r in rows}
    existing = set(model.objects.filter(node=node, t_ns__gte=min(times), t_ns__lte=max(times)).values_list(*key))
    return [r for r in rows if tuple(getattr(r, k) for k in key) not in existing]


def _states_update(node: Node, rows: list[GpuSample], uuids: dict[int, str]) -> None:
    by_gpu: dict[int, list[GpuSample]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r.t_ns):
        by_gpu[row.gpu_index].append(row)
    states = {s.gpu_index: s for s in GpuState.objects.select_for_update().filter(node=node, gpu_index__in=by_gpu)}
    stale_ns = 2 * node.interval_s * NS
    for index, samples in by_gpu.items():
        state = states.get(index)
        if state is None:
            first = samples[0]
            state = GpuState(
                node=node, gpu_index=index, cls=first.cls, holder_id=first.holder_id, since_ns=first.t_ns, last_t_ns=first.t_ns
            )
        for row in samples:
            if row.t_ns <= state.last_t_ns:
                continue  # an older sample arriving late does not change what the GPU does now
            same = state.cls == row.cls and state.holder_id == row.holder_id and row.t_ns - state.last_t_ns <= stale_ns
            if not same:
                state.cls, state.holder_id, state.since_ns = row.cls, row.holder_id, row.t_ns
            state.last_t_ns = row.t_ns
        state.gpu_uuid = uuids.get(index, state.gpu_uuid)
        state.save()


def _days_mark(node: Node, rows: list[GpuSample]) -> None:
    """Mark the node-days to derive, each with its earliest new sample. A sample covers the time
    since the previous one (at most twice the interval), so a late sample also changes the
    coverage of its successor, which can lie on the next day: that day is marked from it too."""
    earliest: dict[date, int] = {}
    for row in rows:
        for day in {day_of_ns(row.t_ns), day_of_ns(row.t_ns + 2 * row.interval_s * NS)}:
            earliest[day] = min(earliest.get(day, row.t_ns), row.t_ns)
    DayPending.objects.bulk_create([DayPending(node=node, day=d, from_ns=t) for d, t in earliest.items()], ignore_conflicts=True)
    for day, t_ns in earliest.items():  # already marked: keep the earliest (portable "LEAST")
        DayPending.objects.filter(node=node, day=day, from_ns__gt=t_ns).update(from_ns=t_ns)


@transaction.atomic
def node_samples_ingest(*, batch: NodeBatch, token: Any = None) -> NodeIngestResult:
    """Store one collector request, idempotently: unique on (node, gpu, t_ns) and (node, gpu, t_ns, pid).
    With `token` (the request's node token), its hostnames must name the node (else a 403)."""
    if token is not None:
        node_token_check(token=token, hostname=batch.node["hostname"])
    now = timezone.now()
    node = _node_lock(batch, now)
    _replay_window_check(node, batch)
    owners = _owners_resolve(node, batch.owners, now)
    _node_update(node, batch, now)
    by_id = {o.pk: o for o in owners}
    procs = _process_rows(node, batch, owners)
    runs = run_owners(node=node, runs=gpu_runs(hostname=node.hostname, gpus=batch.gpus))  # fleet/runs.py
    gpus = _gpu_rows(node, batch, procs, by_id, runs)
    new_procs = _new_only(ProcessSample, node, procs, ("gpu_index", "t_ns", "pid"))
    new_gpus = _new_only(GpuSample, node, gpus, ("gpu_index", "t_ns"))
    ProcessSample.objects.bulk_create(new_procs, ignore_conflicts=True, batch_size=5000)
    GpuSample.objects.bulk_create(new_gpus, ignore_conflicts=True, batch_size=5000)
    uuids = {i: u for i, u in zip(batch.gpus["gpu_index"], batch.gpus["gpu_uuid"], strict=True) if u}
    if new_gpus:
        _states_update(node, new_gpus, uuids)
        _days_mark(node, new_gpus)
    duplicates = (len(gpus) - len(new_gpus)) + (len(procs) - len(new_procs))
    return NodeIngestResult(node.hostname, len(new_gpus), len(new_procs), duplicates)


# --- attribution rules -------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleInput:
    match: str
    key: str
    pattern: str
    team: Team | None
    project: Project | None

    def as_rule(self) -> Rule:
        team_id = self.team.pk if self.team else (self.project.team_id if self.project else None)
        return Rule(self.match, self.key, self.pattern, team_id, self.project.pk if self.project else None)


def _owners_reattribute_chunk(owners: list[Owner], rules: list[Rule], projects: dict[str, Project | None]) -> int:
    """Apply `rules` to these owners and move their FleetDay rows with them: one UPDATE per
    (team, project) they move to, not one per owner. Returns how many moved."""
    moved: dict[tuple[int | None, int | None], list[int]] = defaultdict(list)
    changed = []
    for owner in owners:
        team_id, project_id = owner_team_project(owner.data, rules, projects)
        if (team_id, project_id) == (owner.team_id, owner.project_id):
            continue
        owner.team_id, owner.project_id = team_id, project_id
        changed.append(owner)
        moved[(team_id, project_id)].append(owner.pk)
    if changed:
        with transaction.atomic():
            Owner.objects.bulk_update(changed, ["team", "project"], batch_size=1000)
            for (team_id, project_id), ids in moved.items():
                FleetDay.objects.filter(holder_id__in=ids).update(team_id=team_id, project_id=project_id)
    return len(changed)


REATTRIBUTE_CHUNK = 2000


def owners_reattribute(*, progress: Any = None) -> int:
    """Apply the saved rules to every owner, and move their FleetDay rows with them, in chunks by
    id. `progress(done, moved)` after each chunk may return False to stop early. Returns the
    number of owners whose team or project changed."""
    rules = rules_load()
    projects: dict[str, Project | None] = {}
    done = moved = 0
    last_pk = 0
    while True:
        chunk = list(Owner.objects.filter(pk__gt=last_pk).order_by("pk")[:REATTRIBUTE_CHUNK])
        if not chunk:
            return moved
        moved += _owners_reattribute_chunk(chunk, rules, projects)
        done += len(chunk)
        last_pk = chunk[-1].pk
        if progress is not None and progress(done, moved) is False:
            return moved


def _rules_store(rules: list[RuleInput]) -> None:
    """Rule i is the row at position i: a changed one is saved, new ones created, the ones past the
    end deleted, each through save() or delete() so the audit log records the rule that changed,
    before and after (docs/audit.md), not a delete and a create of every rule."""
    stored = list(AttributionRule.objects.order_by("position", "id"))
    for i, r in enumerate(rules):
        values = {
            "position": i, "match": r.match, "key": r.key, "pattern": r.pattern,
            "team": r.team or (r.project.team if r.project else None), "project": r.project,
        }  # fmt: skip
        if i >= len(stored):
            AttributionRule.objects.create(**values)
            continue
        row = stored[i]
        if any(getattr(row, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(row, name, value)
            row.save()
    for row in stored[len(rules) :]:
        row.delete()


@transaction.atomic
def rules_replace(*, rules: list[RuleInput]) -> int:
    """Save the ordered rules (replacing all) and re-attribute at once; returns the owners that
    moved. For commands and the demo; the API saves with `rules_save` (a background job)."""
    _rules_store(rules)
    return owners_reattribute()


@transaction.atomic
def rules_save(*, rules: list[RuleInput], actor: Any = None) -> AttributionJob:
    """Save the ordered rules (replacing all) and queue the re-attribution of every owner as a
    job, started once this transaction commits. Queued jobs of earlier saves are superseded."""
    _rules_store(rules)
    AttributionJob.objects.filter(status=JobStatus.QUEUED).update(status=JobStatus.SUPERSEDED, finished_at=timezone.now())
    job = AttributionJob.objects.create(actor=actor if getattr(actor, "pk", None) else None, owners_total=Owner.objects.count())
    transaction.on_commit(lambda: attribution_job_enqueue(job_id=job.pk))
    return job


def attribution_job_enqueue(*, job_id: int) -> None:
    """To the Celery worker; without a broker (the embedded default), to a thread of this process,
    so the request that saved the rules still answers at once (phantomhub/jobs.py)."""
    job_start(job_id=job_id, run=lambda i: attribution_job_run(job_id=i), task=REATTRIBUTE, what="attribution-job")


def attribution_job_run(*, job_id: int) -> AttributionJob:
    """Run a queued job: re-attribute every owner, its progress saved after each chunk. A job a
    later save superseded stops (that save's job does the work); running it twice does nothing."""
    with transaction.atomic():
        job = AttributionJob.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.QUEUED:
            return job
        job.status, job.started_at, job.owners_total = JobStatus.RUNNING, timezone.now(), Owner.objects.count()
        job.save(update_fields=["status", "started_at", "owners_total"])

    stopped: list[bool] = []

    def progress(done: int, moved: int) -> bool:
        job.owners_done, job.owners_moved = done, moved
        job.owners_total = max(job.owners_total, done)
        job.save(update_fields=["owners_done", "owners_moved", "owners_total"])
        if AttributionJob.objects.filter(pk__gt=job.pk, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).exists():
            stopped.append(True)
            return False
        return True

    try:
        owners_reattribute(progress=progress)
    except Exception as exc:
        job.status, job.error, job.finished_at = JobStatus.FAILED, str(exc)[:500], timezone.now()
        job.save(update_fields=["status", "error", "finished_at"])
        raise
    job.status = JobStatus.SUPERSEDED if stopped else JobStatus.DONE
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "finished_at"])
    return job


def raw_samples_purge(*, now_ns: int | None = None) -> int:
    """Delete raw GPU and process samples older than FLEET_RAW_DAYS, once their days are derived."""
    now_ns = now_ns or int(timezone.now().timestamp() * NS)
    cutoff = now_ns - settings.FLEET_RAW_DAYS * 86_400 * NS
    pending = DayPending.objects.order_by("day").values_list("day", flat=True).first()
    if pending is not None:
        cutoff = min(cutoff, int(datetime(pending.year, pending.month, pending.day, tzinfo=UTC).timestamp()) * NS)
    deleted = 0
    # GPU by GPU, so each delete is a range of the (node, gpu_index, t_ns) unique index.
    for node_id, index in GpuState.objects.values_list("node_id", "gpu_index"):
        deleted += ProcessSample.objects.filter(node_id=node_id, gpu_index=index, t_ns__lt=cutoff).delete()[0]
        deleted += GpuSample.objects.filter(node_id=node_id, gpu_index=index, t_ns__lt=cutoff).delete()[0]
    return deleted

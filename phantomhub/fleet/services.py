"""Writes of the fleet: node tokens, node samples (ingest), attribution rules.

Ingest stores, classifies each GPU sample once (phantomhub/fleet/classify.py) and marks the
node-days to re-derive; it never prices anything (phantomhub/fleet/derive.py does, off the
request path).
"""

from __future__ import annotations

import hashlib
import secrets
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone

from phantomhub.accounts.models import ApiToken, Project, Team, TokenKind
from phantomhub.accounts.services import TOKEN_PREFIX, IssuedToken, token_digest
from phantomhub.fleet.attribution import Rule, owner_attribute
from phantomhub.fleet.classify import gpu_classify
from phantomhub.fleet.models import (
    AttributionRule,
    DayPending,
    FleetDay,
    GpuSample,
    GpuState,
    Node,
    Owner,
    ProcessSample,
)
from phantomhub.fleet.wire import NodeBatch

NS = 10**9


def node_token_create(*, name: str = "") -> IssuedToken:
    raw = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = ApiToken.objects.create(kind=TokenKind.NODE, prefix=raw[:12], digest=token_digest(raw), name=name)
    return IssuedToken(token=token, raw=raw)


def day_of_ns(t_ns: int) -> date:
    return datetime.fromtimestamp(t_ns // NS, tz=UTC).date()


def owner_digest(owner: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(owner, option=orjson.OPT_SORT_KEYS)).hexdigest()


def rules_load() -> list[Rule]:
    return [Rule(r.match, r.key, r.pattern, r.team_id, r.project_id) for r in AttributionRule.objects.order_by("position")]


def _run_project(owner: dict[str, Any]) -> Project | None:
    return Project.objects.filter(slug=owner.get("project", "")).first()


def owner_team_project(owner: dict[str, Any], rules: list[Rule]) -> tuple[int | None, int | None]:
    """Where an owner's time goes: a run to its project (and team), anything else by the rules."""
    if owner.get("kind") == "run":
        project = _run_project(owner)
        return (project.team_id, project.pk) if project else (None, None)
    team_id, project_id, _ = owner_attribute(owner, rules)
    return team_id, project_id


def _owners_resolve(owners: list[dict[str, Any]]) -> list[Owner]:
    digests = [owner_digest(o) for o in owners]
    found = {o.digest: o for o in Owner.objects.filter(digest__in=digests)}
    missing = [(d, o) for d, o in zip(digests, owners, strict=True) if d not in found]
    if missing:
        rules = rules_load()
        fresh = []
        for digest, owner in dict(missing).items():
            team_id, project_id = owner_team_project(owner, rules)
            fresh.append(Owner(digest=digest, kind=owner["kind"], data=owner, team_id=team_id, project_id=project_id))
        Owner.objects.bulk_create(fresh, ignore_conflicts=True)
        found = {o.digest: o for o in Owner.objects.filter(digest__in=digests)}
    return [found[d] for d in digests]


def _node_upsert(batch: NodeBatch, now: datetime) -> Node:
    fields = {k: v for k, v in batch.node.items() if k != "hostname"}
    node, created = Node.objects.select_for_update().get_or_create(  # row-locked: counters compare then write
        hostname=batch.node["hostname"], defaults={**fields, "interval_s": batch.interval_s, "last_seen_at": now}
    )
    if not created:
        for name, value in fields.items():
            setattr(node, name, value)
        node.interval_s = batch.interval_s
        node.last_seen_at = now
    _counters_keep(node, batch, now)
    node.save()
    return node


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


def _gpu_rows(node: Node, batch: NodeBatch, procs: list[ProcessSample], owners: dict[int, Owner]) -> list[GpuSample]:
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
def node_samples_ingest(*, batch: NodeBatch) -> NodeIngestResult:
    """Store one collector request, idempotently: unique on (node, gpu, t_ns) and (node, gpu, t_ns, pid)."""
    node = _node_upsert(batch, timezone.now())
    owners = _owners_resolve(batch.owners)
    by_id = {o.pk: o for o in owners}
    procs = _process_rows(node, batch, owners)
    gpus = _gpu_rows(node, batch, procs, by_id)
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


def owners_reattribute() -> int:
    """Apply the saved rules to every owner, and move their FleetDay rows with them. Returns the
    number of owners whose team or project changed."""
    rules = rules_load()
    changed = 0
    for owner in Owner.objects.all().iterator(chunk_size=2000):
        team_id, project_id = owner_team_project(owner.data, rules)
        if (team_id, project_id) == (owner.team_id, owner.project_id):
            continue
        owner.team_id, owner.project_id = team_id, project_id
        owner.save(update_fields=["team", "project"])
        FleetDay.objects.filter(holder=owner).update(team_id=team_id, project_id=project_id)
        changed += 1
    return changed


@transaction.atomic
def rules_replace(*, rules: list[RuleInput]) -> int:
    """Save the ordered rules (replacing all) and re-attribute; returns the owners that moved."""
    AttributionRule.objects.all().delete()
    AttributionRule.objects.bulk_create(
        [
            AttributionRule(
                position=i, match=r.match, key=r.key, pattern=r.pattern,
                team=r.team or (r.project.team if r.project else None), project=r.project,
            )
            for i, r in enumerate(rules)
        ]
    )  # fmt: skip
    return owners_reattribute()


def raw_samples_purge(*, now_ns: int | None = None) -> int:
    """Delete raw GPU and process samples older than FLEET_RAW_DAYS, once their days are derived."""
    from django.conf import settings

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

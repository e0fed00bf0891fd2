"""Which registered run holds a GPU at a sample's time, whatever the node reads it with.

The node collector names a run holder through the host's run registry, from the pids NVML lists;
a dcgm-exporter page lists no pids, so on such a node a GPU a measured run holds would be
classed busy-uninstrumented and priced a second time. Every rank of a run also tells the server
its host and GPUs when it registers (phantomhub/telemetry/gpus.py, `RunGpu`), and a node sample
is matched against those:

- by UUID, when both the sample and the rank name one: a GPU's UUID is unique, and a training
  container's host name (its pod's name) is not the node's;
- else by (host, physical index), host names compared in lower case up to the first dot;
- only at times the run covers: from its allocation start (its own analysis bills from there)
  to its finish, open while it runs. Two runs covering one sample (one crashed and not yet
  marked so): the one allocated last.

The holder is the run's owner as the collector would send it (`{"kind": "run", "project",
"run_id", "server_run_id"}`), so an NVML site and a dcgm site give the same owner and the same
classification: instrumented, the run's own cost, never priced again by the fleet.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from django.db.models import Q

from phantomhub.fleet.models import Node, Owner
from phantomhub.telemetry.gpus import host_key
from phantomhub.telemetry.models import Run, RunGpu

NS = 10**9
Key = tuple[int, int]  # (gpu_index, t_ns)
EPOCH = datetime.fromtimestamp(0, tz=UTC)


def _at(t_ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=t_ns // 1000)


def _ns(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


def _covers(run: Run, t_ns: int) -> bool:
    return _ns(run.allocation_start) <= t_ns and (run.finished_at is None or t_ns <= _ns(run.finished_at))


def gpu_runs(*, hostname: str, gpus: dict[str, list[Any]]) -> dict[Key, Run]:
    """The run holding each (gpu_index, t_ns) of a node request's GPU columns, where one does."""
    times = gpus["t_ns"]
    if not times:
        return {}
    host = host_key(hostname)
    uuids = {u for u in gpus["gpu_uuid"] if u}
    indices = set(gpus["gpu_index"])
    rows = (
        RunGpu.objects.filter(Q(gpu_uuid__in=uuids) | Q(host=host, gpu_index__in=indices))
        .filter(run__allocation_start__lte=_at(max(times)) + timedelta(microseconds=1))
        .filter(Q(run__finished_at__isnull=True) | Q(run__finished_at__gte=_at(min(times))))
        .select_related("run", "run__project")
    )
    by_uuid: dict[str, list[RunGpu]] = defaultdict(list)
    by_index: dict[int, list[RunGpu]] = defaultdict(list)
    for row in rows:
        if row.gpu_uuid:
            by_uuid[row.gpu_uuid].append(row)
        if row.host == host and row.gpu_index is not None:
            by_index[row.gpu_index].append(row)
    out: dict[Key, Run] = {}
    for index, t_ns, uuid in zip(gpus["gpu_index"], times, gpus["gpu_uuid"], strict=True):
        # Both sides name a UUID: it decides. Else the rank's (host, index) does.
        named = by_uuid.get(uuid, []) if uuid else []
        by_place = [r for r in by_index.get(index, []) if not (uuid and r.gpu_uuid)]
        live = [r.run for r in named + by_place if _covers(r.run, t_ns)]
        if live:
            out[(index, t_ns)] = max(live, key=lambda run: (run.allocation_start, str(run.pk)))
    return out


def run_owner(run: Run) -> dict[str, Any]:
    """The run as an owner, exactly as the collector names it from the run registry."""
    return {
        "kind": "run",
        "project": run.project.slug,
        "run_id": str(run.client_id or run.pk),
        "server_run_id": str(run.pk),
    }


def owner_digest(owner: dict[str, Any]) -> str:
    """An owner's identity: the digest of its fields, whatever their order."""
    return hashlib.sha256(orjson.dumps(owner, option=orjson.OPT_SORT_KEYS)).hexdigest()


def run_owners(*, node: Node, runs: dict[Key, Run]) -> dict[Key, int]:
    """Owner ids of the runs holding these samples, made when new (their project's team and
    project: a run goes to its own project whatever the rules say). Bounded by the runs that
    registered this node's GPUs, not by anything the node sends, so outside the owner bounds."""
    if not runs:
        return {}
    distinct = {run.pk: run for run in runs.values()}
    digests = {pk: owner_digest(run_owner(run)) for pk, run in distinct.items()}
    found = {o.digest: o.pk for o in Owner.objects.filter(digest__in=digests.values())}
    fresh = [
        Owner(
            digest=digests[pk], kind="run", data=run_owner(run),
            team_id=run.project.team_id, project_id=run.project_id, first_node=node,
        )
        for pk, run in distinct.items()
        if digests[pk] not in found
    ]  # fmt: skip
    if fresh:
        Owner.objects.bulk_create(fresh, ignore_conflicts=True)
        found = {o.digest: o.pk for o in Owner.objects.filter(digest__in=digests.values())}
    return {key: found[digests[run.pk]] for key, run in runs.items()}

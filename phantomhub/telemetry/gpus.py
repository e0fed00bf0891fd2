"""The GPUs a run's rank holds, as its agent reports them when it registers.

The agent puts them in the registration's `environment` (`host`, `rank` and `gpus`: a list of
`{"index": physical NVML index or null, "uuid": "GPU-..." or null}`), where every server takes
them: an older server, whose registration refuses unknown fields, keeps them as plain
environment. This server also stores them per rank (RunGpu), so the node collector's samples of
those GPUs are the run's however the node reads them (phantomhub/fleet/runs.py): a dcgm-exporter
page names no processes, so it cannot find the run through the host's run registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from phantomhub.errors import invalid
from phantomhub.telemetry.models import Run, RunGpu

MAX_GPUS = 64  # per rank: a rank drives one GPU, or a node's worth (8, 16) in single-process jobs
MAX_GPU_INDEX = 255
MAX_UUID = 96
MAX_HOST = 255


@dataclass(frozen=True)
class RankGpus:
    rank: int
    host: str
    gpus: list[tuple[int | None, str]]  # (physical index or None, uuid or "")


def host_key(name: str) -> str:
    """A host name as runs and nodes are matched by: lower case, up to its first dot."""
    return name.strip().lower().split(".", 1)[0]


def _gpu(item: Any, field: str) -> tuple[int | None, str]:
    if not isinstance(item, dict) or set(item) - {"index", "uuid"}:
        raise invalid(field, 'must be an object {"index": int or null, "uuid": string or null}')
    index, uuid = item.get("index"), item.get("uuid")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_GPU_INDEX):
        raise invalid(f"{field}.index", f"must be an integer in [0, {MAX_GPU_INDEX}] or null")
    if uuid is not None and (not isinstance(uuid, str) or not uuid.strip() or len(uuid) > MAX_UUID):
        raise invalid(f"{field}.uuid", f"must be a non-empty string of at most {MAX_UUID} characters, or null")
    if index is None and uuid is None:
        raise invalid(field, "names neither an index nor a uuid")
    return index, (uuid or "").strip()


def rank_gpus_parse(environment: Any) -> RankGpus | None:
    """The rank's GPUs from a registration's environment; None when it names none. A malformed
    list is a 400 naming the field (`environment.gpus[1].index`), before anything is written."""
    if not isinstance(environment, dict) or environment.get("gpus") is None:
        return None
    gpus = environment["gpus"]
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        raise invalid("environment.gpus", f"must be a list of at most {MAX_GPUS} GPUs")
    rank, host = environment.get("rank", 0), environment.get("host", "")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= 1_000_000:
        raise invalid("environment.rank", "must be an integer in [0, 1000000] when environment.gpus is given")
    if not isinstance(host, str) or len(host) > MAX_HOST:
        raise invalid("environment.host", f"must be a string of at most {MAX_HOST} characters")
    parsed = [_gpu(item, f"environment.gpus[{i}]") for i, item in enumerate(gpus)]
    return RankGpus(rank=rank, host=host_key(host), gpus=list(dict.fromkeys(parsed)))


@transaction.atomic
def rank_gpus_store(*, run: Run, gpus: RankGpus) -> None:
    """Replace what the rank reported before (a restarted rank may hold other GPUs)."""
    RunGpu.objects.filter(run=run, rank=gpus.rank).delete()
    RunGpu.objects.bulk_create([RunGpu(run=run, rank=gpus.rank, host=gpus.host, gpu_index=i, gpu_uuid=u) for i, u in gpus.gpus])

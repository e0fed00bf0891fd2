"""Who this process is in the job (rank, world size, nodes) and which run it belongs to.

Run id, in order of precedence:

1. ``PHANTOMHUB_RUN_ID`` (or ``run_id=``): a UUID is used as is; any other string is hashed to a
   UUID (uuid5), so ``PHANTOMHUB_RUN_ID=exp-42`` is stable across restarts.
2. A torchrun job (``TORCHELASTIC_RUN_ID`` set and not ``none``): uuid5 of the rendezvous id, so
   every rank of every node derives the same id without talking to the others, and an elastic
   restart of the workers resumes the same run. When the agent is told its team or project
   (``team=``/``project=`` or ``PHANTOMHUB_TEAM``/``PHANTOMHUB_PROJECT``), they are hashed in
   too, so two teams reusing a rendezvous id derive different ids.
3. ``torch.distributed`` initialised with more than one rank: rank 0 makes a uuid4 and publishes
   it in the process group's key-value store; the other ranks read it (not a collective, so it
   cannot disturb NCCL ordering).
4. All ranks on one node without a rendezvous id (static ``torchrun``/launcher): uuid5 of
   MASTER_ADDR, MASTER_PORT and the start time of the common parent process (and the team and
   project, as in 2).
5. Otherwise a fresh uuid4 (a warning is logged when the world size is above one: set
   PHANTOMHUB_RUN_ID so that the ranks agree).

Each attempt of a job is its own run: when an attempt number above 0 is known (``attempt=``,
``PHANTOMHUB_ATTEMPT`` or the launcher's restart count, see ``resolve_job``), the ids of 1. (a
string that is not a UUID) and 2. are derived with it (``<id>/a<attempt>``,
``torchelastic/<id>/a<attempt>/<n>``), so a restart registers a new run instead of reusing the
step numbers of the previous one. Attempt 0 keeps the ids agents derived before jobs existed.

The job (``resolve_job``) is the training objective across attempts: ``job=`` or
``PHANTOMHUB_JOB``, else the launcher's (torchelastic, then Slurm, then Kubernetes).

The server keys runs by (project, this id), so an id another project uses never blocks or
reaches this one's run; the scope in 2 and 4 only keeps accidental collisions rare, so that the
run's server-wide id usually equals the id derived here.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from ._log import logger

NAMESPACE = uuid.UUID("1b7c4a3e-6f1d-4b0e-9a52-5f0d3c1e8a77")
_STORE_KEY = "phantomhub/run_id/{n}"
_init_count = 0


@dataclasses.dataclass
class Identity:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    # The launcher said both LOCAL_RANK and LOCAL_WORLD_SIZE (torchrun does): the node's local
    # ranks are known, not guessed, and local rank 0 may send for them (``_node``).
    node_local: bool = False
    nodes: int = 1
    host: str = ""
    distributed: bool = False


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _torch_dist() -> Any:
    """torch.distributed when it is already imported and initialised, else None."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: S110 - a broken torch install must not break the agent
        pass
    return None


def detect_identity(env: Mapping[str, str] | None = None) -> Identity:
    env = os.environ if env is None else env
    ident = Identity(host=socket.gethostname())
    dist = _torch_dist()
    if dist is not None:
        ident.rank = int(dist.get_rank())
        ident.world_size = int(dist.get_world_size())
        ident.distributed = ident.world_size > 1
    else:
        ident.rank = _int_env(env, "RANK") or 0
        ident.world_size = _int_env(env, "WORLD_SIZE") or 1
        ident.distributed = ident.world_size > 1
    local_rank = _int_env(env, "LOCAL_RANK")
    ident.local_rank = local_rank if local_rank is not None else 0
    local_world = _int_env(env, "LOCAL_WORLD_SIZE")
    nodes = _int_env(env, "GROUP_WORLD_SIZE") or _int_env(env, "SLURM_NNODES") or _int_env(env, "NNODES")
    if nodes is None:
        nodes = ident.world_size // local_world if local_world else 1
    ident.nodes = max(1, nodes)
    ident.local_world_size = max(1, local_world or ident.world_size // ident.nodes)
    ident.node_local = local_rank is not None and local_world is not None
    return ident


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def normalize_run_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return str(uuid.uuid5(NAMESPACE, value))


def _parent_start_token(env: Mapping[str, str]) -> str | None:
    """The common parent's start time (clock ticks since boot), read from /proc; None elsewhere."""
    try:
        with open(f"/proc/{os.getppid()}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()  # field 22 (starttime), counted after the ")" of the comm
    except (OSError, IndexError):
        return None


def run_id_scope(team: str | None, project: str | None) -> str | None:
    """What derived run ids are scoped to: the team and project the agent was told, if any.

    Every rank of a job reads the same arguments and environment, so they agree on it."""
    if not team and not project:
        return None
    return f"team={team or ''}/project={project or ''}"


def _derived(key: str, scope: str | None) -> str:
    # Unscoped keys are the ones agents always derived, so a run started by an older agent and
    # resumed by this one (without team or project) keeps its id.
    return str(uuid.uuid5(NAMESPACE, f"{scope}/{key}" if scope else key))


def resolve_run_id(
    explicit: str | None,
    ident: Identity,
    env: Mapping[str, str] | None = None,
    *,
    scope: str | None = None,
    attempt: int | None = None,
) -> tuple[str, str]:
    """The run id and how it was found (for the run's environment record); `scope` (from
    run_id_scope) goes into the ids derived from the launcher, `attempt` (above 0) into the ids
    derived from a name, so that each attempt of a job is a run of its own."""
    global _init_count
    env = os.environ if env is None else env
    n = _init_count
    _init_count += 1
    later = attempt is not None and attempt > 0
    chosen = explicit or env.get("PHANTOMHUB_RUN_ID")
    if chosen:
        if later and not _is_uuid(chosen):
            return normalize_run_id(f"{chosen}/a{attempt}"), "explicit"
        return normalize_run_id(chosen), "explicit"
    elastic = env.get("TORCHELASTIC_RUN_ID")
    if elastic and elastic.lower() != "none" and ident.world_size > 1:
        key = f"torchelastic/{elastic}/a{attempt}/{n}" if later else f"torchelastic/{elastic}/{n}"
        return _derived(key, scope), "torchelastic"
    if ident.world_size > 1:
        from_store = _run_id_from_store(ident, n)
        if from_store is not None:
            return from_store, "process_group_store"
        parent = _parent_start_token(env)
        if ident.local_world_size == ident.world_size and parent is not None and env.get("MASTER_PORT"):
            key = f"single-node/{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT')}/{os.getppid()}/{parent}/{n}"
            return _derived(key, scope), "parent_process"
        logger.warning(
            "phantomhub: rank %d of %d cannot agree on a run id with the other ranks; set PHANTOMHUB_RUN_ID "
            "or call init() after torch.distributed.init_process_group()",
            ident.rank,
            ident.world_size,
        )
    return str(uuid.uuid4()), "generated"


def _run_id_from_store(ident: Identity, n: int) -> str | None:
    dist = _torch_dist()
    if dist is None:
        return None
    try:
        from torch.distributed import distributed_c10d

        store = distributed_c10d._get_default_store()
        key = _STORE_KEY.format(n=n)
        if ident.rank == 0:
            value = str(uuid.uuid4())
            store.set(key, value)
            return value
        return bytes(store.get(key)).decode("utf-8")
    except Exception as exc:  # the store is best effort: fall back to the next method
        logger.debug("phantomhub: run id via the process group store failed: %s", exc)
        return None


# -- jobs: one training objective across attempts ---------------------------------------------------

JOB_KEY_MAX_CHARS = 200
ATTEMPT_MAX = 1_000_000  # the server's bound
JOB_SOURCES = ("explicit", "torchelastic", "slurm", "kubernetes")
# Where a pod reads its namespace when POD_NAMESPACE is not set (the service account's mount).
K8S_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclasses.dataclass(frozen=True)
class Job:
    """The job a run is an attempt of: its key (unique within the project), the attempt number
    when one is known, and where the key came from (one of JOB_SOURCES)."""

    key: str
    attempt: int | None
    source: str

    def wire(self) -> dict[str, Any]:
        """The register body's ``job`` field."""
        out: dict[str, Any] = {"key": self.key, "source": self.source}
        if self.attempt is not None:
            out["attempt"] = self.attempt
        return out


def check_job_key(value: Any) -> str:
    """A job key as given: a string of 1 to 200 characters (surrounding blanks removed)."""
    if not isinstance(value, str):
        raise TypeError(f"job must be a string, not {type(value).__name__}")
    key = value.strip()
    if not key:
        raise ValueError("job must not be empty")
    if len(key) > JOB_KEY_MAX_CHARS:
        raise ValueError(f"job must be at most {JOB_KEY_MAX_CHARS} characters, not {len(key)}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise ValueError("job must be printable (no control characters)")
    return key


def check_attempt(value: Any) -> int:
    """An attempt number: an int >= 0 (a string of digits from the environment too)."""
    number: int
    if isinstance(value, bool):
        raise TypeError("attempt must be an int >= 0, not a bool")
    if isinstance(value, str):
        text = value.strip()
        if not text.isdigit():
            raise ValueError(f"attempt must be an int >= 0, not {value!r}")
        number = int(text)
    elif isinstance(value, int):
        number = value
    else:
        raise TypeError(f"attempt must be an int >= 0, not {type(value).__name__}")
    if not 0 <= number <= ATTEMPT_MAX:
        raise ValueError(f"attempt must be an int >= 0 and <= {ATTEMPT_MAX}, not {number}")
    return number


def _k8s_namespace(env: Mapping[str, str]) -> str | None:
    namespace = (env.get("POD_NAMESPACE") or "").strip()
    if namespace:
        return namespace
    try:
        with open(K8S_NAMESPACE_FILE, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _launcher_job(env: Mapping[str, str]) -> tuple[str, str, str | None] | None:
    """(key, source, the variable holding the launcher's attempt count) of the launcher's job."""
    elastic = (env.get("TORCHELASTIC_RUN_ID") or "").strip()
    if elastic and elastic.lower() != "none":
        return f"torchelastic/{elastic}", "torchelastic", "TORCHELASTIC_RESTART_COUNT"
    slurm = (env.get("SLURM_JOB_ID") or "").strip()
    if slurm:
        array, task = (env.get("SLURM_ARRAY_JOB_ID") or "").strip(), (env.get("SLURM_ARRAY_TASK_ID") or "").strip()
        key = f"slurm/{array}_{task}" if array and task else f"slurm/{slurm}"
        return key, "slurm", "SLURM_RESTART_COUNT"
    name = (env.get("JOBSET_NAME") or env.get("JOB_NAME") or "").strip()
    if name and (env.get("KUBERNETES_SERVICE_HOST") or env.get("POD_NAMESPACE")):
        namespace = _k8s_namespace(env)
        if namespace is None:
            logger.warning(
                "phantomhub: Kubernetes job %r without a namespace (set POD_NAMESPACE from metadata.namespace); "
                "the run is not linked to a job",
                name,
            )
            return None
        return f"kubernetes/{namespace}/{name}", "kubernetes", None
    return None


def resolve_job(
    job: Any = None, attempt: Any = None, env: Mapping[str, str] | None = None
) -> tuple[Job | None, int | None, list[str]]:
    """The job of this run, its attempt number, and the problems met (bad values, each ignored).

    Job key: ``job`` or PHANTOMHUB_JOB, else torchelastic (``torchelastic/<TORCHELASTIC_RUN_ID>``),
    else Slurm (``slurm/<SLURM_JOB_ID>``, ``slurm/<array>_<task>`` for an array task), else
    Kubernetes (``kubernetes/<namespace>/<JOBSET_NAME or JOB_NAME>``), else none. Attempt:
    ``attempt`` or PHANTOMHUB_ATTEMPT, else the launcher's count (TORCHELASTIC_RESTART_COUNT,
    SLURM_RESTART_COUNT with 0 when unset), else None. The attempt is returned without a job too:
    it still goes into the run id (``resolve_run_id``).
    """
    env = os.environ if env is None else env
    problems: list[str] = []
    key: str | None = None
    source = ""
    given = job if job is not None else env.get("PHANTOMHUB_JOB")
    where = "job" if job is not None else "PHANTOMHUB_JOB"
    if given is not None and not (job is None and str(given).strip() == ""):
        try:
            key, source = check_job_key(given), "explicit"
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}={given!r}: {exc}; the launcher's job is used, if any")
    launcher = _launcher_job(env)
    if key is None and launcher is not None:
        key, source = launcher[0], launcher[1]
    number: int | None = None
    given_attempt = attempt if attempt is not None else env.get("PHANTOMHUB_ATTEMPT")
    where = "attempt" if attempt is not None else "PHANTOMHUB_ATTEMPT"
    if given_attempt is not None and not (attempt is None and str(given_attempt).strip() == ""):
        try:
            number = check_attempt(given_attempt)
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}={given_attempt!r}: {exc}; the launcher's count is used, if any")
    if number is None and launcher is not None and launcher[2] is not None:
        raw = (env.get(launcher[2]) or "").strip()
        if raw == "" and launcher[1] == "slurm":
            number = 0
        elif raw:
            try:
                number = check_attempt(raw)
            except (TypeError, ValueError) as exc:
                problems.append(f"{launcher[2]}={raw!r}: {exc}")
    return (Job(key, number, source) if key is not None else None), number, problems

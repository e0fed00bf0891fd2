"""Who holds a GPU: a process's owner, read from the files the kernel, the kubelet and Slurm keep.

In order, the first that answers:

1. ``run``: the process registered a run with the in-process agent (the run registry,
   ``$PHANTOMHUB_RUN_DIR/<pid>.json``; for a process in another mount namespace, the same file
   under ``/proc/<pid>/root``, named by the pid the process has in its own pid namespace).
2. ``k8s``: the cgroup path names a pod (``.../kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``
   with the systemd driver, ``/kubepods/burstable/pod<uid>/<id>`` with cgroupfs, v1 or v2);
   namespace, name and labels come from the kubelet's pods file (a PodList as JSON), else from
   the pod's directory under the kubelet's root (downward-API ``labels`` files, the ``namespace``
   of its service-account volume, the name in its ``etc-hosts``), else from a downward-API labels
   file inside the container (``/proc/<pid>/root/etc/podinfo/labels``).
3. ``slurm``: ``SLURM_JOB_ID``/``SLURM_JOB_ACCOUNT``/``SLURM_JOB_PARTITION``/``SLURM_JOB_USER``
   in ``/proc/<pid>/environ`` when readable, else the cgroup path (``/slurm/uid_<uid>/job_<id>/``
   in v1, ``.../slurmstepd.scope/job_<id>/`` in v2) with the user from its uid.
4. ``user``: the real uid of ``/proc/<pid>/status``, named through the password database.

Scheduler identity does not change during a process's life, so it is cached by (pid, start
time); the run registry is looked at every time (a run may register after its process took the
GPU), cheaply: one ``stat`` per pid, the file parsed again only when it changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._registry import DEFAULT_DIR, ENV_DIR, registry_read, started_at_epoch

Owner = dict[str, Any]

_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER = re.compile(r"^(?:cri-containerd-|docker-|crio-|containerd-)?([0-9a-f]{12,64})(?:\.scope)?$")
_SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")
_SLURM_UID = re.compile(r"/uid_(\d+)(?:/|$)")
_LABEL_LINE = re.compile(r'^([^=\s]+)="(.*)"$')
CACHE_MAX = 4096
# A registry file is written a moment after its process started; a pid whose process started
# later than the file says was reused by another process, and the file is stale.
REGISTRY_SLACK_S = 2.0
SERVICE_ACCOUNT_NS = "namespace"  # the kube-api-access projected volume's namespace file


def read_text(path: Path, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def parse_cgroup(text: str) -> list[str]:
    """The cgroup paths of ``/proc/<pid>/cgroup`` (v1: one per hierarchy; v2: the ``0::`` line)."""
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2] and parts[2] not in paths:
            paths.append(parts[2])
    return paths


def pod_from_cgroup(paths: list[str]) -> tuple[str, str | None] | None:
    """(pod uid, container id) named by a kubepods cgroup path, or None."""
    for path in paths:
        if "kubepods" not in path:
            continue
        match = _POD_UID.search(path)
        if match is None:
            continue
        uid = match.group(1).replace("_", "-")
        container = None
        tail = path.rstrip("/").rsplit("/", 1)[-1]
        found = _CONTAINER.match(tail)
        if found is not None and not tail.startswith("kubepods"):
            container = found.group(1)
        return uid, container
    return None


def slurm_from_cgroup(paths: list[str]) -> tuple[str, int | None] | None:
    """(job id, uid) from a Slurm cgroup path, or None."""
    for path in paths:
        if "slurm" not in path:
            continue
        job = _SLURM_JOB.search(path)
        if job is None:
            continue
        uid = _SLURM_UID.search(path)
        return job.group(1), int(uid.group(1)) if uid else None
    return None


def parse_environ(raw: bytes) -> dict[str, str]:
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def parse_labels(text: str) -> dict[str, str]:
    """A downward-API labels file: ``key="value"`` lines, values quoted like Go strings."""
    labels = {}
    for line in text.splitlines():
        match = _LABEL_LINE.match(line.strip())
        if match is None:
            continue
        value = match.group(2)
        with contextlib.suppress(ValueError):
            value = json.loads(f'"{value}"')
        labels[match.group(1)] = value
    return labels


def parse_status(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def user_name(uid: int, lookup: Callable[[int], str] | None = None) -> str:
    try:
        return lookup(uid) if lookup is not None else pwd.getpwuid(uid).pw_name
    except (KeyError, OSError):
        return str(uid)


@dataclasses.dataclass
class PodInfo:
    namespace: str | None = None
    name: str | None = None
    labels: dict[str, str] = dataclasses.field(default_factory=dict)


class PodsFile:
    """The kubelet's pods (a PodList as JSON: its ``/pods`` answer, or ``kubectl get pods -o json``).

    Re-read when its modification time changes.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._mtime: float | None = None
        self._by_uid: dict[str, PodInfo] = {}
        self._by_name: dict[tuple[str, str], PodInfo] = {}

    def _refresh(self) -> None:
        if self.path is None:
            return
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            self._by_uid, self._by_name, self._mtime = {}, {}, None
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            data = json.loads(self.path.read_bytes().decode("utf-8"))
        except (OSError, ValueError):
            return
        by_uid: dict[str, PodInfo] = {}
        by_name: dict[tuple[str, str], PodInfo] = {}
        for item in data.get("items", []) if isinstance(data, dict) else []:
            meta = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(meta, dict):
                continue
            raw_labels = meta.get("labels")
            labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
            info = PodInfo(meta.get("namespace"), meta.get("name"), {str(k): str(v) for k, v in labels.items()})
            if isinstance(meta.get("uid"), str):
                by_uid[meta["uid"]] = info
            if info.namespace and info.name:
                by_name[(info.namespace, info.name)] = info
        self._by_uid, self._by_name = by_uid, by_name

    def by_uid(self, uid: str) -> PodInfo | None:
        self._refresh()
        return self._by_uid.get(uid)

    def by_name(self, namespace: str, name: str) -> PodInfo | None:
        self._refresh()
        return self._by_name.get((namespace, name))


def pod_from_kubelet_dir(kubelet_dir: Path, uid: str) -> PodInfo | None:
    """What the kubelet's pod directory tells without its API: labels, namespace, name."""
    pod_dir = kubelet_dir / "pods" / uid
    if not pod_dir.is_dir():
        return None
    info = PodInfo()
    volumes = pod_dir / "volumes"
    for kind in ("kubernetes.io~downward-api", "kubernetes.io~projected"):
        try:
            mounts = sorted((volumes / kind).iterdir())
        except OSError:
            continue
        for mount in mounts:
            labels = read_text(mount / "labels")
            if labels is not None:
                info.labels.update(parse_labels(labels))
            namespace = read_text(mount / SERVICE_ACCOUNT_NS, 1024)
            if namespace and not info.namespace:
                info.namespace = namespace.strip()
    hosts = read_text(pod_dir / "etc-hosts", 64 * 1024)
    if hosts:
        # The kubelet's managed hosts file ends with the pod's own address and hostname.
        for line in reversed(hosts.splitlines()):
            fields = line.split("#", 1)[0].split()
            if len(fields) >= 2 and fields[0] not in ("127.0.0.1", "::1", "fe00::0", "fe00::1", "fe00::2"):
                info.name = fields[1]
                break
    return info


@dataclasses.dataclass
class OwnerConfig:
    proc_root: Path = Path("/proc")
    run_dir: Path = dataclasses.field(default_factory=lambda: Path(os.environ.get(ENV_DIR) or DEFAULT_DIR))
    kubelet_dir: Path | None = Path("/var/lib/kubelet")
    pods_file: Path | None = None
    # Where a pod mounts its downward-API labels (looked up inside the container's root).
    labels_path: str = "/etc/podinfo/labels"
    user_lookup: Callable[[int], str] | None = None


class OwnerResolver:
    def __init__(self, config: OwnerConfig) -> None:
        self.config = config
        self.pods = PodsFile(config.pods_file)
        self._cache: OrderedDict[tuple[int, int], Owner] = OrderedDict()
        self._registry_cache: dict[Path, tuple[float, dict[str, Any] | None]] = {}
        self._btime: float | None = None
        self._clk_tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.lookups = 0

    def _proc(self, pid: int) -> Path:
        return self.config.proc_root / str(pid)

    def start_ticks(self, pid: int) -> int | None:
        text = read_text(self._proc(pid) / "stat", 4096)
        if not text:
            return None
        try:
            return int(text.rsplit(")", 1)[1].split()[19])
        except (IndexError, ValueError):
            return None

    def _boot_time(self) -> float | None:
        if self._btime is None:
            text = read_text(self.config.proc_root / "stat") or ""
            for line in text.splitlines():
                if line.startswith("btime "):
                    self._btime = float(line.split()[1])
        return self._btime

    def owner(self, pid: int) -> Owner | None:
        """The owner of ``pid``, or None when the process is gone (or its /proc unreadable)."""
        start = self.start_ticks(pid)
        if start is None:
            return None
        status = parse_status(read_text(self._proc(pid) / "status", 16 * 1024) or "")
        run = self._run_of(pid, start, status)
        if run is not None:
            return run
        key = (pid, start)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        self.lookups += 1
        owner = self._scheduler_owner(pid, status)
        self._cache[key] = owner
        if len(self._cache) > CACHE_MAX:
            self._cache.popitem(last=False)
        return owner

    # -- the run registry ------------------------------------------------------------------------

    def _registry_record(self, path: Path) -> dict[str, Any] | None:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            self._registry_cache.pop(path, None)
            return None
        cached = self._registry_cache.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        record = registry_read(path)
        self._registry_cache[path] = (mtime, record)
        if len(self._registry_cache) > CACHE_MAX:
            self._registry_cache.pop(next(iter(self._registry_cache)))
        return record

    def _run_of(self, pid: int, start_ticks: int, status: dict[str, str]) -> Owner | None:
        ns_pids = status.get("NSpid", "").split()
        inner = int(ns_pids[-1]) if ns_pids and ns_pids[-1].isdigit() else pid
        run_dir = str(self.config.run_dir).lstrip("/")
        # The collector's own view first (same host, same namespaces), then the process's.
        candidates = [(self.config.run_dir / f"{pid}.json", pid), (self._proc(pid) / "root" / run_dir / f"{inner}.json", inner)]
        for path, expected in candidates:
            record = self._registry_record(path)
            if record is None or record["pid"] != expected or not self._started_before(record, start_ticks):
                continue
            if not record["project"]:
                # The server finds a run by its project's slug: until the registration's answer
                # names it (a run started without project=, or offline), the process counts
                # under its scheduler identity.
                continue
            return {
                "kind": "run",
                "project": record["project"],
                "run_id": record["run_id"],
                "server_run_id": record["server_run_id"],
            }
        return None

    def _started_before(self, record: dict[str, Any], start_ticks: int) -> bool:
        started = started_at_epoch(record)
        btime = self._boot_time()
        if started is None or btime is None:
            return True  # cannot tell: trust the file
        return btime + start_ticks / self._clk_tck <= started + REGISTRY_SLACK_S

    # -- schedulers ------------------------------------------------------------------------------

    def _scheduler_owner(self, pid: int, status: dict[str, str]) -> Owner:
        cgroups = parse_cgroup(read_text(self._proc(pid) / "cgroup", 64 * 1024) or "")
        pod = pod_from_cgroup(cgroups)
        if pod is not None:
            return self._k8s_owner(pid, pod[0])
        environ = self._environ(pid)
        if environ.get("SLURM_JOB_ID"):
            return {
                "kind": "slurm",
                "job_id": environ["SLURM_JOB_ID"],
                "account": environ.get("SLURM_JOB_ACCOUNT"),
                "partition": environ.get("SLURM_JOB_PARTITION"),
                "user": environ.get("SLURM_JOB_USER") or self._user(status),
            }
        slurm = slurm_from_cgroup(cgroups)
        if slurm is not None:
            job_id, uid = slurm
            user = user_name(uid, self.config.user_lookup) if uid is not None else self._user(status)
            return {"kind": "slurm", "job_id": job_id, "account": None, "partition": None, "user": user}
        return {"kind": "user", "user": self._user(status)}

    def _environ(self, pid: int) -> dict[str, str]:
        try:
            with open(self._proc(pid) / "environ", "rb") as fh:
                return parse_environ(fh.read(1 << 20))
        except OSError:  # another user's process, without the privilege to read it
            return {}

    def _user(self, status: dict[str, str]) -> str | None:
        uids = status.get("Uid", "").split()
        if not uids or not uids[0].isdigit():
            return None
        return user_name(int(uids[0]), self.config.user_lookup)

    def _k8s_owner(self, pid: int, uid: str) -> Owner:
        info = self.pods.by_uid(uid)
        if info is None and self.config.kubelet_dir is not None:
            info = pod_from_kubelet_dir(self.config.kubelet_dir, uid)
        info = info or PodInfo()
        if not info.labels:
            text = read_text(self._proc(pid) / "root" / self.config.labels_path.lstrip("/"))
            if text:
                info.labels = parse_labels(text)
        if info.name is None:
            info.name = self._environ(pid).get("HOSTNAME")  # the runtime sets it to the pod's hostname
        if info.namespace and info.name and not info.labels:
            listed = self.pods.by_name(info.namespace, info.name)
            if listed is not None:
                info.labels = dict(listed.labels)
        return {"kind": "k8s", "namespace": info.namespace, "pod": info.name, "labels": info.labels}

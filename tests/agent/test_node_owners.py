"""Owner resolution of the node collector, on /proc trees, cgroup files and kubelet directories
shaped like real ones (laid under a temporary proc root), and on this machine's real /proc."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from phantomhub_agent.node import _owners as owners_module
from phantomhub_agent.node._owners import (
    OwnerConfig,
    OwnerResolver,
    parse_cgroup,
    parse_labels,
    pod_from_cgroup,
    slurm_from_cgroup,
)

BTIME = 1_790_000_000  # the host booted at this epoch second (in /proc/stat)
CLK_TCK = os.sysconf("SC_CLK_TCK")
POD_UID = "3f1c2b9a-7d4e-4c1a-9b2f-0e8d6a5c4b3a"
UID_ = POD_UID.replace("-", "_")  # the systemd cgroup driver's spelling
SCOPE = f"cri-containerd-{'9e1f0c2d3b4a59687f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918a'}.scope"
CONTAINER_ID = "9e1f0c2d3b4a59687f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918a"
USERS = {1000: "alice", 1001: "bob", 0: "root"}


def lookup(uid: int) -> str:
    return USERS[uid]


def proc_tree(
    root: Path,
    pid: int,
    *,
    uid: int = 1000,
    cgroup: str = "0::/user.slice/user-1000.slice/session-3.scope\n",
    environ: dict[str, str] | None = None,
    nspid: list[int] | None = None,
    started_s: float = 100.0,
) -> Path:
    """/proc/<pid> as the kernel lays it out: stat (start time in clock ticks since boot),
    status (Uid, NSpid), cgroup, environ (NUL-separated; absent when unreadable)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  1 2 3 4 5 6 7 0 0 0\nbtime {BTIME}\nprocesses 4242\n")
    proc = root / str(pid)
    proc.mkdir()
    ticks = int(started_s * CLK_TCK)
    # after the name: state ppid pgrp session tty tpgid flags, 12 counters, priority nice threads itreal, starttime
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12 + [str(ticks), "0", "0"]
    (proc / "stat").write_text(f"{pid} (python3 train.py) " + " ".join(fields) + "\n")
    ns = "\t".join(str(p) for p in (nspid or [pid]))
    status = {"Name": "python3", "State": "S (sleeping)", "Tgid": pid, "Pid": pid, "PPid": 1}
    status.update(Uid=f"{uid}\t{uid}\t{uid}\t{uid}", Gid=f"{uid}\t{uid}\t{uid}\t{uid}", NSpid=ns)
    (proc / "status").write_text("".join(f"{k}:\t{v}\n" for k, v in status.items()))
    (proc / "cgroup").write_text(cgroup)
    if environ is not None:
        (proc / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0")
    (proc / "root").mkdir()
    return proc


def resolver(tmp_path: Path, **config: Any) -> OwnerResolver:
    defaults: dict[str, Any] = {
        "proc_root": tmp_path / "proc",
        "run_dir": tmp_path / "runs",
        "kubelet_dir": tmp_path / "kubelet",
        "user_lookup": lookup,
    }
    defaults.update(config)
    return OwnerResolver(OwnerConfig(**defaults))


def iso(epoch_s: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC).isoformat()


def registry_file(directory: Path, pid: int, started_epoch: float, run_id: str = "5b0f3e8a-1d2c-4e6f-8a9b-0c1d2e3f4a5b") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": pid,
        "project": "llm-pretrain",
        "run_id": run_id,
        "server_run_id": "0e6a7c1d-2b3f-4a5e-9d8c-7b6a5f4e3d2c",
        "server": "http://phantomhub.internal:8000",
        "started_at": iso(started_epoch),
    }
    (directory / f"{pid}.json").write_text(json.dumps(record))


PODLIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "items": [
        {
            "metadata": {
                "name": "train-abc",
                "namespace": "ml-team",
                "uid": POD_UID,
                "labels": {"team": "nlp", "app.kubernetes.io/name": "trainer"},
            },
            "spec": {"nodeName": "gpu-a-17"},
        }
    ],
}


# -- parsing -------------------------------------------------------------------------------------


def test_cgroup_v1_lines_give_one_path_per_hierarchy_and_v2_its_single_path() -> None:
    v1 = (
        "12:pids:/kubepods/burstable/pod" + POD_UID + "/" + CONTAINER_ID + "\n"
        "11:memory:/kubepods/burstable/pod" + POD_UID + "/" + CONTAINER_ID + "\n"
        "1:name=systemd:/kubepods/burstable/pod" + POD_UID + "/" + CONTAINER_ID + "\n"
    )
    assert parse_cgroup(v1) == ["/kubepods/burstable/pod" + POD_UID + "/" + CONTAINER_ID]
    assert parse_cgroup("0::/system.slice/ssh.service\n") == ["/system.slice/ssh.service"]


@pytest.mark.parametrize(
    "path",
    [
        # systemd cgroup driver (cgroup v2, or v1 with systemd): the uid's dashes become underscores
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/{SCOPE}",
        f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/{SCOPE}",
        f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CONTAINER_ID}.scope",  # Guaranteed QoS
        # cgroupfs driver
        f"/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}",
        f"/kubepods/pod{POD_UID}/{CONTAINER_ID}",
        # as seen from inside another cgroup namespace (a containerised collector)
        f"/../../kubepods-burstable-pod{UID_}.slice/crio-{CONTAINER_ID}.scope",
    ],
)
def test_every_kubepods_layout_names_the_pod_uid_and_container(path: str) -> None:
    assert pod_from_cgroup([path]) == (POD_UID, CONTAINER_ID)


def test_a_pod_level_cgroup_names_the_pod_without_a_container() -> None:
    assert pod_from_cgroup([f"/kubepods/burstable/pod{POD_UID}"]) == (POD_UID, None)
    assert pod_from_cgroup(["/system.slice/containerd.service"]) is None


def test_slurm_cgroup_paths_of_v1_and_v2_name_the_job() -> None:
    assert slurm_from_cgroup(["/slurm/uid_1000/job_12345/step_0/task_0"]) == ("12345", 1000)
    assert slurm_from_cgroup(["/system.slice/slurmstepd.scope/job_778/step_batch/user/task_0"]) == ("778", None)
    assert slurm_from_cgroup(["/user.slice/job_1"]) is None  # not Slurm's


def test_downward_api_labels_are_unquoted_like_go_strings() -> None:
    text = 'app.kubernetes.io/name="trainer"\nteam="nlp"\nnote="a \\"quoted\\" word"\n'
    assert parse_labels(text) == {"app.kubernetes.io/name": "trainer", "team": "nlp", "note": 'a "quoted" word'}


# -- resolution on proc trees --------------------------------------------------------------------


def test_kubepods_cgroup_v2_process_is_named_by_the_kubelets_pods_file(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    cgroup = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/{SCOPE}\n"
    proc_tree(proc, 4242, cgroup=cgroup)
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps(PODLIST))
    owner = resolver(tmp_path, pods_file=pods).owner(4242)
    assert owner == {
        "kind": "k8s",
        "namespace": "ml-team",
        "pod": "train-abc",
        "labels": {"team": "nlp", "app.kubernetes.io/name": "trainer"},
    }


def test_kubepods_cgroup_v1_process_is_named_from_the_kubelets_pod_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a pods file: the downward-API labels volume, the service account's namespace and
    the pod's etc-hosts, as the kubelet lays them out under /var/lib/kubelet/pods/<uid>/."""
    proc = tmp_path / "proc"
    path = f"/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}"
    proc_tree(proc, 4243, cgroup=f"12:pids:{path}\n11:memory:{path}\n1:name=systemd:{path}\n")
    pod_dir = tmp_path / "kubelet" / "pods" / POD_UID
    labels = pod_dir / "volumes" / "kubernetes.io~downward-api" / "podinfo"
    labels.mkdir(parents=True)
    (labels / "labels").write_text('team="nlp"\napp="trainer"')
    sa = pod_dir / "volumes" / "kubernetes.io~projected" / "kube-api-access-7xk2p"
    sa.mkdir(parents=True)
    (sa / "namespace").write_text("ml-team")
    (sa / "token").write_text("must never be read")
    (pod_dir / "etc-hosts").write_text(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.244.3.17\ttrain-abc\n"
    )
    read: list[str] = []
    real_read = owners_module.read_text

    def recording(path: Path, limit: int = 1 << 20) -> str | None:
        read.append(str(path))
        return real_read(path, limit)

    monkeypatch.setattr(owners_module, "read_text", recording)
    owner = resolver(tmp_path).owner(4243)
    assert owner == {
        "kind": "k8s",
        "namespace": "ml-team",
        "pod": "train-abc",
        "labels": {"team": "nlp", "app": "trainer"},
    }
    assert any(p.endswith("/namespace") for p in read)
    assert not any(p.endswith("/token") for p in read)  # the service account's token stays unread


def test_a_pod_without_kubelet_files_is_named_from_inside_its_container(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    cgroup = f"0::/kubepods.slice/kubepods-pod{UID_}.slice/{SCOPE}\n"
    pdir = proc_tree(proc, 4244, cgroup=cgroup, environ={"HOSTNAME": "jupyter-alice", "PATH": "/usr/bin"})
    podinfo = pdir / "root" / "etc" / "podinfo"
    podinfo.mkdir(parents=True)
    (podinfo / "labels").write_text('team="research"\n')
    owner = resolver(tmp_path, kubelet_dir=None).owner(4244)
    assert owner == {"kind": "k8s", "namespace": None, "pod": "jupyter-alice", "labels": {"team": "research"}}


def test_slurm_job_from_the_environment_of_the_process(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    environ = {
        "SLURM_JOB_ID": "12345",
        "SLURM_JOB_ACCOUNT": "nlp",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_USER": "alice",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    proc_tree(proc, 5001, cgroup="4:memory:/slurm/uid_1000/job_12345/step_0/task_0\n", environ=environ)
    assert resolver(tmp_path).owner(5001) == {
        "kind": "slurm",
        "job_id": "12345",
        "account": "nlp",
        "partition": "gpu",
        "user": "alice",
    }


def test_slurm_job_from_the_cgroup_when_the_environment_is_unreadable(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc_tree(
        proc,
        5002,
        uid=1001,
        cgroup="7:devices:/slurm/uid_1001/job_99/step_0/task_0\n4:memory:/slurm/uid_1001/job_99/step_0/task_0\n",
    )
    proc_tree(proc, 5003, uid=1000, cgroup="0::/system.slice/slurmstepd.scope/job_778/step_batch/user/task_0\n")
    r = resolver(tmp_path)
    assert r.owner(5002) == {"kind": "slurm", "job_id": "99", "account": None, "partition": None, "user": "bob"}
    assert r.owner(5003) == {"kind": "slurm", "job_id": "778", "account": None, "partition": None, "user": "alice"}


def test_anything_else_is_its_unix_user(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc_tree(proc, 6001, uid=1001)
    proc_tree(proc, 6002, uid=4321)  # no passwd entry: the uid itself
    r = resolver(tmp_path)
    assert r.owner(6001) == {"kind": "user", "user": "bob"}
    assert r.owner(6002) == {"kind": "user", "user": "4321"}
    assert r.owner(6003) is None  # gone


def test_a_registered_run_wins_over_its_pod(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc_tree(proc, 4242, cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n", started_s=100.0)
    registry_file(tmp_path / "runs", 4242, BTIME + 100.5)
    owner = resolver(tmp_path).owner(4242)
    assert owner == {
        "kind": "run",
        "project": "llm-pretrain",
        "run_id": "5b0f3e8a-1d2c-4e6f-8a9b-0c1d2e3f4a5b",
        "server_run_id": "0e6a7c1d-2b3f-4a5e-9d8c-7b6a5f4e3d2c",
    }


def test_a_run_in_a_container_is_found_under_its_root_by_its_own_pid(tmp_path: Path) -> None:
    """Host pid 4242 is pid 17 in its container, whose /tmp is its own mount namespace's."""
    proc = tmp_path / "proc"
    pdir = proc_tree(proc, 4242, nspid=[4242, 17], cgroup=f"0::/kubepods/pod{POD_UID}/{CONTAINER_ID}\n")
    registry_file(pdir / "root" / str(tmp_path / "runs").lstrip("/"), 17, BTIME + 101)
    registry_file(tmp_path / "runs", 17, BTIME + 101, run_id="not-this-one")  # another pid 17 on the host's side
    owner = resolver(tmp_path).owner(4242)
    assert owner is not None and owner["run_id"] == "5b0f3e8a-1d2c-4e6f-8a9b-0c1d2e3f4a5b"


def test_a_registry_file_of_an_earlier_process_with_the_same_pid_is_ignored(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc_tree(proc, 4242, uid=1000, started_s=5000.0)  # this process started long after the file
    registry_file(tmp_path / "runs", 4242, BTIME + 100)
    assert resolver(tmp_path).owner(4242) == {"kind": "user", "user": "alice"}


def test_a_run_registered_after_its_process_took_the_gpu_is_seen_at_the_next_interval(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc_tree(proc, 4242, started_s=100.0)
    r = resolver(tmp_path)
    assert r.owner(4242) == {"kind": "user", "user": "alice"}
    registry_file(tmp_path / "runs", 4242, BTIME + 160)
    owner = r.owner(4242)
    assert owner is not None and owner["kind"] == "run"
    (tmp_path / "runs" / "4242.json").unlink()  # the run finished; the process goes on
    assert r.owner(4242) == {"kind": "user", "user": "alice"}


def test_scheduler_identity_is_read_once_per_process_and_again_for_a_reused_pid(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    pdir = proc_tree(proc, 7001, uid=1000, started_s=100.0)
    r = resolver(tmp_path)
    for _ in range(5):
        assert r.owner(7001) == {"kind": "user", "user": "alice"}
    assert r.lookups == 1
    # The process exits and its pid goes to a process of bob's, started later.
    import shutil

    shutil.rmtree(pdir)
    proc_tree(proc, 7001, uid=1001, started_s=900.0)
    assert r.owner(7001) == {"kind": "user", "user": "bob"}
    assert r.lookups == 2


# -- the real /proc ------------------------------------------------------------------------------


def test_a_real_process_on_this_machine_is_named_by_its_real_user() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        r = OwnerResolver(OwnerConfig(proc_root=Path("/proc"), run_dir=Path("/nonexistent-run-dir")))
        owner = r.owner(child.pid)
        expected = pwd.getpwuid(os.getuid()).pw_name
        assert owner is not None
        if owner["kind"] == "user":
            assert owner == {"kind": "user", "user": expected}
        else:  # this machine may itself run inside a Kubernetes pod or a Slurm job
            assert owner["kind"] in ("k8s", "slurm")
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.owner(child.pid) is None


def test_a_run_whose_project_is_not_known_yet_counts_under_its_scheduler_identity(tmp_path: Path) -> None:
    """The server finds a run by its project's slug; until the registration's answer names it,
    the process is its Slurm job (or pod, or user) rather than an owner the server refuses."""
    proc = tmp_path / "proc"
    proc_tree(proc, 4242, cgroup="4:memory:/slurm/uid_1000/job_12345/step_0/task_0\n")
    registry_file(tmp_path / "runs", 4242, BTIME + 100.5)
    record = json.loads((tmp_path / "runs" / "4242.json").read_text())
    record["project"] = None
    (tmp_path / "runs" / "4242.json").write_text(json.dumps(record))
    assert resolver(tmp_path).owner(4242) == {
        "kind": "slurm",
        "job_id": "12345",
        "account": None,
        "partition": None,
        "user": "alice",
    }

"""The node collector's deployment files (deploy/node-collector/) parse, and say what
docs/node-collector.md says: the DaemonSet shares the host's pids, mounts /proc and the kubelet's
pods read-only, runs on the NVIDIA runtime without taking a GPU, asks for small resources; the
systemd unit restarts it and lets it flush; both start it with flags the collector accepts."""

from __future__ import annotations

import argparse
import configparser
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from phantomhub_agent.node import _cli as node_cli

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "node-collector"
DOCS = (ROOT / "docs" / "node-collector.md").read_text()


def node_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="phantomhub-agent")
    node_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def daemonset() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()))
    assert len(docs) == 1
    return dict(docs[0])


def test_the_daemonset_shares_host_pids_and_mounts_proc_and_the_kubelets_pods_read_only() -> None:
    ds = daemonset()
    assert ds["apiVersion"] == "apps/v1" and ds["kind"] == "DaemonSet"
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert spec["hostPID"] is True
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    args = node_args([a.replace("$(NODE_NAME)", "gpu-a-17") for a in container["args"]])
    assert args.command == "node" and args.interval == 15
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    proc = mounts[args.proc_root]
    assert volumes[proc["name"]]["hostPath"]["path"] == "/proc" and proc["readOnly"] is True
    pods = mounts[f"{args.kubelet_dir}/pods"]
    assert volumes[pods["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pods" and pods["readOnly"] is True
    spool = mounts[args.spool]
    assert volumes[spool["name"]]["hostPath"]["path"] == args.spool and not spool.get("readOnly")
    # every other host path is read-only: the collector writes only its spool
    assert all(m.get("readOnly") for path, m in mounts.items() if path != args.spool)
    assert args.hostname == "gpu-a-17" and args.label == ["k8s.node=gpu-a-17"]


def test_the_daemonset_takes_no_gpu_and_asks_for_little() -> None:
    spec = daemonset()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    resources = container["resources"]
    assert resources["requests"] == {"cpu": "10m", "memory": "64Mi"} and resources["limits"]["memory"] == "128Mi"
    assert "nvidia.com/gpu" not in {**resources.get("requests", {}), **resources.get("limits", {})}
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["PHANTOMHUB_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "phantomhub-node-token", "key": "token"}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]["value"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"]["add"]) == {"SYS_PTRACE", "DAC_READ_SEARCH"}
    finish = node_args(container["args"]).finish_timeout
    assert spec["terminationGracePeriodSeconds"] > finish  # the flush at SIGTERM completes


def test_the_systemd_unit_restarts_the_collector_and_lets_it_flush() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((DEPLOY / "phantomhub-node.service").read_text())
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/bin/phantomhub-agent")
    args = node_args(argv[1:])
    assert args.command == "node" and args.interval == 15 and args.proc_root == "/proc"
    assert service["Restart"] == "always" and service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > args.finish_timeout
    assert args.spool.startswith("/var/lib/" + service["StateDirectory"]) and args.spool.startswith(service["ReadWritePaths"])
    assert service["EnvironmentFile"] == "/etc/phantomhub/node.env"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_image_installs_the_agent_with_nvml() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"pip install .*'/src/agent\[gpu\]'", dockerfile)
    assert 'ENTRYPOINT ["phantomhub-agent"]' in dockerfile
    image = daemonset()["spec"]["template"]["spec"]["containers"][0]["image"]
    assert f"-t {image} " in dockerfile


def test_the_docs_show_the_files_as_they_are() -> None:
    for name in ("phantomhub-node.service", "daemonset.yaml"):
        text = (DEPLOY / name).read_text()
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        assert body.strip() in DOCS, f"docs/node-collector.md does not show deploy/node-collector/{name} as it is"

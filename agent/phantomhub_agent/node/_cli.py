"""The ``node`` subcommand of ``phantomhub-agent``: its flags and how they become a collector."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from .._config import settings_from
from .._registry import registry_dir
from ._collector import Collector, NodeSender, collector_version, default_spool_dir, install_signal_handlers
from ._host import node_description
from ._owners import OwnerConfig, OwnerResolver
from ._sources import DcgmSource, NvmlSource

SOURCES = ("nvml", "dcgm")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "node",
        help="run the node collector: sample this host's GPUs and their holders every interval",
        description="Samples every GPU of this host (NVML or a dcgm-exporter page), names the owner of each "
        "process holding one, and sends one request per interval to POST /api/v1/nodes/samples.",
    )
    p.add_argument("--server", default=None, help="server URL (default: PHANTOMHUB_SERVER)")
    p.add_argument("--token", default=None, help="a node token (default: PHANTOMHUB_TOKEN)")
    p.add_argument(
        "--token-file",
        default=None,
        help="a file holding the node token, re-read when the server refuses it (default: PHANTOMHUB_TOKEN_FILE)",
    )
    p.add_argument("--interval", type=int, default=15, help="whole seconds between samples (default 15)")
    p.add_argument("--source", choices=SOURCES, default="nvml", help="where readings come from (default nvml)")
    p.add_argument("--dcgm-url", default=None, help="dcgm-exporter page, e.g. http://127.0.0.1:9400/metrics")
    p.add_argument("--spool", default=None, help="spool directory for undelivered requests")
    p.add_argument("--once", action="store_true", help="take one sample, deliver it, exit (0 when delivered)")
    p.add_argument("--print", dest="print_payload", action="store_true", help="print each request body as a JSON line")
    p.add_argument("--proc-root", default="/proc", help="the host's /proc (default /proc; /host/proc in a container)")
    p.add_argument("--run-dir", default=None, help="the run registry (default: PHANTOMHUB_RUN_DIR or /tmp/phantomhub-runs)")
    p.add_argument("--kubelet-dir", default="/var/lib/kubelet", help="the kubelet's root, for pod directories")
    p.add_argument("--pods-file", default=None, help="the kubelet's pods as JSON (a PodList), re-read when it changes")
    p.add_argument("--labels-path", default="/etc/podinfo/labels", help="a pod's downward-API labels file, inside its container")
    p.add_argument("--hostname", default=None, help="the node's name (default: the dcgm page's Hostname, else this host's)")
    p.add_argument("--provider", default=None, help="cloud provider (aws, gcp, azure, ...); detected from DMI when possible")
    p.add_argument("--region", default=None, help="cloud region, e.g. us-east-1")
    p.add_argument("--instance-type", default=None, help="e.g. p5.48xlarge; detected on EC2")
    p.add_argument("--resource-id", default=None, help="the billing resource id, e.g. i-0abc123; detected on EC2")
    p.add_argument("--gpu-model", default=None, help="GPU model (default: NVML's or the page's device name)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="a node label (repeatable)")
    p.add_argument("--finish-timeout", type=float, default=5.0, help="seconds to flush at SIGTERM (default 5)")
    p.add_argument("--debug", action="store_true", help="raise internal errors instead of counting them")


def _labels(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--label: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if not 1 <= args.interval <= 3600:
        parser.error("--interval: must be between 1 and 3600 seconds")
    if args.source == "dcgm" and not args.dcgm_url:
        parser.error("--source dcgm needs --dcgm-url (e.g. http://127.0.0.1:9400/metrics)")
    server = args.server or os.environ.get("PHANTOMHUB_SERVER")
    token = args.token or os.environ.get("PHANTOMHUB_TOKEN")
    token_file = args.token_file or os.environ.get("PHANTOMHUB_TOKEN_FILE") or None
    if not args.print_payload and not server:
        parser.error("no server: pass --server or set PHANTOMHUB_SERVER (or --print to only print)")
    if server and not server.startswith(("http://", "https://")):
        parser.error(f"--server: must be an http(s) URL, not {server!r}")
    if server and not token and not token_file:
        parser.error("no token: pass --token or --token-file, or set PHANTOMHUB_TOKEN or PHANTOMHUB_TOKEN_FILE (a node token)")
    labels = _labels(parser, args.label)
    try:
        source = DcgmSource(args.dcgm_url) if args.source == "dcgm" else NvmlSource()
    except ImportError:
        print("phantomhub-agent node: NVML needs nvidia-ml-py: pip install 'phantomhub-agent[gpu]'", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"phantomhub-agent node: cannot start the {args.source} source: {exc}", file=sys.stderr)
        return 2
    resolver = OwnerResolver(
        OwnerConfig(
            proc_root=Path(args.proc_root),
            run_dir=Path(args.run_dir) if args.run_dir else registry_dir(),
            kubelet_dir=Path(args.kubelet_dir) if args.kubelet_dir else None,
            pods_file=Path(args.pods_file) if args.pods_file else None,
            labels_path=args.labels_path,
        )
    )
    hostname = args.hostname
    if hostname is None and args.source == "dcgm":
        with contextlib.suppress(Exception):  # an unreadable page is reported by the loop
            source.read()  # the page's Hostname label names the node it describes
        hostname = source.hostname
    given = {
        "provider": args.provider,
        "region": args.region,
        "instance_type": args.instance_type,
        "resource_id": args.resource_id,
    }
    node = node_description(hostname=hostname, given=given)
    if args.gpu_model:
        node["gpu_model"] = args.gpu_model
    node.update(labels=labels, collector_version=collector_version(), source=args.source)
    sender = None
    if server:
        settings = settings_from(
            {
                "server": server,
                "token": token,
                "token_file": Path(token_file) if token_file else None,
                "spool_dir": Path(args.spool) if args.spool else default_spool_dir(),
                "flush_interval_s": args.interval,
                "system_interval_s": 0.0,
                "finish_timeout_s": args.finish_timeout,
                "debug": args.debug,
            }
        )
        sender = NodeSender(settings, node["hostname"])
    stop = threading.Event()
    install_signal_handlers(stop)
    collector = Collector(
        source=source,
        resolver=resolver,
        node=node,
        interval_s=args.interval,
        sender=sender,
        out=sys.stdout if args.print_payload else None,
        debug=args.debug,
    )
    return collector.run(once=args.once, stop=stop, finish_timeout_s=args.finish_timeout)

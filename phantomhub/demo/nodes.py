"""Demo GPU nodes, as a node collector would report them, and a synthetic FOCUS invoice for them.

Three 8-GPU H100 nodes (aws us-east-1) whose GPUs are instrumented by demo runs, busy without an
agent (Kubernetes pods, Slurm jobs), idle-held (a notebook holding memory, a stuck job) and empty.
`nodes_seed` posts their samples through the real HTTP API with a node token, from where the last
seeding stopped (at most HISTORY back) up to now, so each `make run` brings them up to date; it saves
attribution rules for their holders and imports a synthetic FOCUS invoice billing every node for
whole days (the collectors see less: that is the invoice's "unexplained").

Everything here is synthetic: generated numbers for the demo, not a real cloud bill.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from phantomhub.csvfile import csv_text

NS = 10**9
GIB = 2**30
INTERVAL_S = 15
HISTORY = timedelta(days=1)  # posted on the first seeding
SAMPLES_PER_REQUEST = 240  # one hour of 15 s samples: what a collector catching up from its spool sends
USD_PER_GPU_HOUR_BILLED = Decimal("7.15")  # the synthetic invoice's rate (the example price book says 6.88)

OWNERS: dict[str, dict[str, Any]] = {
    "run": {"kind": "run", "project": "llm-pretrain", "run_id": "demo-node-run", "server_run_id": None},
    "pod": {"kind": "k8s", "namespace": "vision-batch", "pod": "augment-worker-3", "labels": {"team": "vision"}},
    "notebook": {"kind": "k8s", "namespace": "research-notebooks", "pod": "jupyter-alice", "labels": {}},
    "asr": {"kind": "slurm", "job_id": "88412", "account": "speech", "partition": "gpu", "user": "bob"},
    "stuck": {"kind": "slurm", "job_id": "90177", "account": "recsys", "partition": "gpu", "user": "carol"},
    "user": {"kind": "user", "user": "dave"},
}
# Per node and GPU: what holds it, at what utilization. `None`: empty.
LAYOUT: dict[str, Sequence[tuple[str | None, float]]] = {
    "gpu-demo-01": [("run", 88.0)] * 4 + [("pod", 71.0)] * 4,
    "gpu-demo-02": [("notebook", 0.0)] * 2 + [("asr", 64.0)] * 4 + [(None, 0.0)] * 2,
    "gpu-demo-03": [("stuck", 0.0)] * 3 + [("user", 35.0)] + [(None, 0.0)] * 4,
}
RULES = [
    {"match": "k8s_namespace", "pattern": "research-*", "team": "research"},
    {"match": "k8s_label", "key": "team", "pattern": "vision", "team": "vision"},
    {"match": "slurm_account", "pattern": "speech", "project": "asr"},
    {"match": "slurm_account", "pattern": "recsys", "team": "recsys"},
]


def node_meta(hostname: str) -> dict[str, Any]:
    return {
        "hostname": hostname, "provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge",
        "resource_id": f"i-0demo{hostname[-2:]}", "gpu_model": "H100-SXM", "gpu_count": 8,
        "labels": {"k8s.node": hostname}, "collector_version": "demo", "source": "nvml",
    }  # fmt: skip


def node_body(hostname: str, times_ns: list[int]) -> dict[str, Any]:
    """One collector request: every GPU of the node at each time, and the processes holding them."""
    owner_keys = sorted({key for key, _ in LAYOUT[hostname] if key})
    index = {key: i for i, key in enumerate(owner_keys)}
    gpus: dict[str, list[Any]] = {
        k: []
        for k in ("t_ns", "gpu_index", "gpu_uuid", "util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "sm_clock_mhz")
    }
    procs: dict[str, list[Any]] = {k: [] for k in ("t_ns", "gpu_index", "pid", "mem_used_bytes", "owner")}
    for t in times_ns:
        wobble = (t // (INTERVAL_S * NS)) % 7  # a little variation, deterministic
        for g, (key, util) in enumerate(LAYOUT[hostname]):
            busy = util > 0
            mem = (60 if busy else 22) * GIB if key else 4 * 2**20
            row = (
                t,
                g,
                f"GPU-{hostname}-{g}",
                util + wobble if busy else 0.0,
                mem,
                80 * GIB,
                650.0 if busy else 70.0,
                1980.0 if busy else 345.0,
            )
            for name, value in zip(gpus, row, strict=True):
                gpus[name].append(value)
            if key:
                for name, value in zip(procs, (t, g, 4000 + 10 * g + index[key], mem, index[key]), strict=True):
                    procs[name].append(value)
    return {
        "node": node_meta(hostname), "interval_s": INTERVAL_S, "gpus": gpus, "processes": procs,
        "owners": [OWNERS[k] for k in owner_keys],
    }  # fmt: skip


def _aligned(moment: datetime) -> int:
    t = int(moment.timestamp())
    return (t - t % INTERVAL_S) * NS


def sample_times(last_ns: int | None, now: datetime, history: timedelta = HISTORY) -> list[int]:
    """15 s sample times after `last_ns` (or `history` back) up to now."""
    end = _aligned(now)
    start = max(last_ns + INTERVAL_S * NS if last_ns else 0, _aligned(now - history))
    return list(range(start, end + 1, INTERVAL_S * NS))


def focus_invoice(days: list[date]) -> str:
    """A synthetic FOCUS CSV: each demo node billed for whole days at USD_PER_GPU_HOUR_BILLED."""
    columns = ["BillingAccountId", "BillingCurrency", "BilledCost", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd",
               "ResourceId", "ServiceName", "SkuId", "Tags"]  # fmt: skip
    rows: list[list[Any]] = []

    def iso(moment: datetime) -> str:
        return moment.isoformat().replace("+00:00", "Z")

    for day in days:
        start = datetime.combine(day, time(0), tzinfo=UTC)
        period = [iso(start), iso(start + timedelta(days=1))]
        for hostname in LAYOUT:
            meta = node_meta(hostname)
            cost = USD_PER_GPU_HOUR_BILLED * meta["gpu_count"] * 24
            tags = json.dumps({"phantomhub-node": hostname})
            ec2 = ["Amazon Elastic Compute Cloud", "p5.48xlarge-OnDemand", tags]
            rows.append(["demo-account", "USD", f"{cost:.2f}", "Usage", *period, meta["resource_id"], *ec2])
        rows.append(
            ["demo-account", "USD", "41.30", "Usage", *period, "vol-0demo-checkpoints", "Amazon Elastic Block Store", "gp3", "{}"]
        )
    return csv_text(columns, rows)


def nodes_seed(address: str, say: Callable[[str], None], now: datetime | None = None, history: timedelta = HISTORY) -> None:
    """Post the demo nodes' samples through the API at `address`, save the attribution rules,
    derive the node-days and import the synthetic invoice of the days they cover."""
    from phantomhub.demo.post import Poster
    from phantomhub.fleet.api import rules_from_body
    from phantomhub.fleet.derive import fleet_derive_pending
    from phantomhub.fleet.focus import focus_import
    from phantomhub.fleet.models import GpuSample, Node
    from phantomhub.fleet.services import node_token_create, rules_replace

    now = now or datetime.now(UTC)
    poster = Poster(address, node_token_create(name="demo nodes", hostnames=list(LAYOUT)).raw)
    stored = 0
    days: set[date] = set()
    for hostname in LAYOUT:
        node = Node.objects.filter(hostname=hostname).first()
        last = GpuSample.objects.filter(node=node).order_by("-t_ns").values_list("t_ns", flat=True).first() if node else None
        times = sample_times(last, now, history)
        for i in range(0, len(times), SAMPLES_PER_REQUEST):
            answer = poster.post("/api/v1/nodes/samples", node_body(hostname, times[i : i + SAMPLES_PER_REQUEST]))
            stored += answer["stored"]["gpu"]
        days.update(datetime.fromtimestamp(t // NS, tz=UTC).date() for t in times[:: 240 * 4])
        if times:
            days.add(datetime.fromtimestamp(times[-1] // NS, tz=UTC).date())
    say(f"demo: {stored:,} GPU samples from {len(LAYOUT)} nodes posted through the node API")
    try:
        rules_replace(rules=rules_from_body({"rules": RULES}))
    except Exception as exc:  # a team or project of the rules is missing: the demo runs were skipped
        say(f"demo: attribution rules not saved ({exc})")
    while fleet_derive_pending():
        pass
    result = focus_import(text=focus_invoice(sorted(days)), filename="demo-focus-synthetic.csv")
    if result.created:
        say(f"demo: synthetic FOCUS invoice imported: {result.lines_new} new lines, {result.matched} matched to nodes")
    elif result.errors:  # e.g. PHANTOMHUB_CURRENCY is not the synthetic invoice's USD
        say(f"demo: synthetic FOCUS invoice not imported ({result.errors[0]})")

"""The dcgm-exporter source: a recorded /metrics page (data/dcgm-exporter-h100x4.prom, in
dcgm-exporter's format: HELP/TYPE lines, gpu/UUID/pci_bus_id/device/modelName/Hostname labels,
and the container/namespace/pod labels its Kubernetes mapping adds), parsed and served over HTTP."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phantomhub_agent.node import DcgmSource, parse_prometheus, payload_build, readings_from_dcgm

PAGE = (Path(__file__).parent / "data" / "dcgm-exporter-h100x4.prom").read_text()
MIB = 1024**2


def test_the_exposition_format_is_parsed_with_its_labels_and_comments_skipped() -> None:
    samples = parse_prometheus(PAGE)
    assert len(samples) == 19 * 4  # 19 fields for each of 4 GPUs; HELP and TYPE lines are no samples
    name, labels, value = samples[0]
    assert name == "DCGM_FI_DEV_SM_CLOCK" and value == 1980.0
    assert labels == {
        "gpu": "0",
        "UUID": "GPU-5f2c1a7e-93b4-4d0e-8c61-2e7a9b3f0c11",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "gpu-a-17",
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
        "container": "trainer",
        "namespace": "ml-team",
        "pod": "train-llm-0",
    }
    escaped = parse_prometheus('m{a="x \\"y\\" \\\\ z",b=""} 1e3 1700000000000\n')
    assert escaped == [("m", {"a": 'x "y" \\ z', "b": ""}, 1000.0)]


def test_the_page_becomes_four_gpus_with_bytes_watts_and_their_pods() -> None:
    gpus, hostname = readings_from_dcgm(PAGE)
    assert hostname == "gpu-a-17"
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    g0 = gpus[0]
    assert (g0.util_pct, g0.power_w, g0.sm_clock_mhz, g0.sm_active) == (97.0, 612.514, 1980.0, 0.912034)
    assert g0.mem_used_bytes == 71234 * MIB
    assert g0.mem_total_bytes == (71234 + 9735 + 511) * MIB  # used + free + reserved
    assert g0.model == "NVIDIA H100 80GB HBM3" and g0.uuid == "GPU-5f2c1a7e-93b4-4d0e-8c61-2e7a9b3f0c11"
    assert [(h.pid, h.mem_used_bytes, h.owner) for h in g0.holders] == [
        (0, 71234 * MIB, {"kind": "k8s", "namespace": "ml-team", "pod": "train-llm-0", "labels": {}})
    ]
    assert gpus[1].util_pct == 0.0 and gpus[1].mem_used_bytes == 38120 * MIB
    assert gpus[1].holders[0].owner == {"kind": "k8s", "namespace": "notebooks", "pod": "jupyter-alice", "labels": {}}
    assert gpus[2].holders == [] and gpus[2].mem_used_bytes == 0  # no pod: nothing holds it
    assert gpus[3].holders[0].owner is not None and gpus[3].holders[0].owner["pod"] == "infer-7d9f8c6b5-x2lqp"


def test_a_page_without_kubernetes_mapping_or_fields_gives_nulls_not_zeros() -> None:
    page = (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"} 12\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-x",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"} NaN\n'
    )
    gpus, _ = readings_from_dcgm(page)
    assert len(gpus) == 1
    g = gpus[0]
    assert g.util_pct == 12.0
    assert (g.power_w, g.mem_used_bytes, g.mem_total_bytes, g.sm_clock_mhz, g.sm_active) == (None, None, None, None, None)
    assert g.holders == []


@pytest.fixture
def exporter() -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"page": PAGE, "hits": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            state["hits"] += 1
            body = state["page"].encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    yield state
    server.shutdown()
    server.server_close()


def test_the_source_scrapes_the_exporter_each_interval(exporter: dict[str, Any]) -> None:
    source = DcgmSource(exporter["url"])
    first = source.read()
    assert source.hostname == "gpu-a-17" and len(first) == 4
    # The inference pod on GPU 3 gets busier.
    exporter["page"] = re.sub(r'^(DCGM_FI_DEV_GPU_UTIL\{gpu="3",.*\}) 43$', r"\1 64", PAGE, flags=re.M)
    second = source.read()
    assert exporter["hits"] == 2
    assert first[3].util_pct == 43.0 and second[3].util_pct == 64.0
    body = payload_build(
        node={"hostname": source.hostname, "source": "dcgm"},
        interval_s=15,
        t_ns=10**18,
        readings=second,
        owner_of=lambda pid: None,
    )
    assert body["processes"]["pid"] == [0, 0, 0] and body["processes"]["gpu_index"] == [0, 1, 3]
    assert [body["owners"][i]["pod"] for i in body["processes"]["owner"]] == [
        "train-llm-0",
        "jupyter-alice",
        "infer-7d9f8c6b5-x2lqp",
    ]
    assert body["gpus"]["sm_active"] == [0.912034, 0.0, 0.0, 0.382511]  # the server classifies with it
    assert "counters" not in body  # none given: a --print run without a sender


def test_an_unreachable_exporter_raises_for_the_loop_to_count() -> None:
    source = DcgmSource("http://127.0.0.1:9/metrics", timeout_s=1.0)
    with pytest.raises(OSError):
        source.read()
    with pytest.raises(ValueError, match="dcgm-url"):
        DcgmSource("127.0.0.1:9400/metrics")

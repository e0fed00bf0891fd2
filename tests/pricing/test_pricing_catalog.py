"""The GPU catalog: device names resolve exactly, never by guess; peaks are dense and sane."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from phantomhub.pricing.catalog import (
    DTYPES,
    EXAMPLE_PRICES_PATH,
    GPUS_PATH,
    dtype_normalize,
    example_prices,
    gpu_catalog,
    gpu_get,
    gpu_resolve,
    peak_flops,
)

REQUIRED_KEYS = {
    "V100-SXM2-16GB",
    "V100-SXM2-32GB",
    "T4",
    "A10G",
    "L4",
    "L40S",
    "A100-40GB",
    "A100-80GB",
    "H100-SXM",
    "H100-PCIE",
    "H100-NVL",
    "H200",
    "B200",
    "MI250X",
    "MI300X",
}


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIE"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIE"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB-PCIE"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("Tesla V100-PCIE-32GB", "V100-PCIE-32GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("NVIDIA B200", "B200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300X VF", "MI300X"),
        ("AMD Instinct MI250X", "MI250X"),
        ("  nvidia   h100 80gb hbm3 ", "H100-SXM"),
        ("h100-sxm", "H100-SXM"),
        ("mi300x", "MI300X"),
        ("A100-80GB", "A100-80GB"),
    ],
)
def test_reported_names_and_keys_resolve_to_the_right_entry(reported, key):
    spec = gpu_resolve(reported)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize(
    "reported",
    [
        "NVIDIA GeForce RTX 4090",
        "NVIDIA H100",  # which H100? SXM, PCIe and NVL differ by 30%
        "AMD Instinct MI250X/MI250",  # the MI250 has fewer compute units
        "NVIDIA L40",
        "NVIDIA GH200 480GB",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "",
        "cpu",
    ],
)
def test_unknown_or_ambiguous_names_resolve_to_none(reported):
    assert gpu_resolve(reported) is None


def test_every_required_gpu_is_in_the_catalog():
    assert {s.key for s in gpu_catalog()} >= REQUIRED_KEYS


def test_every_pattern_matches_only_its_own_entry():
    # A device name that two entries claim would be a guess; gpu_resolve refuses it, so every
    # entry's own key and display name must resolve to itself.
    for spec in gpu_catalog():
        assert gpu_resolve(spec.key) is spec
        assert gpu_get(spec.key.lower()) is spec


@pytest.mark.parametrize("spec", gpu_catalog(), ids=lambda s: s.key)
def test_dense_peaks_are_sane(spec):
    peaks = spec.peak_tflops
    assert set(peaks) <= set(DTYPES)
    assert "fp32" in peaks and ("fp16" in peaks or "bf16" in peaks)
    for low in ("bf16", "fp16", "tf32"):
        if low in peaks:
            assert peaks[low] >= peaks["fp32"]
    if "bf16" in peaks and "tf32" in peaks:
        assert peaks["bf16"] == pytest.approx(2 * peaks["tf32"], rel=0.02)
    if "fp8" in peaks:
        assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.02)  # L40S sheet: 733 vs 362.05
    assert 1 * 2**30 < spec.memory_bytes <= 256 * 2**30
    assert spec.sources and all(spec.sources)


def test_headline_dense_figures_match_the_datasheets():
    assert peak_flops(gpu_resolve("NVIDIA H100 80GB HBM3"), "bf16") == pytest.approx(989.4e12)
    assert peak_flops(gpu_resolve("NVIDIA A100-SXM4-80GB"), "bfloat16") == pytest.approx(312e12)
    assert peak_flops(gpu_resolve("NVIDIA H100 PCIe"), "fp16") == pytest.approx(756.5e12)
    assert peak_flops(gpu_resolve("NVIDIA B200"), "bf16") == pytest.approx(2.25e15)
    assert peak_flops(gpu_resolve("AMD Instinct MI300X"), "bf16") == pytest.approx(1307.4e12)
    assert peak_flops(gpu_resolve("Tesla T4"), "float16") == pytest.approx(65e12)
    assert gpu_resolve("NVIDIA H200").memory_bytes == 141 * 2**30


def test_dtypes_without_a_hardware_path_have_no_peak():
    assert peak_flops(gpu_get("V100-SXM2-16GB"), "bf16") is None
    assert peak_flops(gpu_get("A100-80GB"), "fp8") is None
    assert peak_flops(gpu_get("H100-SXM"), "fp4") is None


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("bfloat16", "bf16"),
        ("torch.bfloat16", "bf16"),
        ("amp_bf16", "bf16"),
        ("bf16-mixed", "bf16"),
        ("float16", "fp16"),
        ("16-mixed", "fp16"),
        ("half", "fp16"),
        ("float32", "fp32"),
        ("32-true", "fp32"),
        ("TF32", "tf32"),
        ("float8_e4m3fn", "fp8"),
        ("int8", "int8"),
        ("fp4", None),
        ("whatever", None),
    ],
)
def test_dtype_aliases(alias, canonical):
    assert dtype_normalize(alias) == canonical


def test_example_prices_are_flagged_and_name_catalog_gpus():
    raw = json.loads(EXAMPLE_PRICES_PATH.read_text())
    assert raw["example"] is True
    rows = example_prices()
    assert rows and all(r.example for r in rows)
    keys = {s.key for s in gpu_catalog()}
    for row in rows:
        assert row.gpu in keys
        assert row.tier in ("on_demand", "spot", "reserved")
        assert Decimal("0.05") < row.usd_per_gpu_hour < Decimal("30")
    assert {r.gpu for r in rows} >= {"H100-SXM", "A100-80GB", "L4", "T4", "H200", "B200", "MI300X"}


def test_catalog_file_keys_are_unique_case_insensitively():
    data = json.loads(GPUS_PATH.read_text())
    keys = [g["key"].lower() for g in data["gpus"]]
    assert len(keys) == len(set(keys))

"""GPU catalog: memory and DENSE peak FLOP/s per dtype, and the example price table.

Pure Python (no Django): the data lives in ``gpus.json`` and ``example_prices.json`` beside this
module, so the Django side can seed its tables from the same files the waste model is tested with.

Peak figures are dense (no 2:4 structured sparsity). Vendor sheets usually quote the sparse figure
in the headline (e.g. H100 SXM "1,979 TFLOPS bf16"); MFU against a sparse peak would halve every
run's reported efficiency, so the table stores the dense value (989.4) and cites the sheet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

_HERE = Path(__file__).resolve().parent
GPUS_PATH = _HERE / "gpus.json"
EXAMPLE_PRICES_PATH = _HERE / "example_prices.json"

DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")

# Names seen in the wild for each dtype: torch dtypes, AMP settings, Lightning precision strings,
# Transformer Engine's fp8 formats. Mixed precision maps to the dtype its matmuls run in, because
# that is the peak the tensor cores can reach.
_DTYPE_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(("fp32", "float32", "float", "f32", "32", "32-true", "single"), "fp32"),
        **dict.fromkeys(("tf32", "tensorfloat32", "tensorfloat-32", "xf32"), "tf32"),
        **dict.fromkeys(
            (
                "bf16",
                "bfloat16",
                "amp_bf16",
                "amp-bf16",
                "bf16-mixed",
                "bf16-true",
                "bf16_mixed",
                "mixed_bf16",
            ),
            "bf16",
        ),
        **dict.fromkeys(
            (
                "fp16",
                "float16",
                "half",
                "f16",
                "16",
                "amp",
                "amp_fp16",
                "amp-fp16",
                "16-mixed",
                "16-true",
                "fp16-mixed",
                "mixed_fp16",
            ),
            "fp16",
        ),
        **dict.fromkeys(
            (
                "fp8",
                "float8",
                "float8_e4m3fn",
                "float8_e5m2",
                "float8_e4m3fnuz",
                "float8_e5m2fnuz",
                "e4m3",
                "e5m2",
                "fp8-hybrid",
                "transformer-engine",
            ),
            "fp8",
        ),
        **dict.fromkeys(("int8", "i8", "qint8"), "int8"),
    }
)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as a training process sees it (one device)."""

    key: str
    vendor: str
    name: str
    memory_bytes: int
    # Dense TFLOP/s by canonical dtype; a dtype missing here has no hardware path on this GPU.
    peak_tflops: Mapping[str, float]
    patterns: tuple[str, ...]
    sources: tuple[str, ...]
    notes: str = ""

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class ExamplePrice:
    """One row of the example price table (seed data, never a real quote)."""

    provider: str
    offering: str
    gpu: str
    tier: str
    region: str
    usd_per_gpu_hour: Decimal
    basis: str
    example: bool


def dtype_normalize(dtype: str) -> str | None:
    """Canonical dtype name ("fp32", "tf32", "bf16", "fp16", "fp8", "int8") or None if unknown."""
    text = dtype.strip().lower()
    if text.startswith("torch."):
        text = text[len("torch.") :]
    return _DTYPE_ALIASES.get(text)


def _normalize_name(name: str) -> str:
    # Drivers and tools differ in case, padding and repeated spaces, never in the model tokens.
    return re.sub(r"\s+", " ", name.strip().lower())


def _spec_from_json(raw: Mapping[str, Any]) -> GpuSpec:
    peaks = {str(k): float(v) for k, v in raw["peak_tflops"].items()}
    unknown = set(peaks) - set(DTYPES)
    if unknown:
        raise ValueError(f"{raw['key']}: unknown dtype(s) {sorted(unknown)} in gpus.json")
    return GpuSpec(
        key=str(raw["key"]),
        vendor=str(raw["vendor"]),
        name=str(raw["name"]),
        memory_bytes=int(raw["memory_bytes"]),
        peak_tflops=MappingProxyType(peaks),
        patterns=tuple(str(p) for p in raw["patterns"]),
        sources=tuple(str(s) for s in raw["sources"]),
        notes=str(raw.get("notes", "")),
    )


@cache
def gpu_catalog() -> tuple[GpuSpec, ...]:
    """Every GPU in ``gpus.json``, in file order."""
    with GPUS_PATH.open(encoding="utf-8") as fh:
        data = json.load(fh)
    specs = tuple(_spec_from_json(raw) for raw in data["gpus"])
    keys = [s.key.lower() for s in specs]
    if len(set(keys)) != len(keys):
        raise ValueError("gpus.json: duplicate keys")
    return specs


@cache
def _compiled() -> tuple[tuple[GpuSpec, tuple[re.Pattern[str], ...]], ...]:
    return tuple((spec, tuple(re.compile(p) for p in spec.patterns)) for spec in gpu_catalog())


def gpu_get(key: str) -> GpuSpec | None:
    """The catalog entry with this canonical key (case-insensitive), or None."""
    wanted = key.strip().lower()
    for spec in gpu_catalog():
        if spec.key.lower() == wanted:
            return spec
    return None


def gpu_resolve(name: str) -> GpuSpec | None:
    """Map a device name (``torch.cuda.get_device_name()``, nvidia-smi) or a canonical key to a spec.

    Patterns must match the WHOLE normalized name and exactly one entry must match: an unknown or
    ambiguous name returns None rather than a guess, because a wrong peak silently skews every MFU
    and dollar-of-inefficiency figure downstream.
    """
    by_key = gpu_get(name)
    if by_key is not None:
        return by_key
    normalized = _normalize_name(name)
    matches = [spec for spec, pats in _compiled() if any(p.fullmatch(normalized) for p in pats)]
    return matches[0] if len(matches) == 1 else None


def peak_flops(spec: GpuSpec, dtype: str) -> float | None:
    """Dense peak FLOP/s of one device of ``spec`` at ``dtype``; None if unknown or unsupported."""
    canonical = dtype_normalize(dtype)
    if canonical is None:
        return None
    tflops = spec.peak_tflops.get(canonical)
    return None if tflops is None else tflops * 1e12


@cache
def example_prices() -> tuple[ExamplePrice, ...]:
    """The example price table (flagged ``example``; for seeding, never for real invoices)."""
    with EXAMPLE_PRICES_PATH.open(encoding="utf-8") as fh:
        data = json.load(fh)
    return tuple(
        ExamplePrice(
            provider=str(row["provider"]),
            offering=str(row["offering"]),
            gpu=str(row["gpu"]),
            tier=str(row["tier"]),
            region=str(row["region"]),
            usd_per_gpu_hour=Decimal(str(row["usd_per_gpu_hour"])),
            basis=str(row["basis"]),
            example=bool(row.get("example", data.get("example", True))),
        )
        for row in data["prices"]
    )

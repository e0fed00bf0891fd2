"""The node's own description: hostname, cloud provider, instance type and id.

Given flags win. Otherwise the machine's DMI tables (``/sys/class/dmi/id``, no network) tell the
cloud: an EC2 Nitro instance names its instance type in ``product_name`` and its instance id in
``board_asset_tag``; GCE and Azure name themselves in ``product_name``/``sys_vendor``. The region
is never guessed: pass ``--region`` (or the server prices by the provider's default).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

DMI_ROOT = Path("/sys/class/dmi/id")


def _dmi(root: Path, name: str) -> str | None:
    try:
        value = (root / name).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return value or None


def cloud_from_dmi(root: Path = DMI_ROOT) -> dict[str, str]:
    vendor = (_dmi(root, "sys_vendor") or "").lower()
    product = _dmi(root, "product_name") or ""
    out: dict[str, str] = {}
    if "amazon" in vendor:
        out["provider"] = "aws"
        if product and product.lower() not in ("not specified", "none"):
            out["instance_type"] = product
        tag = _dmi(root, "board_asset_tag") or ""
        if tag.startswith("i-"):
            out["resource_id"] = tag
    elif "google" in vendor or product == "Google Compute Engine":
        out["provider"] = "gcp"
    elif "microsoft" in vendor and "virtual machine" in product.lower():
        out["provider"] = "azure"
    return out


def node_description(
    *,
    hostname: str | None,
    given: dict[str, Any],
    dmi_root: Path = DMI_ROOT,
) -> dict[str, Any]:
    """The ``node`` object of a request, without its per-sample parts (gpu_model, gpu_count)."""
    node: dict[str, Any] = {"hostname": hostname or socket.gethostname()}
    detected = cloud_from_dmi(dmi_root)
    for key in ("provider", "region", "instance_type", "resource_id"):
        value = given.get(key) or detected.get(key)
        if value:
            node[key] = value
    return node

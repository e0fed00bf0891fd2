"""The node's description: flags first, then the machine's DMI tables (laid out as the kernel
exposes them under /sys/class/dmi/id), never a network call."""

from __future__ import annotations

from pathlib import Path

from phantomhub_agent.node._host import cloud_from_dmi, node_description


def dmi(tmp_path: Path, **files: str) -> Path:
    root = tmp_path / "dmi"
    root.mkdir(parents=True)
    for name, value in files.items():
        (root / name).write_text(value + "\n")
    return root


def test_an_ec2_instance_names_its_type_and_id_in_dmi(tmp_path: Path) -> None:
    root = dmi(tmp_path, sys_vendor="Amazon EC2", product_name="p5.48xlarge", board_asset_tag="i-0abc1234def567890")
    assert cloud_from_dmi(root) == {"provider": "aws", "instance_type": "p5.48xlarge", "resource_id": "i-0abc1234def567890"}


def test_gce_and_azure_are_named_and_bare_metal_is_not_guessed(tmp_path: Path) -> None:
    assert cloud_from_dmi(dmi(tmp_path / "g", sys_vendor="Google", product_name="Google Compute Engine")) == {"provider": "gcp"}
    azure = dmi(tmp_path / "a", sys_vendor="Microsoft Corporation", product_name="Virtual Machine")
    assert cloud_from_dmi(azure) == {"provider": "azure"}
    assert cloud_from_dmi(dmi(tmp_path / "m", sys_vendor="Supermicro", product_name="SYS-821GE-TNHR")) == {}
    assert cloud_from_dmi(tmp_path / "missing") == {}


def test_flags_win_over_what_dmi_says(tmp_path: Path) -> None:
    root = dmi(tmp_path, sys_vendor="Amazon EC2", product_name="p5.48xlarge", board_asset_tag="i-0abc1234def567890")
    given = {"provider": None, "region": "us-east-1", "instance_type": "p4d.24xlarge", "resource_id": None}
    node = node_description(hostname="gpu-a-17", given=given, dmi_root=root)
    assert node == {
        "hostname": "gpu-a-17",
        "provider": "aws",
        "region": "us-east-1",
        "instance_type": "p4d.24xlarge",
        "resource_id": "i-0abc1234def567890",
    }

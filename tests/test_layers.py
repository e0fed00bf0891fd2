"""What the import contract (.importlinter, run by `make lint`) cannot say: no module imports a
private name (``_x``) of another app or top-level module (docs/architecture.md, "Layers")."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "phantomhub"


def _owner(module: str) -> str:
    """The app (phantomhub.<app>) or top-level module a dotted name belongs to."""
    return ".".join(module.split(".")[:2])


def _private_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phantomhub"):
                for alias in node.names:
                    if alias.name.startswith("_") and _owner(node.module) != _owner(module):
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_apps_private_names() -> None:
    assert _private_imports() == []


def test_the_check_sees_a_private_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = tmp_path / "phantomhub" / "demo"
    app.mkdir(parents=True)
    (app / "x.py").write_text("from phantomhub.fleet.api import _rules\nfrom phantomhub.demo.post import _ok\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "phantomhub")
    assert _private_imports() == ["phantomhub/demo/x.py:1 phantomhub.fleet.api._rules"]

"""The distribution's promises: a stdlib-only core, a console script, a GPU check that skips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import REPO, agent_cli


def test_the_core_runs_without_importing_torch_psutil_or_django(tmp_path: Path) -> None:
    code = (
        "import sys, phantomhub_agent as pa\n"
        f"run = pa.init(mode='offline', spool_dir={str(tmp_path)!r}, debug=True, system_interval_s=0)\n"
        "for i in range(3):\n"
        "    with run.step():\n"
        "        with run.stage('forward'): pass\n"
        "run.finish()\n"
        "print(sorted(m for m in ('torch', 'django', 'numpy', 'pynvml') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_console_script_is_installed() -> None:
    done = subprocess.run([agent_cli(), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "phantomhub-agent" in done.stdout


def test_the_gpu_check_skips_cleanly_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - on a GPU machine run the script itself
        return
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "agent_gpu_check.py")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("SKIP")

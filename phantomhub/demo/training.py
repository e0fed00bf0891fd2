"""Real short CPU PyTorch training runs through the agent and the HTTP API, for the demo."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from phantomhub.demo.post import local_server
from phantomhub.telemetry.models import Run

SCENARIOS = ["healthy", "starved", "ddp-straggler"]
SCRIPT = Path(settings.BASE_DIR) / "scripts" / "demo_training.py"


def training_runs_seed(project: Any, say: Callable[[str], None]) -> None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("phantomhub_agent") is None:
        say("demo: torch or the agent is not installed; real training runs skipped (pip install ./agent[torch])")
        return
    if Run.objects.filter(project=project, tags__icontains="cpu-demo").count() >= len(SCENARIOS):
        return
    token = (settings.VAR_DIR / "demo-token").read_text().strip()
    with local_server() as address:
        for scenario in SCENARIOS:
            say(f"demo: training '{scenario}' on the CPU through the agent…")
            env = {**os.environ, "PHANTOMHUB_SERVER": f"http://{address}", "PHANTOMHUB_TOKEN": token,
                   "PHANTOMHUB_MODE": "online", "PYTHONUNBUFFERED": "1"}  # fmt: skip
            env.pop("PHANTOMHUB_RUN_ID", None)
            result = subprocess.run([sys.executable, str(SCRIPT), scenario], env=env, capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                say(f"demo: training '{scenario}' failed (exit {result.returncode}): {result.stderr[-500:]}")

"""Real short CPU PyTorch training runs through the agent, for the demo (filled in below)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def training_runs_seed(project: Any, say: Callable[[str], None]) -> None:
    say("demo: real training runs need the agent; skipped")

"""PhantomHub training agent.

import phantomhub_agent as pa

run = pa.init(project="llm-pretrain", team="nlp", name="exp-42", gpu_model="H100-SXM", gpu_count=8)
for batch in run.data(loader):
    with run.step(tokens=4096, samples=8):
        with run.stage("forward"):
            loss = model(batch)
        with run.stage("backward"):
            loss.backward()
        with run.stage("optimizer"):
            opt.step()
            opt.zero_grad()
run.finish()
"""

from __future__ import annotations

from ._config import Settings
from ._log import AgentError
from ._run import Run, get_run, init
from ._version import __version__

__all__ = ["AgentError", "Run", "Settings", "__version__", "get_run", "init"]

"""A small run whose accumulator state is stored as a fixture (tests/waste/data/): the state as the
code before the rank table packed it, so that the stored format is checked against bytes another
version of the code wrote, not against itself.

Only numpy and the model's public inputs here: the same module, copied into a worktree of older
code, writes the fixture there.

    git worktree add /tmp/old 86b07c0 && ln -s "$PWD/.venv" /tmp/old/.venv
    cp tests/waste/state_fixture.py /tmp/old/tests/waste/ && mkdir -p /tmp/old/tests/waste/data
    (cd /tmp/old && PYTHONPATH=. .venv/bin/python -m tests.waste.state_fixture tests/waste/data/state_before_rank_table.json)
"""

from __future__ import annotations

import base64
import json
import sys
import zlib
from typing import Any

import numpy as np

NS = 10**9
START = 1_790_000_000 * NS
RANKS = 6


def config() -> Any:
    from phantomhub.waste.core.model import PriceSegment, RunConfig

    # Some ranks are quiet in some rounds: the ranks ahead keep rows waiting for alignment, so the
    # state carries straggler tails and counters as well as pending rows.
    change = START + 10 * NS  # a price change inside the run: rows straddle it
    return RunConfig(gpu_count=RANKS, world_size=RANKS, allocation_start_ns=START - 60 * NS,
                     price_segments=(PriceSegment(0, change, 2.5), PriceSegment(change, START + 10**7 * NS, 3.0)),
                     peak_flops_per_gpu=1e15, gpu_memory_bytes=80 * 2**30)  # fmt: skip


def batch(rank: int, first: int, n: int) -> Any:
    """Rank ``rank``'s steps ``first`` .. ``first + n - 1``: rank 2 slow, memory and FLOPs on some ranks only."""
    from phantomhub.waste.core.inputs import StepColumns

    rng = np.random.default_rng(rank * 1000 + first)
    step = np.arange(first, first + n)
    compute = (rng.normal(400e6, 20e6, n) * (1.3 if rank == 2 else 1.0)).astype(np.int64)
    cols: dict[str, Any] = {
        "step": step, "t_start_ns": START + step * NS + rank * 1000, "dur_ns": np.full(n, NS),
        "data_ns": rng.integers(1e7, 5e7, n), "forward_ns": compute // 3, "backward_ns": compute - compute // 3,
        "comm_ns": np.clip(900_000_000 - compute, 0, None), "tokens": np.full(n, 4096),
    }  # fmt: skip
    if rank % 2 == 0:
        cols["mem_allocated"] = rng.integers(2**33, 2**34, n)
        cols["mem_reserved"] = cols["mem_allocated"] + 2**30
        cols["mem_peak"] = cols["mem_reserved"] + 2**29
    if rank != 5:
        cols["flops"] = np.where(rng.random(n) < 0.9, 3e14, np.nan)
    return StepColumns(rank=rank, host=f"node-{rank // 4}", **cols)


def rounds() -> list[list[Any]]:
    """The batches, round by round: each round some ranks send their next few steps."""
    out, nxt = [], [0] * RANKS
    for r in range(4):
        batches = []
        for rank in range(RANKS):
            if (rank + r) % 3 == 0 and r:  # every round, some ranks are quiet
                continue
            n = 3 + (rank + r) % 4
            batches.append(batch(rank, nxt[rank], n))
            nxt[rank] += n
        out.append(batches)
    return out


FIXTURE_ROUNDS = 2  # the stored state is the accumulator after the first two rounds


def fixture_accumulator() -> Any:
    from phantomhub.waste.core.accumulator import RunAccumulator

    acc = RunAccumulator(config())
    for batches in rounds()[:FIXTURE_ROUNDS]:
        acc.add_steps_many(batches)
    return acc


def packed(acc: Any) -> dict[str, bytes]:
    """The state's three stored parts, as the analysis stores them."""
    import orjson

    from phantomhub.waste.core.state import arrays_pack, state_pack

    parts = state_pack(acc)
    return {"header": orjson.dumps(parts.header), "ranks": arrays_pack(parts.ranks), "windows": arrays_pack(parts.windows)}


def unpacked(stored: dict[str, bytes]) -> Any:
    """The accumulator from its three stored parts, as the analysis reads it back."""
    import orjson

    from phantomhub.waste.core.state import StateParts, arrays_unpack, state_unpack

    header, ranks, windows = orjson.loads(stored["header"]), arrays_unpack(stored["ranks"]), arrays_unpack(stored["windows"])
    return state_unpack(StateParts(header, ranks, windows))


def reloaded(acc: Any) -> Any:
    """The accumulator through its stored form: packed to bytes and read back."""
    return unpacked(packed(acc))


def encode(parts: dict[str, bytes]) -> dict[str, str]:
    """For the JSON fixture: zlib (the chart windows are mostly zeros), then base64."""
    return {k: base64.b64encode(zlib.compress(v, 9)).decode() for k, v in parts.items()}


def decode(fixture: dict[str, str]) -> dict[str, bytes]:
    return {k: zlib.decompress(base64.b64decode(v)) for k, v in fixture.items()}


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump(encode(packed(fixture_accumulator())), f, indent=1)
        f.write("\n")

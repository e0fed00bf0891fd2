"""Many ranks, arbitrary batch splits: a live run fed several ranks at a time (the vectorised
``add_steps_many`` path), its state stored and reloaded in the compact form (waste/core/state.py) in
between, ends exactly where one from-scratch analysis of the same rows does — stragglers included.
The oracle is ``analyze`` on all rows at once; on the database, a from-scratch ``run_analyze``."""

from __future__ import annotations

import itertools
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import services
from phantomhub.waste.core.model import (
    NotAppendable,
    PriceSegment,
    RunAccumulator,
    RunConfig,
    RunInputs,
    StepColumns,
    analysis_from,
    analyze,
)
from phantomhub.waste.core.state import INT_COLUMNS, StateParts, arrays_pack, arrays_unpack, state_unpack
from phantomhub.waste.models import RunAnalysisState
from phantomhub.waste.selectors import rank_figures_of
from tests.conftest import Tenant
from tests.examples import examples
from tests.waste import state_fixture
from tests.waste.factories import MS, S
from tests.waste.strategies import runs
from tests.waste.test_waste_incremental import _ending_after_every_row, assert_same_analysis


def feed_many(run: RunInputs, rnd: random.Random, roundtrip: bool) -> RunAccumulator:
    """Each rank's rows cut at random; each round a random set of ranks sends its next piece,
    all of them in one ``add_steps_many`` call."""
    queues: dict[int, list[StepColumns]] = {}
    for b in run.steps:
        cuts = sorted(rnd.sample(range(1, len(b)), k=min(len(b) - 1, rnd.randint(0, 6)))) if len(b) > 1 else []
        bounds = [0, *cuts, len(b)]
        queues[b.rank] = [b.take(np.arange(lo, hi)) for lo, hi in itertools.pairwise(bounds)]
    acc = RunAccumulator(run.config)
    while any(queues.values()):
        live = [r for r, q in queues.items() if q]
        chosen = rnd.sample(live, k=rnd.randint(1, len(live)))
        acc.add_steps_many([queues[r].pop(0) for r in chosen])
        if roundtrip and rnd.random() < 0.5:
            acc = state_fixture.reloaded(acc)
    for samples in run.samples:
        acc.add_samples(samples)
    return acc


def assert_same(full: Any, live: Any) -> None:
    assert live.cost_cents == full.cost_cents
    assert [c.usd_cents for c in live.categories] == [c.usd_cents for c in full.categories]
    assert [c.recoverable_cents for c in live.categories] == [c.recoverable_cents for c in full.categories]
    assert [(s.rank, s.caused_wait_usd) for s in live.stragglers] == [(s.rank, s.caused_wait_usd) for s in full.stragglers]
    assert_same_analysis(full.to_json(), live.to_json())


@pytest.mark.slow  # seconds: make test runs it, make check does not
@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 3 * S), st.randoms(use_true_random=False), st.booleans())
def test_any_batch_split_over_ranks_equals_one_full_analysis(run, extra_ns, rnd, roundtrip):
    run = _ending_after_every_row(run, extra_ns)
    try:
        live_acc = feed_many(run, rnd, roundtrip)
    except NotAppendable:  # rows a live run could not append (the service then starts over)
        return
    assert_same(analyze(run), analysis_from(live_acc, end_ns=run.end_ns))


def _as_model_v3(parts: dict[str, bytes]) -> dict[str, bytes]:
    """The stored parts without what model version 4 added (docs/waste-model.md, "Jobs"): the
    config's job fields, the rework sums and the rework piece column; the version back to 3."""
    header = orjson.loads(parts["header"])
    header["version"] = header["config"]["model_version"] = 3
    for key in ("rework_through_step", "restart_before_first_step", "restart_after_last_step"):
        del header["config"][key]
    ranks = dict(arrays_unpack(parts["ranks"]))
    added = [INT_COLUMNS.index(k) for k in ("rework_steps", "rework_ns")]
    ranks["ints"] = np.delete(ranks["ints"], added, axis=1)
    ranks["pieces"] = ranks["pieces"][:, :, :5]
    return {"header": orjson.dumps(header), "ranks": arrays_pack(ranks), "windows": parts["windows"]}


def test_a_state_the_code_before_the_rank_table_stored_loads_repacks_to_its_bytes_and_goes_on():
    # The oracle is bytes another version of the code wrote (tests/waste/state_fixture.py says
    # how): the accumulator after two rounds of a 6-rank run, with pending rows, straggler tails
    # and counters, packed by the code that kept a Python object per rank (model version 3).
    stored_v3 = state_fixture.decode(json.loads((Path(__file__).parent / "data" / "state_before_rank_table.json").read_text()))
    # The same rows folded by this code pack to the same bytes, but for what version 4 added.
    stored = state_fixture.packed(state_fixture.fixture_accumulator())
    assert _as_model_v3(stored) == stored_v3
    # A state of another model version is refused (the run is then analysed from scratch).
    with pytest.raises(NotAppendable):
        state_fixture.unpacked(stored_v3)
    # The stored state, loaded, packs back to its bytes ...
    header, ranks, windows = orjson.loads(stored["header"]), arrays_unpack(stored["ranks"]), arrays_unpack(stored["windows"])
    acc = state_unpack(StateParts(header, ranks, windows))
    assert state_fixture.packed(acc) == stored
    # ... and with the remaining rounds analyses like a from-scratch pass over every row.
    rounds = state_fixture.rounds()
    for batches in rounds[state_fixture.FIXTURE_ROUNDS :]:
        acc.add_steps_many(batches)
    every = [b for batches in rounds for b in batches]
    end = max(int(b.t_start_ns[-1] + b.dur_ns[-1]) for b in every) + 5 * S
    assert_same(analyze(RunInputs(config=state_fixture.config(), end_ns=end, steps=every)), analysis_from(acc, end_ns=end))


@st.composite
def lockstep_runs(draw: st.DrawFn) -> RunInputs:
    """Data-parallel runs: every rank reports the same steps, some ranks persistently slow (so
    the straggler attribution has something to find), jitter on all of them."""
    n_ranks = draw(st.integers(2, 40))
    n_steps = draw(st.integers(1, 60))
    slow = draw(st.sets(st.integers(0, n_ranks - 1), max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    step_ns = 100 * MS
    starts = np.arange(n_steps, dtype=np.int64) * step_ns + 5 * S
    batches = []
    for r in range(n_ranks):
        compute = rng.integers(30 * MS, 45 * MS, n_steps) + (25 * MS if r in slow else 0)
        batches.append(
            StepColumns(
                rank=r, host=f"node-{r // 8}", step=np.arange(n_steps), t_start_ns=starts, dur_ns=np.full(n_steps, step_ns),
                forward_ns=compute // 3, backward_ns=compute - compute // 3, comm_ns=np.maximum(0, 80 * MS - compute),
                data_ns=rng.integers(0, 10 * MS, n_steps), flops=np.full(n_steps, 1e10),
            )
        )  # fmt: skip
    config = RunConfig(
        gpu_count=n_ranks, world_size=n_ranks, allocation_start_ns=0, peak_flops_per_gpu=1e12,
        price_segments=(PriceSegment(0, 10**4 * S, Decimal("2.71")),),
    )  # fmt: skip
    return RunInputs(config=config, end_ns=int(starts[-1]) + step_ns + draw(st.integers(0, 2 * S)), steps=batches)


@pytest.mark.slow  # seconds: make test runs it, make check does not
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lockstep_runs(), st.randoms(use_true_random=False), st.booleans())
def test_stragglers_found_live_over_many_ranks_are_those_of_a_full_analysis(run, rnd, roundtrip):
    live = analysis_from(feed_many(run, rnd, roundtrip), end_ns=run.end_ns)
    full = analyze(run)
    assert_same(full, live)


def test_two_batches_of_one_rank_in_one_call_are_refused_before_anything_is_added():
    one = StepColumns(rank=3, host="h", step=np.arange(2), t_start_ns=np.arange(2) * S, dur_ns=np.full(2, S))
    other = StepColumns(rank=4, host="h", step=np.arange(2), t_start_ns=np.arange(2) * S, dur_ns=np.full(2, S))
    acc = RunAccumulator(RunConfig(gpu_count=2, world_size=2, allocation_start_ns=0))
    with pytest.raises(ValueError, match="rank 3: one batch per rank per call"):
        acc.add_steps_many([one, other, one])
    assert acc.ranks == {}


def test_a_slow_rank_among_many_is_found_by_the_live_path():
    rnd = random.Random(7)
    n_ranks, n_steps = 64, 200
    starts = np.arange(n_steps, dtype=np.int64) * 100 * MS
    batches = [
        StepColumns(
            rank=r, host=f"node-{r // 8}", step=np.arange(n_steps), t_start_ns=starts, dur_ns=np.full(n_steps, 100 * MS),
            forward_ns=np.full(n_steps, (60 if r == 13 else 40) * MS), comm_ns=np.full(n_steps, (40 if r == 13 else 60) * MS),
        )
        for r in range(n_ranks)
    ]  # fmt: skip
    config = RunConfig(gpu_count=n_ranks, world_size=n_ranks, allocation_start_ns=0)
    run = RunInputs(config=config, end_ns=n_steps * 100 * MS, steps=batches)
    live = analysis_from(feed_many(run, rnd, roundtrip=True), end_ns=run.end_ns)
    assert [s.rank for s in live.stragglers] == [13]
    assert_same(analyze(run), live)


# -- on the database ---------------------------------------------------------------------------

T0 = datetime(2026, 9, 21, 10, 0, tzinfo=UTC)
T0_NS = int(T0.timestamp()) * S


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _rank_steps(rank: int, first: int, n: int) -> dict[str, Any]:
    rng = np.random.default_rng(rank * 7919 + first)
    compute = rng.integers(500, 600, n) * MS + (150 * MS if rank == 5 else 0)
    return {
        "rank": rank,
        "host": f"node-{rank // 4}",
        "steps": {
            "step": list(range(first, first + n)),
            "t_start_ns": [T0_NS + i * S for i in range(first, first + n)],
            "dur_ns": [S] * n,
            "data_ns": rng.integers(0, 50 * MS, n).tolist(),
            "forward_ns": (compute // 3).tolist(),
            "backward_ns": (compute - compute // 3).tolist(),
            "comm_ns": (900 * MS - compute).clip(0).tolist(),
            "flops": [1e14] * n,
        },
    }


def _figures(row: Any) -> tuple[Any, ...]:
    r = row.result
    return (row.cost_usd, row.waste_usd, row.recoverable_usd, [(c["category"], c["usd_cents"]) for c in r["categories"]],
            r["steps"], [(s["rank"], s["caused_wait_gpu_seconds"]) for s in r["stragglers"]],
            [(x["rank"], x["steps"], x["usd"]) for x in rank_figures_of(row)])  # fmt: skip


@pytest.mark.django_db
@pytest.mark.backends
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_live_analyses_of_a_16_rank_run_in_random_pieces_equal_a_full_one(owner: Tenant, seed: int) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    run_id = owner.create_run(
        gpu_model="NVIDIA H100 80GB HBM3", gpu_count=16, world_size=16, dtype="bf16",
        allocation_start=_iso(T0 - timedelta(seconds=10)), started_at=_iso(T0),
    )  # fmt: skip
    rnd = random.Random(seed)
    sent = dict.fromkeys(range(16), 0)
    total = 60
    while any(n < total for n in sent.values()):
        for rank in rnd.sample(range(16), k=rnd.randint(1, 16)):
            n = min(rnd.randint(1, 12), total - sent[rank])
            if n:
                response = owner.post_steps(run_id, _rank_steps(rank, sent[rank], n))
                assert response.status_code == 200, response.content
                sent[rank] += n
        if rnd.random() < 0.7:
            assert services.run_analyze(run_id=uuid.UUID(run_id)) is not None
    live = services.run_analyze(run_id=uuid.UUID(run_id))
    assert live is not None and live.result["steps"] == 16 * total
    assert [s["rank"] for s in live.result["stragglers"]] == [5]

    assert RunAnalysisState.objects.filter(run_id=run_id).delete()[0] == 1
    full = services.run_analyze(run_id=uuid.UUID(run_id))
    assert full is not None
    assert _figures(live) == _figures(full)


@pytest.mark.django_db
@pytest.mark.parametrize("damage", ["header", "ranks", "windows"])
def test_an_unreadable_stored_state_means_a_correct_full_analysis(owner: Tenant, damage: str) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    run_id = owner.create_run(
        gpu_model="NVIDIA H100 80GB HBM3", gpu_count=4, world_size=4, dtype="bf16",
        allocation_start=_iso(T0 - timedelta(seconds=10)), started_at=_iso(T0),
    )  # fmt: skip
    for rank in range(4):
        assert owner.post_steps(run_id, _rank_steps(rank, 0, 20)).status_code == 200
    services.run_analyze(run_id=uuid.UUID(run_id))
    RunAnalysisState.objects.filter(run_id=run_id).update(**{damage: b"PHS1\xff\xff\xff\x7fnot a state"})
    for rank in range(4):
        assert owner.post_steps(run_id, _rank_steps(rank, 20, 10)).status_code == 200
    recovered = services.run_analyze(run_id=uuid.UUID(run_id))
    assert recovered is not None and recovered.result["steps"] == 4 * 30

    assert RunAnalysisState.objects.filter(run_id=run_id).delete()[0] == 1
    full = services.run_analyze(run_id=uuid.UUID(run_id))
    assert full is not None
    assert _figures(recovered) == _figures(full)

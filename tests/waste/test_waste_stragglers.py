"""Straggler attribution: the comm wait of fast ranks is charged to the rank they waited for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phantomhub.waste.core.model import PriceSegment, RunConfig, RunInputs, analyze
from phantomhub.waste.core.stragglers import RunTail, attribute, order_by_step_then_arrival
from tests.waste.factories import MS, S, steps

N_STEPS = 200


def lockstep(forward_ms: dict[int, int], data_ms: dict[int, int] | None = None, n: int = N_STEPS) -> RunInputs:
    """4 ranks, 100 ms steps; every rank leaves the all-reduce together, so its exposed comm is
    100 ms minus its own work (the wait for the slowest rank)."""
    data_ms = data_ms or {}
    starts = [i * 100 * MS for i in range(n)]
    batches = []
    for r in range(4):
        work = forward_ms.get(r, 40) + data_ms.get(r, 0)
        batches.append(
            steps(
                rank=r,
                host=f"node-{r}",
                starts_ns=starts,
                dur_ns=100 * MS,
                data_ns=data_ms.get(r, 0) * MS,
                forward_ns=forward_ms.get(r, 40) * MS,
                comm_ns=(100 - work) * MS,
            )
        )
    config = RunConfig(
        gpu_count=4,
        world_size=4,
        allocation_start_ns=0,
        # $36 per GPU-hour = 1 cent per GPU-second, so cents read as GPU-seconds.
        price_segments=(PriceSegment(0, 10**6 * S, 36),),
    )
    return RunInputs(config=config, end_ns=n * 100 * MS, steps=batches)


def test_the_slow_rank_is_charged_with_the_others_wait():
    a = analyze(lockstep({2: 60}))

    assert [s.rank for s in a.stragglers] == [2]
    s = a.stragglers[0]
    assert s.host == "node-2"
    assert s.slow_step_share == 1.0
    assert s.blamed_steps == N_STEPS
    assert s.excess_ns_mean == 20 * MS
    # Ranks 0, 1, 3 each wait 20 ms per step for rank 2.
    assert s.caused_wait_gpu_seconds == pytest.approx(N_STEPS * 3 * 0.020)
    assert (s.compute_ns_mean, s.median_rank_compute_ns_mean) == (60 * MS, 40 * MS)
    # comm_exposed: (3 x 60 + 40) ms x 200 steps = 44 GPU-s = 44 cents; 12 of them caused by rank 2.
    assert a.category("comm_exposed").usd_cents == 44
    assert s.caused_wait_usd == pytest.approx(0.12)
    assert a.explain["stragglers.2.caused_wait_usd"].value == pytest.approx(0.12)
    assert {r.rank: r.caused_wait_gpu_seconds for r in a.ranks} == pytest.approx({0: 0, 1: 0, 2: 12.0, 3: 0})


def two_ranks_one_slow(host_ms: int, n: int = N_STEPS) -> RunInputs:
    """2 ranks in lockstep, (100 + host_ms) ms steps: both compute 40 ms and sync 60 ms; rank 1
    also spends ``host_ms`` outside every stage (logging, a sync point), which rank 0 waits for."""
    step = (100 + host_ms) * MS
    starts = [i * step for i in range(n)]
    batches = [
        steps(rank=0, host="node-0", starts_ns=starts, dur_ns=step, forward_ns=40 * MS, comm_ns=(60 + host_ms) * MS),
        steps(rank=1, host="node-0", starts_ns=starts, dur_ns=step, forward_ns=40 * MS, comm_ns=60 * MS),
    ]
    config = RunConfig(gpu_count=2, world_size=2, allocation_start_ns=0, price_segments=(PriceSegment(0, 10**6 * S, 36),))
    return RunInputs(config=config, end_ns=n * step, steps=batches)


def test_a_slow_ranks_lead_is_over_the_others_and_its_own_excess_is_priced():
    """The issue's case: rank 1 spends 50 ms more per step. With two ranks a median that holds the
    slow rank is the midpoint (25 ms); its lead over the other rank is 50 ms, and removing it saves
    both ranks' 50 ms a step: the other's wait and its own excess."""
    a = analyze(two_ranks_one_slow(50))

    [s] = a.stragglers
    assert s.rank == 1
    assert s.excess_ns_mean == 25 * MS  # the blamed steps' counter, against the median of both
    assert s.lead_ns_mean == pytest.approx(50 * MS)
    # $36 per GPU-hour = 1 cent per GPU-second: 200 steps x 50 ms = 10 GPU-s each way.
    assert s.caused_wait_gpu_seconds == pytest.approx(10.0)
    assert s.own_excess_gpu_seconds == pytest.approx(10.0)
    assert s.own_excess_usd == pytest.approx({"host_overhead": 0.10})
    assert s.saving_usd == pytest.approx(0.20)
    assert a.category("host_overhead").evidence.kind == "straggler"
    assert a.category("host_overhead").recoverable_cents == 10


def test_equally_slow_ranks_share_the_blame():
    a = analyze(lockstep({2: 60, 3: 60}))

    assert [s.rank for s in a.stragglers] == [2, 3]
    # Ranks 0 and 1 each wait 20 ms; the 40 ms per step are split between ranks 2 and 3.
    assert [s.caused_wait_gpu_seconds for s in a.stragglers] == pytest.approx([4.0, 4.0])


def test_jitter_below_five_percent_blames_nobody():
    a = analyze(lockstep({0: 40, 1: 41, 2: 41, 3: 42}))

    assert a.stragglers == ()
    assert all(r.caused_wait_gpu_seconds == 0 for r in a.ranks)


def test_a_rank_slow_to_get_its_batches_is_a_straggler_too():
    a = analyze(lockstep({}, data_ms={1: 25}))

    assert [s.rank for s in a.stragglers] == [1]
    s = a.stragglers[0]
    assert s.data_ns_mean == 25 * MS and s.median_rank_data_ns_mean == 0
    assert s.caused_wait_gpu_seconds == pytest.approx(N_STEPS * 3 * 0.025)


def test_a_rank_slow_only_now_and_then_is_not_flagged():
    run = lockstep({2: 60})
    # Rank 2 is slow in only a quarter of the steps.
    fwd = run.steps[2].forward_ns.copy()
    fwd[N_STEPS // 4 :] = 40 * MS
    comm = 100 * MS - fwd
    batch = run.steps[2]
    run.steps[2] = steps(rank=2, host="node-2", starts_ns=batch.t_start_ns, dur_ns=batch.dur_ns, forward_ns=fwd, comm_ns=comm)

    a = analyze(run)

    assert a.stragglers == ()
    assert {r.rank: r.caused_wait_gpu_seconds for r in a.ranks}[2] == pytest.approx(N_STEPS / 4 * 3 * 0.020)
    assert {r.rank: r.slow_step_share for r in a.ranks}[2] == pytest.approx(0.25)


def test_too_few_aligned_steps_flag_nobody():
    a = analyze(lockstep({2: 60}, n=2))
    assert a.stragglers == ()


def test_wait_never_exceeds_the_comm_time_a_rank_measured():
    run = lockstep({2: 60})
    # Rank 0 reports only 5 ms of exposed comm (the rest of its wait went unmeasured).
    b = run.steps[0]
    run.steps[0] = steps(rank=0, host="node-0", starts_ns=b.t_start_ns, dur_ns=b.dur_ns, forward_ns=b.forward_ns, comm_ns=5 * MS)

    a = analyze(run)

    # Rank 0's arrival is now 95 ms (work plus unmeasured time), so it is the latest; rank 2's
    # 60 ms is the median-ish: the blame moves to rank 0 for the 35 ms the others wait.
    assert a.stragglers[0].rank == 0
    assert a.stragglers[0].caused_wait_gpu_seconds == pytest.approx(N_STEPS * (35 + 55 + 55) / 1000)


@given(st.lists(st.lists(st.integers(0, 5), max_size=12), min_size=1, max_size=5), st.data())
def test_the_fast_step_order_is_lexsort_order(rank_steps, data):
    step = np.concatenate([np.array(sorted(set(s)), dtype=np.int64) for s in rank_steps])
    arrival = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(step), max_size=len(step))), dtype=np.int64)
    if len(step) == 0:
        return
    assert np.array_equal(order_by_step_then_arrival(step, arrival), np.lexsort((arrival, step)))


# A run's tail: pieces added one after another, each some ranks' rows (rising steps per rank).
PIECES = st.lists(st.lists(st.tuples(st.integers(0, 5), st.lists(st.integers(0, 30), max_size=6)), max_size=4), max_size=4)


@given(PIECES, st.integers(-1, 31))
def test_taking_through_a_watermark_equals_a_filter_of_the_rows_in_order(pieces, watermark):
    # The oracle: every row as a plain tuple in the order added; those at or below the watermark
    # are taken, the others kept in order; by rank, a stable sort of the kept rows by rank.
    tail, rows = RunTail(), []
    for piece in pieces:
        ranks, steps = [], []
        for rank, raw in piece:
            s = sorted(set(raw))
            ranks += [rank] * len(s)
            steps += s
        rank_a, step_a = np.array(ranks, dtype=np.int64), np.array(steps, dtype=np.int64)
        tail.add(rank_a, step_a, step_a * 10 + rank_a, step_a * 100 + rank_a)
        rows += [(r, s, s * 10 + r, s * 100 + r) for r, s in zip(ranks, steps, strict=True)]
    assert len(tail) == len(rows)

    taken = tail.take_through(watermark)

    assert list(zip(*(x.tolist() for x in taken), strict=True)) == [row for row in rows if row[1] <= watermark]
    kept = [row for row in rows if row[1] > watermark]
    assert list(zip(*(x.tolist() for x in tail.arrays()), strict=True)) == kept
    assert list(zip(*(x.tolist() for x in tail.by_rank()), strict=True)) == sorted(kept, key=lambda row: row[0])
    assert len(tail) == len(kept)


def test_attribution_does_not_depend_on_the_order_of_the_rows():
    # The same complete steps, rank by rank and shuffled: the same counters.
    rng = np.random.default_rng(7)
    n_ranks, n_steps = 5, 40
    who = np.repeat(np.arange(n_ranks), n_steps)
    step = np.tile(np.arange(n_steps), n_ranks)
    arrival = rng.integers(90, 130, len(step)) + (who == 3) * 20  # ties are common at this range
    comm = rng.integers(0, 40, len(step))
    by_rank: dict = {}
    attribute(list(range(n_ranks)), who, step, arrival, comm, by_rank)
    order = rng.permutation(len(step))
    shuffled: dict = {}
    attribute(list(range(n_ranks)), who[order], step[order], arrival[order], comm[order], shuffled)
    assert shuffled == by_rank
    assert by_rank[3].blamed_steps > 0


def test_straggler_sums_stay_exact_past_two_to_the_53():
    # Two ranks over 3 steps, rank 1 arriving last, rank 0 waiting 4e15 + 1 ns each time: its waits
    # add up to 12e15 + 3 ns, past 2**53, where a float sum rounds to an even number.
    wait = 4 * 10**15 + 1
    counters: dict = {}
    step = np.array([0, 1, 2, 0, 1, 2], dtype=np.int64)
    arrival = np.array([1, 1, 1, wait + 1, wait + 1, wait + 1], dtype=np.int64)
    comm = np.array([wait + 7] * 3 + [0] * 3, dtype=np.int64)
    attribute([0, 1], np.array([0, 0, 0, 1, 1, 1]), step, arrival, comm, counters)
    assert counters[0].waited_ns == 3 * wait == 12_000_000_000_000_003
    assert counters[1].caused_wait_ns == 3 * wait
    assert (counters[1].blamed_steps, counters[0].blamed_steps) == (3, 0)

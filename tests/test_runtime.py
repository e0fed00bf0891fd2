"""The garbage-collector policy of long-lived processes (phantomhub/runtime.py)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from phantomhub.runtime import boot_objects_freeze, collector_paused
from tests.waste.test_analysis_service import known_steps, make_run, price_36  # noqa: F401


def test_collector_paused_restores_the_state_it_found() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not turn it on for the outer one
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


def test_collector_paused_restores_it_after_an_error() -> None:
    @collector_paused()
    def fails() -> None:
        assert not gc.isenabled()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fails()
    assert gc.isenabled()


def test_cycles_made_inside_a_pause_are_collected_after_it() -> None:
    class Node:
        other: Any = None

    import weakref

    with collector_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
        assert ref() is not None  # a cycle: reference counting cannot free it
    gc.collect()
    assert ref() is None


def test_boot_objects_freeze_exempts_what_exists_and_not_what_comes_later() -> None:
    earlier = [[1], [2]]  # containers: the collector tracks them
    try:
        frozen = boot_objects_freeze()
        assert frozen > 1000  # (a frozen object that reference counting frees later leaves the count)
        later = [[3], [4]]
        tracked = {id(o) for o in gc.get_objects()}  # what later collections walk
        assert not any(id(o) in tracked for o in earlier)
        assert all(id(o) in tracked for o in later)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
    assert all(id(o) in {id(x) for x in gc.get_objects()} for o in earlier)


def test_a_celery_pool_process_freezes_boot_objects() -> None:
    from phantomhub.celery import boot_objects_frozen

    try:
        boot_objects_frozen()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


@pytest.mark.django_db
@pytest.mark.usefixtures("price_36")
def test_an_analysis_pass_runs_without_the_collector(owner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from phantomhub.waste import services
    from phantomhub.waste.models import RunAnalysis

    run_id = make_run(owner, name="paused")
    owner.post_steps(run_id, known_steps(20))
    seen: list[bool] = []
    policy_of = services.policy_of

    def watching(inputs: Any) -> Any:  # called inside the pass
        seen.append(gc.isenabled())
        return policy_of(inputs)

    monkeypatch.setattr(services, "policy_of", watching)
    services.run_analyze(run_id=run_id)
    assert seen == [False]
    assert gc.isenabled()
    assert RunAnalysis.objects.get(run_id=run_id).analysed_at is not None

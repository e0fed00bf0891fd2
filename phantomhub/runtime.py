"""How a long-lived PhantomHub process treats Python's cyclic garbage collector.

A web or worker process holds a few hundred thousand long-lived objects after boot (Django, DRF,
NumPy, Celery, the URLconf). Every full (generation 2) collection walks all of them: 30-120 ms
that lands in whichever request or analysis pass allocated the object that tipped the counter,
the tail of an incremental analysis of a 1,024-rank run included (docs/performance.md, "A big
job: 1,024 ranks"). Two measures, both standard for forking servers:

- ``boot_objects_freeze`` once a process has imported what it serves: those objects move to the
  permanent generation, which no collection walks (``gc.freeze``, Python 3.7+). Memory is not
  affected; garbage created later is collected as before.
- ``collector_paused`` around an analysis pass: a pass allocates mostly acyclic NumPy arrays and
  small containers that reference counting frees; a collection inside it finds almost nothing
  and only adds a pause. Cycles made during the pass are collected after it, by the next
  collection the interpreter runs.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def boot_objects_freeze() -> int:
    """Collect what boot left behind, then exempt every surviving object from later collections.
    Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state before it is restored after
    it, so a nested pause leaves the collector off for the pause around it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

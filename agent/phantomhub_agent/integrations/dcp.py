"""``torch.distributed.checkpoint`` (DCP) with checkpoint and restore events.

    from phantomhub_agent.integrations import dcp

    dcp.save(state_dict, checkpoint_id=f"/ckpt/step-{step}", step=step)        # blocks: the save
    future = dcp.async_save(state_dict, checkpoint_id=path, step=step)        # blocks: the staging
    dcp.load(state_dict, checkpoint_id=path, step=step)                       # a "restore" phase

Each call is the DCP function of the same name with the same arguments (``**kwargs`` go to it
unchanged: ``storage_writer``, ``planner``, ``process_group``...) and returns what it returns,
inside ``run.checkpoint(step)`` (``run.restoring(step)`` for ``load``), on every rank. The
blocking time is the time the call took: for ``async_save`` the time until it returns (the state
dict staged to memory; the write goes on in the background), recorded with ``async: true``. The
``bytes`` of a ``save`` are the whole checkpoint's (all ranks' data, from the metadata DCP
returns); ``async_save`` and ``load`` leave them out. ``run`` defaults to the current run
(``phantomhub_agent.get_run()``); without one the DCP function is simply called.

Errors of the agent never reach the caller (they are logged; raised in debug mode); DCP's own
errors do, after the phase was recorded.
"""

from __future__ import annotations

from typing import Any

from .._run import Run, get_run


def _dcp() -> Any:
    import torch.distributed.checkpoint as dcp

    return dcp


def _checkpoint_bytes(metadata: Any) -> int | None:
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(storage, dict):
        return None
    try:
        return sum(int(info.length) for info in storage.values())
    except (AttributeError, TypeError, ValueError):
        return None


def save(state_dict: dict[str, Any], *, checkpoint_id: Any = None, step: int, run: Run | None = None, **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.save`` timed as a "checkpoint" phase at ``step``."""
    dcp = _dcp()
    run = run if run is not None else get_run()
    if run is None:
        return dcp.save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    with run.checkpoint(step) as ck:
        metadata = dcp.save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
        ck.bytes = _checkpoint_bytes(metadata)
    return metadata


def async_save(state_dict: dict[str, Any], *, checkpoint_id: Any = None, step: int, run: Run | None = None, **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.async_save`` timed until it returns (``async: true``)."""
    dcp = _dcp()
    run = run if run is not None else get_run()
    if run is None:
        return dcp.async_save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    with run.checkpoint(step, async_=True):
        return dcp.async_save(state_dict, checkpoint_id=checkpoint_id, **kwargs)


def load(state_dict: dict[str, Any], *, checkpoint_id: Any = None, step: int, run: Run | None = None, **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.load`` (in place) timed as a "restore" phase; ``step``: the
    step the checkpoint was saved at."""
    dcp = _dcp()
    run = run if run is not None else get_run()
    if run is None:
        return dcp.load(state_dict, checkpoint_id=checkpoint_id, **kwargs)
    with run.restoring(step):
        return dcp.load(state_dict, checkpoint_id=checkpoint_id, **kwargs)

"""The Run: the object a training script holds. Public methods never raise into user code.

In production an internal error is logged once and counted; with ``debug=True`` it is raised,
and errors of the background thread are raised by ``finish()``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import os
import platform
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Callable, TypeVar

from . import _hotpath as hp
from ._batcher import encode_json
from ._config import DTYPES, PRICING_TIERS, Settings, settings_from
from ._ends import end_cause, sigterm_cause
from ._gpus import rank_gpus
from ._identity import Identity, Job, detect_identity, resolve_job, resolve_run_id, run_id_scope
from ._launcher import resolve_launched_by
from ._log import AgentError, OnceLogger, logger
from ._registry import RunRecord
from ._spool import token_fingerprint
from ._version import __version__
from ._worker import MARK_BOUNDARY, MARK_END, MARK_NUMBERED, Worker, WorkerContext

T = TypeVar("T")
FINISH_STATUSES = ("finished", "failed", "crashed")

# Strong references: a run must outlive its caller's variable until it has finished.
_active: set[Run] = set()
_current: Run | None = None
_hooks_installed = False
_hooks_lock = threading.Lock()
_previous_excepthook: Callable[..., Any] | None = None
# When the latest run of this process finished (epoch ns): the next run's allocation starts there.
_last_finish_ns: int | None = None
_finish_lock = threading.Lock()
# The process that installed the SIGTERM handler (a forked child inherits it, and only re-raises).
_sigterm_pid: int | None = None


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).isoformat()


def _iso_ns(t_ns: int) -> str:
    """Epoch ns as ISO 8601, exact to the microsecond (no float rounding)."""
    moment = dt.datetime.fromtimestamp(t_ns // 10**9, tz=dt.timezone.utc)
    return (moment + dt.timedelta(microseconds=t_ns % 10**9 // 1000)).isoformat()


def _run_finished_at(t_ns: int) -> None:
    global _last_finish_ns
    with _finish_lock:
        if _last_finish_ns is None or t_ns > _last_finish_ns:
            _last_finish_ns = t_ns


def _process_start_time() -> float | None:
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: S110 - psutil is optional; /proc below
        pass
    try:
        with open("/proc/self/stat", "rb") as fh:
            start_ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


def _jsonable(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        data = dict(value)
    elif hasattr(value, "to_dict"):
        data = value.to_dict()
    elif hasattr(value, "__dict__"):
        data = dict(vars(value))
    else:
        data = {"value": value}
    import json

    return _config_fit(json.loads(encode_json(data).decode("utf-8")))


# The server refuses a config over 64 KiB or 10,000 values (and then takes no telemetry for the
# run): keep under both, with room to spare.
CONFIG_MAX_BYTES = 48 * 1024
CONFIG_MAX_VALUES = 8_000
_CONFIG_ITEM_MAX_BYTES = 2 * 1024


def _values(node: Any) -> int:
    if isinstance(node, dict):
        return len(node) + sum(_values(v) for v in node.values())
    if isinstance(node, list):
        return len(node) + sum(_values(v) for v in node)
    return 0


def _config_fit(data: dict[str, Any]) -> dict[str, Any]:
    """A config the server accepts: as it is when small; else its top-level entries that are
    small themselves, and a note of what was left out (a run must never be refused for it)."""
    size = len(encode_json(data))
    if size <= CONFIG_MAX_BYTES and _values(data) <= CONFIG_MAX_VALUES:
        return data
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    used = 0
    for key, value in data.items():
        item = len(encode_json({key: value}))
        if item <= _CONFIG_ITEM_MAX_BYTES and used + item <= CONFIG_MAX_BYTES - 4096 and _values(value) <= 200:
            kept[key] = value
            used += item
        else:
            dropped.append(str(key))
    logger.warning("phantomhub: config is %d bytes; sent without its large entries %s", size, dropped[:10])
    kept["phantomhub_truncated"] = {"bytes": size, "dropped_keys": dropped[:100], "dropped_count": len(dropped)}
    return kept


class _CudaResolver:
    def __init__(self, pool: Any) -> None:
        from . import _torch

        self._torch = _torch
        self.pool = pool

    def ready(self, marks: list[Any]) -> bool:
        return bool(self._torch.marks_ready(marks))

    def resolve(self, values: list[Any], base: int, marks: list[Any]) -> None:
        self._torch.resolve_marks(values, base, marks, self.pool)

    def drop(self, marks: list[Any]) -> None:
        self._torch.drop_marks(marks, self.pool)


_PhaseT = TypeVar("_PhaseT", bound="_Phase")


class _Phase:
    __slots__ = ("_name", "_run", "_t0")

    def __init__(self, run: Run, name: str) -> None:
        self._run = run
        self._name = name
        self._t0 = 0

    def __enter__(self: _PhaseT) -> _PhaseT:
        self._t0 = time.perf_counter_ns()
        try:
            self._run._rec.mark(MARK_BOUNDARY, self._t0)
        except Exception as exc:
            self._run._error(exc)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        t1 = time.perf_counter_ns()
        try:
            run = self._run
            start = self._t0 + run._clock_offset_ns
            run._event("phase", t_ns=start, name=self._name, t_start_ns=start, dur_ns=t1 - self._t0)
        except Exception as err:
            self._run._error(err)


# The server's bounds of a checkpoint's step and of any integer it stores (docs/api.md).
_EVENT_INT_MAX = {"step": 2**62, "bytes": 2**63 - 1}


def _int_or_none(value: Any, what: str) -> int | None:
    """An int >= 0 for an event's data, None when not given; ValueError/TypeError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int >= 0, not {type(value).__name__}")
    if not 0 <= value <= _EVENT_INT_MAX[what]:
        raise ValueError(f"{what} must be an int >= 0 and <= {_EVENT_INT_MAX[what]}, not {value}")
    return int(value)


class _Checkpoint(_Phase):
    """``run.checkpoint(step)`` and ``run.restoring(step)``: a "checkpoint" or "restore" phase
    around the block (its blocking time), with ``data`` {step, bytes, async}. Set ``.bytes``
    inside the block once the size is known. Nothing is recorded but one event at the end."""

    __slots__ = ("_async", "bytes", "step")

    def __init__(self, run: Run, name: str, step: int, size: int | None, async_: bool | None) -> None:
        super().__init__(run, name)
        self.step = step
        self.bytes = size
        self._async = async_

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        t1 = time.perf_counter_ns()
        run = self._run
        try:
            data = run._checkpoint_data(self.step, self.bytes, self._async)
            if exc_type is not None:  # the time was spent all the same; say the save failed
                data["error"] = f"{exc_type.__module__}.{exc_type.__qualname__}"
            run._phase_event(self._name, self._t0, t1, data)
        except Exception as err:
            run._error(err)


class Run:
    """One training run as seen from this process (one rank)."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str | None = None,
        project: str | None = None,
        team: str | None = None,
        tags: Sequence[str] | None = None,
        config: Any = None,
        gpu_model: str | None = None,
        gpu_count: int | None = None,
        provider: str | None = None,
        region: str | None = None,
        pricing_tier: str | None = None,
        dtype: str | None = None,
        allocation_start: dt.datetime | None = None,
        run_id: str | None = None,
        gpu_devices: Sequence[int] | None = None,
        identity: Identity | None = None,
        job: str | None = None,
        attempt: int | None = None,
    ) -> None:
        self.settings = settings
        self.debug = settings.debug
        self._once = OnceLogger()
        self._finished = False
        self._forked_child = False
        # Reentrant: the SIGTERM handler may finish the run while the main thread is in finish().
        self._lock = threading.RLock()
        self.identity = identity or detect_identity()
        project = project or os.environ.get("PHANTOMHUB_PROJECT")
        team = team or os.environ.get("PHANTOMHUB_TEAM")
        self.job, self.attempt = self._resolve_job(job, attempt)
        self.launched_by, self.launcher_source = self._resolve_launcher()
        self.id, self.run_id_source = resolve_run_id(
            run_id, self.identity, scope=run_id_scope(team, project), attempt=self.attempt
        )
        self.rank = self.identity.rank
        self.world_size = self.identity.world_size
        self._clock_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._started_at = time.time()
        self._cuda = False
        self._torch: Any = None
        self._device_index: int | None = None
        self._cuda_pool: Any = None
        if "torch" in sys.modules or settings.timing == "cuda":
            self._setup_torch()
        devices = (
            list(gpu_devices)
            if gpu_devices is not None
            else ([self._device_index] if self._cuda and self._device_index is not None else [])
        )
        self._gpu_devices = devices
        self._worker = Worker(
            settings,
            WorkerContext(
                run_id=self.id,
                rank=self.rank,
                host=self.identity.host,
                token_fp=token_fingerprint(settings.token),
                clock_offset_ns=self._clock_offset_ns,
                gpu_devices=devices,
                local_rank=self.identity.local_rank if self.identity.node_local else 0,
                local_world_size=self.identity.local_world_size if self.identity.node_local else 1,
            ),
            cuda_resolver=_CudaResolver(self._cuda_pool) if self._cuda else None,
            extra_counters=self._hot_counters,
        )
        self._rec = hp.Recorder(
            self._worker.steps,
            self._worker.items,
            q_max=settings.queue_max_steps,
            items_max=settings.queue_max_items,
            start_worker=self._worker.ensure_started,
            on_error=self._error,
            on_oom=self._on_step_exception,
        )
        self._rec.enabled = settings.mode != "disabled"
        self._rec.mem_every_ns = int(settings.memory_interval_s * 1e9)
        if self._cuda:
            self._setup_cuda_recorder()
        self._step_ctx = hp.StepContext(self._rec)
        self._stages: dict[str, Any] = {}
        self.metadata = self._metadata(
            name=name,
            project=project,
            team=team,
            tags=tags,
            config=config,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            provider=provider or os.environ.get("PHANTOMHUB_PROVIDER"),
            region=region or os.environ.get("PHANTOMHUB_REGION"),
            pricing_tier=pricing_tier or os.environ.get("PHANTOMHUB_PRICING_TIER"),
            dtype=dtype or os.environ.get("PHANTOMHUB_DTYPE"),
            allocation_start=allocation_start,
        )
        self._registry: RunRecord | None = None
        if self._rec.enabled:
            request = self._worker.make_request("run", "/api/v1/runs", self.metadata)
            self._rec.push_item(("request", request))
            self._registry_open(project)

    def _resolve_job(self, job: Any, attempt: Any) -> tuple[Job | None, int | None]:
        """The job and attempt (``resolve_job``); a bad value is an internal error (logged and
        ignored, raised in debug mode), never a reason to lose the run."""
        try:
            found, number, problems = resolve_job(job, attempt)
        except Exception as exc:
            self._error(exc)
            return None, None
        for problem in problems:
            self._error(ValueError(problem))
        return found, number

    def _resolve_launcher(self) -> tuple[str | None, str]:
        """Who launched the run (``_launcher``); a bad value is logged (raised in debug mode) and
        the next source tried: the run is never lost for it."""
        s = self.settings
        try:
            name, source, problems = resolve_launched_by(s.launched_by, s.launcher_source, s.launcher_label)
        except Exception as exc:
            self._error(exc)
            return None, ""
        for problem in problems:
            self._error(ValueError(problem))
        return name, source

    def _registry_open(self, project: str | None) -> None:
        """This process's entry in the host's run registry (read by ``phantomhub-agent node``)."""
        try:
            record = RunRecord(run_id=self.id, project=project, server=self.settings.server, started_at=self._started_at)
            if record.write():
                self._registry = record
                self._worker.on_registered = record.registered
        except Exception as exc:
            self._error(exc)

    # -- setup -----------------------------------------------------------------------------------

    def _setup_torch(self) -> None:
        try:
            from . import _torch

            self._torch = _torch
            self._cuda = _torch.cuda_in_use(self.settings.timing)
            if self._cuda:
                self._device_index = _torch.current_device_index(self.identity.local_rank)
                self._cuda_pool = _torch.CudaEventPool()
        except ImportError:
            self._torch = None
        except Exception as exc:
            self._error(exc)

    def _setup_cuda_recorder(self) -> None:
        assert self._torch is not None and self._device_index is not None
        self._rec.cuda_pool = self._cuda_pool
        try:
            self._rec.mem = self._torch.AllocatorStats(self._device_index)
        except Exception as exc:
            self._error(exc)

    def _metadata(self, **given: Any) -> dict[str, Any]:
        ident = self.identity
        if given["pricing_tier"] is not None and given["pricing_tier"] not in PRICING_TIERS:
            self._error(ValueError(f"pricing_tier must be one of {PRICING_TIERS}, not {given['pricing_tier']!r}"))
            given["pricing_tier"] = None
        if given["dtype"] is not None and given["dtype"] not in DTYPES:
            self._error(ValueError(f"dtype must be one of {DTYPES}, not {given['dtype']!r}"))
            given["dtype"] = None
        gpu_model = given["gpu_model"] or os.environ.get("PHANTOMHUB_GPU_MODEL")
        if gpu_model is None:
            gpu_model = self._device_name() or "cpu"
        gpu_count = given["gpu_count"]
        if gpu_count is None:
            gpu_count = ident.world_size  # one device per rank (a CPU rank counts as one)
        allocation = given["allocation_start"]
        allocation_iso: str | None
        previous_finish_ns = _last_finish_ns
        if allocation is not None:
            allocation_iso = allocation.isoformat() if isinstance(allocation, dt.datetime) else str(allocation)
        elif previous_finish_ns is not None:
            # A later run of this process (a notebook, a sweep loop): the GPU time until the
            # previous run finished was billed to that run, so this one is billed from there.
            allocation_iso = _iso_ns(previous_finish_ns)
        elif os.environ.get("PHANTOMHUB_ALLOCATION_START"):
            allocation_iso = os.environ["PHANTOMHUB_ALLOCATION_START"]
        else:
            start = _process_start_time()
            allocation_iso = _iso(min(start, self._started_at)) if start is not None else None
        name = given["name"] or os.environ.get("PHANTOMHUB_RUN_NAME")
        if not name:
            script = os.path.splitext(os.path.basename(sys.argv[0] or "python"))[0] or "run"
            name = f"{script}-{self.id[:8]}"
        payload: dict[str, Any] = {
            "id": self.id,
            "name": name,
            "project": given["project"],
            "team": given["team"],
            "tags": [str(t) for t in (given["tags"] or [])],
            "gpu_model": gpu_model,
            "gpu_count": int(gpu_count),
            "world_size": ident.world_size,
            "nodes": ident.nodes,
            "provider": given["provider"],
            "region": given["region"],
            "pricing_tier": given["pricing_tier"],
            "dtype": given["dtype"],
            "allocation_start": allocation_iso,
            "started_at": _iso(self._started_at),
            "config": _jsonable(given["config"]),
            "environment": self._environment(),
            # Only when a job is known: the run is an attempt of it (docs/agent.md, "Jobs").
            "job": self.job.wire() if self.job is not None else None,
            "launched_by": self.launched_by,
        }
        return {k: v for k, v in payload.items() if v is not None}

    def _device_name(self) -> str | None:
        if not self._cuda or self._torch is None or self._device_index is None:
            return None
        try:
            return str(self._torch.device_name(self._device_index))
        except Exception:
            return None

    def _environment(self) -> dict[str, Any]:
        ident = self.identity
        env: dict[str, Any] = {
            "host": ident.host,
            "pid": os.getpid(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "agent": __version__,
            "rank": ident.rank,
            "local_rank": ident.local_rank,
            "world_size": ident.world_size,
            "local_world_size": ident.local_world_size,
            "nodes": ident.nodes,
            "run_id_source": self.run_id_source,
            "timing": "cuda" if self._cuda else "cpu",
            "cpu_count": os.cpu_count(),
        }
        if self.launcher_source:
            env["launcher_source"] = self.launcher_source  # where launched_by was read
        for var in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "KUBERNETES_SERVICE_HOST"):
            if os.environ.get(var):
                env[var.lower()] = os.environ[var]
        if self._torch is not None:
            with contextlib.suppress(Exception):  # metadata is best effort
                env.update(self._torch.environment())
        if self._device_index is not None:
            env["device_index"] = self._device_index
        if self._gpu_devices:
            with contextlib.suppress(Exception):  # the GPUs this rank holds, for the fleet (_gpus.py)
                gpus = rank_gpus(self._gpu_devices)
                if gpus:
                    env["gpus"] = gpus
        driver = _nvidia_driver()
        if driver:
            env["driver"] = driver
        for module in ("pytorch_lightning", "lightning", "transformers", "accelerate", "deepspeed"):
            mod = sys.modules.get(module)
            if mod is not None:
                env[module] = str(getattr(mod, "__version__", "unknown"))
        return env

    # -- errors ----------------------------------------------------------------------------------

    def _error(self, exc: BaseException) -> None:
        self._worker_counters_bump()
        self._once.error(f"run-{type(exc).__name__}", "phantomhub: internal error (ignored, training continues): %r", exc)
        if self.debug:
            raise exc

    def _worker_counters_bump(self) -> None:
        worker = getattr(self, "_worker", None)
        if worker is not None:
            worker.counters.internal_errors += 1

    def _hot_counters(self) -> dict[str, int]:
        rec = self._rec
        return {"dropped_steps": rec.dropped_steps, "dropped_events": rec.dropped_events}

    def _on_step_exception(self, exc: BaseException | None, step: int) -> None:
        if self._torch is None:
            return
        if exc is not None and not self._torch.is_oom(exc):
            return
        data: dict[str, Any] = {"step": step}
        if exc is not None:
            data["message"] = str(exc)[:500]
        self._event("oom", t_ns=time.time_ns(), data=data)

    def _event(self, kind: str, **fields: Any) -> None:
        event: dict[str, Any] = {"id": uuid.uuid4().hex, "kind": kind, "rank": self.rank}
        event.update(fields)
        event.setdefault("t_ns", time.time_ns())
        self._rec.push_item(("event", event))

    # -- the training loop -----------------------------------------------------------------------

    def step(
        self,
        tokens: int | None = None,
        samples: int | None = None,
        flops: int | None = None,
        step: int | None = None,
    ) -> hp.StepContext:
        """Context manager around one training step. ``flops`` overrides ``count_flops``."""
        rec = self._rec
        rec.tokens = tokens
        rec.samples = samples
        rec.flops = flops
        if step is not None:
            if not rec.numbered:
                self._numbering_begins()
            rec.step_no = step
        return self._step_ctx

    def _numbering_begins(self) -> None:
        """From the first explicit step number on, steps keep the numbers the user gives (they are
        never shifted after the steps an earlier process stored, as the agent's own numbers are)."""
        rec = self._rec
        rec.numbered = True
        try:
            rec.mark(MARK_NUMBERED, 0)
        except Exception as exc:
            self._error(exc)

    def stage(self, name: str) -> Any:
        """Context manager timing one stage: data, forward, backward, optimizer or comm."""
        stage = self._stages.get(name)
        if stage is None:
            stage = self._make_stage(name)
        return stage

    def _make_stage(self, name: str) -> Any:
        slot = hp.stage_slot(name)
        if slot is None:
            try:
                self._error(ValueError(f"unknown stage {name!r}; use one of data, forward, backward, optimizer, comm"))
            finally:
                self._stages[name] = hp.NullStage()
            return self._stages[name]
        stage = hp.CudaStage(self._rec, slot) if self._cuda else hp.CpuStage(self._rec, slot)
        self._stages[name] = stage
        return stage

    def data(self, iterable: Iterable[T]) -> Iterator[T]:
        """Yields from ``iterable``; the time blocked in ``next()`` becomes the coming step's data_ns."""
        rec = self._rec
        iterator = iter(iterable)
        pc = time.perf_counter_ns
        while True:
            t0 = pc()
            try:
                item = next(iterator)
            except StopIteration:
                return
            t1 = pc()
            if rec.data_t0 is None:
                rec.data_t0 = t0
            current = rec.data_ns
            rec.data_ns = t1 - t0 if current is None else current + t1 - t0
            yield item

    def phase(self, name: str) -> _Phase:
        """Context manager for non-step time: eval, checkpoint, ... (sent as a "phase" event)."""
        return _Phase(self, name)

    def record_phase(self, name: str, start_pc: int, end_pc: int, data: Mapping[str, Any] | None = None) -> None:
        """A phase measured elsewhere (``time.perf_counter_ns`` readings), e.g. by a framework hook."""
        try:
            self._rec.mark(MARK_BOUNDARY, start_pc)
            self._phase_event(name, start_pc, end_pc, data)
        except Exception as exc:
            self._error(exc)

    def _phase_event(self, name: str, start_pc: int, end_pc: int, data: Mapping[str, Any] | None) -> None:
        start = start_pc + self._clock_offset_ns
        fields: dict[str, Any] = {"name": name, "t_start_ns": start, "dur_ns": max(0, end_pc - start_pc)}
        if data:
            fields["data"] = dict(data)
        self._event("phase", t_ns=start, **fields)

    # -- checkpoints -----------------------------------------------------------------------------

    def _checkpoint_data(self, step: Any, size: Any, async_: bool | None) -> dict[str, Any]:
        """{step, bytes, async} without the values not given; a bad value is reported and left out."""
        data: dict[str, Any] = {}
        for key, value in (("step", step), ("bytes", size)):
            try:
                checked = _int_or_none(value, key)
            except (TypeError, ValueError) as exc:
                self._error(exc)
                continue
            if checked is not None:
                data[key] = checked
        if async_ is not None:
            data["async"] = bool(async_)
        return data

    def checkpoint(self, step: int, bytes: int | None = None, async_: bool = False) -> _Checkpoint:
        """Context manager around a checkpoint save: a "checkpoint" phase of the time the block
        blocked training, with data {step, bytes, async}. Set ``.bytes`` inside the block when the
        size is known only then; ``async_=True`` when the block only stages an asynchronous save.

            with run.checkpoint(step) as ck:
                torch.save(state, path)
                ck.bytes = os.path.getsize(path)
        """
        return _Checkpoint(self, "checkpoint", step, bytes, bool(async_))

    def restoring(self, step: int, bytes: int | None = None) -> _Checkpoint:
        """Context manager around loading a checkpoint: a "restore" phase of the load, with data
        {step, bytes} (``step``: the step the checkpoint was saved at)."""
        return _Checkpoint(self, "restore", step, bytes, None)

    def restored(self, step: int, bytes: int | None = None, started_pc: int | None = None) -> None:
        """After loading a checkpoint saved at ``step``: a "restore" phase from ``started_pc`` (a
        ``time.perf_counter_ns()`` reading taken before the load) to now, or of no length now."""
        end = time.perf_counter_ns()
        try:
            start = end if started_pc is None else int(started_pc)
            if start > end:
                raise ValueError("started_pc is later than now: take it with time.perf_counter_ns() before the load")
        except (TypeError, ValueError) as exc:
            self._error(exc)
            start = end
        self.record_phase("restore", start, end, self._checkpoint_data(step, bytes, None))

    # -- lower-level hooks for integrations -------------------------------------------------------

    def step_begin(
        self,
        step: int | None = None,
        tokens: int | None = None,
        samples: int | None = None,
        flops: int | None = None,
    ) -> None:
        self.step(tokens=tokens, samples=samples, flops=flops, step=step).__enter__()

    def step_end(self, exc: BaseException | None = None) -> None:
        self._rec.end(exc)

    def data_wait(self, t_start_pc: int, dur_ns: int) -> None:
        """Adds a data wait measured elsewhere (perf_counter_ns start, duration) to the coming step."""
        rec = self._rec
        if rec.data_t0 is None:
            rec.data_t0 = t_start_pc
        rec.data_ns = dur_ns if rec.data_ns is None else rec.data_ns + dur_ns

    @property
    def in_step(self) -> bool:
        return bool(self._rec.open)

    @property
    def step_number(self) -> int:
        return int(self._rec.step_no)

    # -- FLOPs, DDP ------------------------------------------------------------------------------

    def count_flops(self, model: Any, example: Any, loss_fn: Callable[[Any], Any] | None = None) -> int | None:
        """Counts FLOPs of one forward+backward on ``example``; used for every later step."""
        try:
            from . import _torch

            flops = _torch.count_step_flops(model, example, loss_fn)
            self._rec.default_flops = flops
            return flops
        except Exception as exc:
            self._error(exc)
            return None

    def set_flops_per_step(self, flops: int | None) -> None:
        self._rec.default_flops = None if flops is None else int(flops)

    def watch(self, model: T) -> T:
        """Measures exposed gradient-sync wait of a DistributedDataParallel model (a comm hook)."""
        try:
            from . import _torch

            tracker = _torch.watch_ddp(model, lambda pg: _torch.CommTracker(pg, cuda=self._cuda, pool=self._cuda_pool))
            if tracker is not None:
                self._rec.comm = tracker
        except Exception as exc:
            self._error(exc)
        return model

    # -- flush and finish ------------------------------------------------------------------------

    @property
    def counters(self) -> dict[str, int]:
        return self._worker.counters_snapshot()

    @property
    def finished(self) -> bool:
        return self._finished

    def flush(self, timeout: float | None = None) -> bool:
        """Sends (or spools) everything recorded so far, except the step still waiting for its end.

        A step lasts until the next one starts, so the last finished step is held until then;
        called inside a step, the open step's start ends it and it goes too."""
        try:
            rec = self._rec
            if not rec.enabled:
                return True
            if rec.open:
                rec.mark(MARK_BOUNDARY, rec.start)
            return self._worker.flush(self.settings.finish_timeout_s if timeout is None else timeout)
        except Exception as exc:
            self._error(exc)
            return False

    def finish(self, status: str = "finished", timeout: float | None = None, *, exception: BaseException | None = None) -> None:
        """Ends the run: last step closed, finish event sent, everything flushed within ``timeout``.

        ``exception``: what ended the run, if anything; its cause (oom, collective_timeout,
        exception), type and message go with the finish event (``_ends``)."""
        data: dict[str, Any] | None = None
        if exception is not None:
            try:
                data = end_cause(exception)
            except Exception as exc:
                self._error(exc)
        self._end(status, timeout, data)

    def _end(self, status: str, timeout: float | None, data: dict[str, Any] | None) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
        _active.discard(self)
        try:
            if status not in FINISH_STATUSES:
                self._error(ValueError(f"status must be one of {FINISH_STATUSES}, not {status!r}"))
                status = "failed"
            rec = self._rec
            if rec.open:
                rec.end(None)
            rec.mark(MARK_END, time.perf_counter_ns())
            if not self._forked_child:
                finished_ns = time.time_ns() // 1000 * 1000  # microseconds: what the server keeps
                if data:
                    self._event("finish", status=status, t_ns=finished_ns, data=data)
                else:
                    self._event("finish", status=status, t_ns=finished_ns)
                _run_finished_at(finished_ns)
            if rec.enabled:
                self._worker.finish(self.settings.finish_timeout_s if timeout is None else timeout)
        except Exception as exc:
            self._error(exc)
        if self._registry is not None:
            self._registry.remove()
        if self.debug and self._worker.errors:
            first = self._worker.errors[0]
            raise AgentError(f"the agent's background thread failed: {first!r}") from first

    def _after_fork_in_child(self) -> None:
        self._forked_child = True
        self._rec.live = False
        self._worker.after_fork_in_child()
        self._once.reset()
        self._lock = threading.RLock()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        clean = exc_type is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        self.finish("finished" if clean else "crashed", exception=None if clean else exc)

    def __repr__(self) -> str:
        return f"<phantomhub Run {self.id} rank={self.rank}/{self.world_size} mode={self.settings.mode}>"


def _nvidia_driver() -> str | None:
    if "pynvml" not in sys.modules:
        try:
            import importlib.util

            if importlib.util.find_spec("pynvml") is None:
                return None
        except Exception:
            return None
    try:
        import pynvml

        pynvml.nvmlInit()
        value = pynvml.nvmlSystemGetDriverVersion()
        return value.decode() if isinstance(value, bytes) else str(value)
    except Exception:
        return None


# -- process-wide hooks ----------------------------------------------------------------------------


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    for run in list(_active):
        try:
            run.finish("crashed", exception=exc)
        except Exception as err:  # never mask the user's exception
            logger.error("phantomhub: could not mark the run crashed: %r", err)
    previous = _previous_excepthook or sys.__excepthook__
    previous(exc_type, exc, tb)


def _at_exit() -> None:
    for run in list(_active):
        try:
            if run._forked_child:
                run.flush()
            else:
                run.finish("finished")
        except Exception as err:
            logger.error("phantomhub: finishing at exit failed: %r", err)


def _after_fork_in_child() -> None:
    for run in list(_active):
        run._after_fork_in_child()


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM with no handler of the program's: finish the runs ("failed", cause "sigterm")
    within their finish timeout, then die of SIGTERM as the default action would have."""
    try:
        if os.getpid() == _sigterm_pid:
            for run in list(_active):
                if run._forked_child:
                    continue
                try:
                    run._end("failed", None, sigterm_cause())
                except Exception as err:  # the signal's default action must still happen
                    logger.error("phantomhub: could not finish the run on SIGTERM: %r", err)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _install_sigterm() -> None:
    """Our SIGTERM handler, in the main thread, only where SIGTERM has its default action."""
    global _sigterm_pid
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm and _sigterm_pid == os.getpid():
            return
        if current is not signal.SIG_DFL and current is not _on_sigterm:
            return  # the program's own handler (or SIG_IGN): never replaced
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_pid = os.getpid()
    except (ValueError, OSError) as exc:  # not the main interpreter, or an odd platform
        logger.debug("phantomhub: no SIGTERM handler: %s", exc)


def _install_hooks() -> None:
    global _hooks_installed, _previous_excepthook
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook
        atexit.register(_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)


def init(
    project: str | None = None,
    team: str | None = None,
    name: str | None = None,
    *,
    gpu_model: str | None = None,
    gpu_count: int | None = None,
    tags: Sequence[str] | None = None,
    config: Any = None,
    provider: str | None = None,
    region: str | None = None,
    pricing_tier: str | None = None,
    dtype: str | None = None,
    allocation_start: dt.datetime | None = None,
    run_id: str | None = None,
    server: str | None = None,
    token: str | None = None,
    mode: str | None = None,
    debug: bool | None = None,
    gpu_devices: Sequence[int] | None = None,
    job: str | None = None,
    attempt: int | None = None,
    **settings: Any,
) -> Run:
    """Starts (or resumes) a run and returns it. Usable as a context manager.

    Server, token and mode default to PHANTOMHUB_SERVER, PHANTOMHUB_TOKEN, PHANTOMHUB_MODE. Other
    keyword arguments are agent settings (``spool_dir``, ``flush_interval_s``, ``finish_timeout_s``,
    ``timing``, ``handle_sigterm``...; see ``phantomhub_agent.Settings``). ``job`` and ``attempt``
    (PHANTOMHUB_JOB, PHANTOMHUB_ATTEMPT) link the run to a job across attempts; without them the
    launcher's job is used (torchelastic, Slurm, Kubernetes), if any.
    """
    global _current
    merged = dict(settings)
    merged.update(server=server, token=token, mode=mode, debug=debug)
    resolved = settings_from(merged)
    if resolved.mode == "online" and not resolved.token and resolved.token_file is None:
        logger.warning("phantomhub: no token (PHANTOMHUB_TOKEN); telemetry goes to the spool at %s", resolved.spool_dir)
        resolved.mode = "offline"
    try:
        run = Run(
            resolved,
            name=name,
            project=project,
            team=team,
            tags=tags,
            config=config,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            provider=provider,
            region=region,
            pricing_tier=pricing_tier,
            dtype=dtype,
            allocation_start=allocation_start,
            run_id=run_id,
            gpu_devices=gpu_devices,
            job=job,
            attempt=attempt,
        )
    except Exception:
        if resolved.debug:
            raise
        logger.exception("phantomhub: could not start the run; telemetry is disabled")
        resolved.mode = "disabled"
        run = Run(resolved, name=name, run_id=run_id)
    _install_hooks()
    if run._rec.enabled:
        _active.add(run)
        if resolved.handle_sigterm:
            _install_sigterm()
    _current = run
    return run


def get_run() -> Run | None:
    """The run most recently started in this process, if it is still active."""
    run = _current
    if run is None or run.finished:
        return None
    return run

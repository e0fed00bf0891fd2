"""Agent settings: keyword arguments of ``init`` first, then PHANTOMHUB_* variables, then defaults.

A malformed variable never stops training: it is logged and its default used (in debug mode it
raises, so a typo in a test environment is found at once).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

from ._log import logger
from ._tokenfile import token_read

MODES = ("online", "offline", "disabled")
PRICING_TIERS = ("on_demand", "reserved", "spot")
DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")
TIMINGS = ("auto", "cpu", "cuda")
WIRES = ("batch", "separate")

DEFAULT_SERVER = "http://127.0.0.1:8000"
GIB = 1024**3

T = TypeVar("T")


def default_spool_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "phantomhub" / "spool"


@dataclasses.dataclass
class Settings:
    server: str = DEFAULT_SERVER
    token: str | None = None
    # A file holding the token (a mounted Kubernetes Secret): read at start instead of ``token``,
    # and again when the server answers 401, so a rotated token is picked up without a restart.
    token_file: Path | None = None
    mode: str = "online"
    debug: bool = False
    spool_dir: Path = dataclasses.field(default_factory=default_spool_dir)
    spool_max_bytes: int = GIB
    # Batches leave when any limit is reached: rows, encoded bytes, or age. What a rank costs the
    # server is mostly per request, not per row (docs/performance.md, "Fleet"): one a minute costs
    # it about a quarter of one every 10 s.
    flush_interval_s: float = 60.0
    # What is recorded but not yet sent is written to the spool this often (a small fsynced file),
    # so a SIGKILL or power loss loses at most this much, whatever the flush interval; 0: never.
    checkpoint_interval_s: float = 10.0
    batch_max_rows: int = 5000
    batch_max_bytes: int = 1024 * 1024
    # Steps waiting for the background thread; beyond this they are dropped and counted.
    queue_max_steps: int = 20000
    queue_max_items: int = 10000
    request_timeout_s: float = 10.0
    # In-memory retries of one batch before it goes to the spool and the sender backs off.
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0
    finish_timeout_s: float = 5.0
    system_interval_s: float = 1.0
    counters_interval_s: float = 60.0
    # "batch": one POST /api/v1/runs/{id}/batch per interval with the steps, samples and events of
    # this rank; "separate": one request per kind (/steps, /samples, /events), for servers older
    # than the batch endpoint.
    wire: str = "batch"
    # On a node of several local ranks (LOCAL_RANK and LOCAL_WORLD_SIZE set, as torchrun does),
    # local rank 0 sends the node's batches in one request (``_node``); False: each rank its own.
    node_batches: bool = True
    gzip_min_bytes: int = 1024
    timing: str = "auto"
    # Allocator stats are read at most this often (they cost tens of microseconds).
    memory_interval_s: float = 0.05
    # SIGTERM with no handler of the program's own: finish the run ("failed", cause "sigterm")
    # within finish_timeout_s, then die of the signal as before. Installed by init() in the main
    # thread only, and never over a handler the program set.
    handle_sigterm: bool = True
    # Who launched the run (``_launcher``): as given, else read from the named source (auto,
    # unix, slurm, kubernetes); ``launcher_label`` names the pod label kubernetes reads.
    launched_by: str | None = None
    launcher_source: str | None = None
    launcher_label: str | None = None


_ENV: dict[str, tuple[str, Callable[[str], Any]]] = {
    "server": ("PHANTOMHUB_SERVER", str),
    "token": ("PHANTOMHUB_TOKEN", str),
    "token_file": ("PHANTOMHUB_TOKEN_FILE", lambda v: Path(v).expanduser()),
    "mode": ("PHANTOMHUB_MODE", str),
    "debug": ("PHANTOMHUB_DEBUG", lambda v: _parse_bool(v)),
    "spool_dir": ("PHANTOMHUB_SPOOL_DIR", lambda v: Path(v).expanduser()),
    "spool_max_bytes": ("PHANTOMHUB_SPOOL_MAX_BYTES", int),
    "flush_interval_s": ("PHANTOMHUB_FLUSH_INTERVAL", float),
    "checkpoint_interval_s": ("PHANTOMHUB_CHECKPOINT_INTERVAL", float),
    "finish_timeout_s": ("PHANTOMHUB_FINISH_TIMEOUT", float),
    "request_timeout_s": ("PHANTOMHUB_REQUEST_TIMEOUT", float),
    "system_interval_s": ("PHANTOMHUB_SYSTEM_INTERVAL", float),
    "timing": ("PHANTOMHUB_TIMING", str),
    "wire": ("PHANTOMHUB_WIRE", str),
    "node_batches": ("PHANTOMHUB_NODE_BATCHES", lambda v: _parse_bool(v)),
    "handle_sigterm": ("PHANTOMHUB_HANDLE_SIGTERM", lambda v: _parse_bool(v)),
    "launched_by": ("PHANTOMHUB_LAUNCHED_BY", str),
    "launcher_source": ("PHANTOMHUB_LAUNCHER_SOURCE", str),
    "launcher_label": ("PHANTOMHUB_LAUNCHER_LABEL", str),
}


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def settings_from(overrides: dict[str, Any], environ: dict[str, str] | None = None) -> Settings:
    """Build settings from ``init`` keyword arguments, the environment, and the defaults."""
    env = os.environ if environ is None else environ
    settings = Settings()
    debug_raw = overrides.get("debug")
    debug = bool(debug_raw) if debug_raw is not None else _env_debug(env)
    for name, (var, parse) in _ENV.items():
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        try:
            setattr(settings, name, parse(raw.strip()))
        except ValueError as exc:
            if debug:
                raise ValueError(f"{var}={raw!r}: {exc}") from exc
            logger.error("phantomhub: ignoring %s=%r (%s); using the default", var, raw, exc)
    for name, value in overrides.items():
        if value is None:
            continue
        if not hasattr(settings, name):
            raise TypeError(f"unknown setting {name!r}")
        if name in ("spool_dir", "token_file"):
            value = Path(value).expanduser()
        setattr(settings, name, value)
    settings.debug = debug
    settings.server = settings.server.rstrip("/")
    if settings.token_file is not None:
        if settings.token:
            logger.info("phantomhub: the token is read from %s (PHANTOMHUB_TOKEN_FILE), not the one given", settings.token_file)
        settings.token = token_read(settings.token_file)
        if settings.token is None:
            logger.warning("phantomhub: no token in %s yet; telemetry waits in the spool until one is there", settings.token_file)
    _check(settings)
    return settings


def _env_debug(env: Any) -> bool:
    try:
        return _parse_bool(str(env.get("PHANTOMHUB_DEBUG", "")))
    except ValueError:
        return False


def _check(settings: Settings) -> None:
    problems = []
    if settings.mode not in MODES:
        problems.append(f"mode must be one of {MODES}, not {settings.mode!r}")
    if settings.timing not in TIMINGS:
        problems.append(f"timing must be one of {TIMINGS}, not {settings.timing!r}")
    if settings.wire not in WIRES:
        problems.append(f"wire must be one of {WIRES}, not {settings.wire!r}")
    if not settings.server.startswith(("http://", "https://")):
        problems.append(f"server must be an http(s) URL, not {settings.server!r}")
    if not 1 <= settings.batch_max_rows <= 10000:
        problems.append("batch_max_rows must be between 1 and 10000 (the server's limit)")
    if settings.checkpoint_interval_s < 0:
        problems.append("checkpoint_interval_s must be >= 0 (0 turns checkpoints off)")
    if settings.spool_max_bytes < 0:
        problems.append("spool_max_bytes must be >= 0")
    if not problems:
        return
    message = "; ".join(problems)
    if settings.debug:
        raise ValueError(message)
    logger.error("phantomhub: %s; the agent is disabled for this run", message)
    settings.mode = "disabled"

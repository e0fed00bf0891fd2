"""Who launched the run: a person's or a service's name, sent once at registration (``launched_by``).

The server shows it on the run, filters runs by it, and (where the organisation turns it on) ranks
people by the money their runs waste (docs/agent.md, "Who launched it"). It is a label, not a
credential: nothing is authorised by it, so it is read from where the launcher already says it.

In order of precedence:

1. ``launched_by=`` or ``PHANTOMHUB_LAUNCHED_BY``: as given.
2. The source ``launcher_source=`` or ``PHANTOMHUB_LAUNCHER_SOURCE`` names (default ``auto``):

   - ``slurm``: ``SLURM_JOB_USER``, the user who submitted the job;
   - ``kubernetes``: the pod's label named by ``PHANTOMHUB_LAUNCHER_LABEL``, which the pod passes
     in ``PHANTOMHUB_LAUNCHER_LABEL_VALUE`` through the downward API; else the pod's service
     account, from the mounted token (its ``sub`` claim, ``system:serviceaccount:<ns>:<name>``);
   - ``unix``: the user the process runs as (``getpass.getuser``);
   - ``auto``: ``slurm`` inside a Slurm job (``SLURM_JOB_ID`` set), ``kubernetes`` inside a pod
     (``KUBERNETES_SERVICE_HOST`` set), and ``unix`` when those find nothing.

A value that is not 1 to 128 printable characters is never sent (nor cut short: a shortened name
could be someone else's); the problem is reported and the next source is tried.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

LAUNCHED_BY_MAX_CHARS = 128  # the server's bound (telemetry Run.launched_by)
LAUNCHER_SOURCES = ("auto", "unix", "slurm", "kubernetes")
# Where Kubernetes mounts a pod's service account token.
K8S_TOKEN_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
_TOKEN_MAX_BYTES = 64 * 1024


def check_launched_by(value: object) -> str:
    """A launcher identity as given: a string of 1 to 128 printable characters, blanks around it
    removed."""
    if not isinstance(value, str):
        raise TypeError(f"launched_by must be a string, not {type(value).__name__}")
    name = value.strip()
    if not name:
        raise ValueError("launched_by must not be empty")
    if len(name) > LAUNCHED_BY_MAX_CHARS:
        raise ValueError(f"launched_by must be at most {LAUNCHED_BY_MAX_CHARS} characters, not {len(name)}")
    if not name.isprintable():
        raise ValueError("launched_by must be printable (no control characters)")
    return name


def _service_account(token_file: Path) -> str | None:
    """``system:serviceaccount:<namespace>:<name>`` from the mounted token's claims, or None. The
    token is not verified: it is read for its subject only, and never sent anywhere."""
    try:
        with open(token_file, "rb") as fh:
            token = fh.read(_TOKEN_MAX_BYTES).strip()
        payload = token.split(b".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    if isinstance(subject, str) and subject.startswith("system:serviceaccount:"):
        return subject
    return None


def _unix_user(getuser: Callable[[], str]) -> str | None:
    try:
        return getuser()
    except (OSError, KeyError, ImportError):  # no login name, no passwd entry (a bare container)
        return None


def resolve_launched_by(
    explicit: object = None,
    source: object = None,
    label: object = None,
    env: Mapping[str, str] | None = None,
    *,
    token_file: Path = K8S_TOKEN_FILE,
    getuser: Callable[[], str] = getpass.getuser,
) -> tuple[str | None, str, list[str]]:
    """(the launcher identity or None, where it came from, the problems met). The place is
    ``explicit``, ``slurm``, ``kubernetes_label``, ``kubernetes_service_account``, ``unix``, or
    ``""`` when nothing was found. Arguments left None are read from the environment."""
    env = os.environ if env is None else env
    problems: list[str] = []
    given = explicit if explicit is not None else env.get("PHANTOMHUB_LAUNCHED_BY")
    if given is not None and not (isinstance(given, str) and given.strip() == "" and explicit is None):
        try:
            return check_launched_by(given), "explicit", problems
        except (TypeError, ValueError) as exc:
            problems.append(f"launched_by={given!r}: {exc}; the launcher source is used")
    chosen = source if source is not None else (env.get("PHANTOMHUB_LAUNCHER_SOURCE") or "auto")
    chosen = str(chosen).strip().lower() or "auto"
    if chosen not in LAUNCHER_SOURCES:
        problems.append(f"launcher_source={chosen!r} must be one of {LAUNCHER_SOURCES}; auto is used")
        chosen = "auto"
    label_name = label if label is not None else env.get("PHANTOMHUB_LAUNCHER_LABEL")
    candidates: list[tuple[str, Callable[[], str | None]]] = []
    slurm = ("slurm", lambda: env.get("SLURM_JOB_USER"))
    kube_label = ("kubernetes_label", lambda: env.get("PHANTOMHUB_LAUNCHER_LABEL_VALUE") if label_name else None)
    kube_account = ("kubernetes_service_account", lambda: _service_account(token_file))
    unix = ("unix", lambda: _unix_user(getuser))
    if chosen == "slurm":
        candidates = [slurm]
    elif chosen == "kubernetes":
        candidates = [kube_label, kube_account]
    elif chosen == "unix":
        candidates = [unix]
    else:
        if (env.get("SLURM_JOB_ID") or "").strip():
            candidates.append(slurm)
        if (env.get("KUBERNETES_SERVICE_HOST") or "").strip():
            candidates += [kube_label, kube_account]
        candidates.append(unix)
    for place, read in candidates:
        raw = read()
        if raw is None or raw.strip() == "":
            continue
        try:
            return check_launched_by(raw), place, problems
        except ValueError as exc:
            problems.append(f"the {place} launcher {raw!r}: {exc}")
    if chosen != "auto":
        problems.append(f"launcher_source={chosen!r} found no launcher; the run has none")
    return None, "", problems

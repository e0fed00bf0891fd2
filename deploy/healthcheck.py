"""Container healthchecks, one per role: `healthcheck.py [web|worker|beat]`; exit 0 when healthy.

web (the default): GET /api/v1/health from this container's gunicorn answers 200. Django answers
only the hosts in PHANTOMHUB_ALLOWED_HOSTS (400 to any other Host header), so the request names
the first of them rather than 127.0.0.1, which a real deployment does not list. The health path
is exempt from the HTTPS redirect (settings.SECURE_REDIRECT_EXEMPT), so this works over plain
http whatever PHANTOMHUB_SSL_REDIRECT says.

worker: this container's Celery worker (node celery@$HOSTNAME, as deploy/entrypoint.sh names it)
answers a ping over the broker, as `celery -A phantomhub inspect ping --destination
celery@$HOSTNAME` does.

beat: beat rewrites its schedule file (PHANTOMHUB_VAR_DIR/celerybeat-schedule, plus whatever
suffix the dbm module adds) at least every 3 minutes while its loop runs (Celery's
PersistentScheduler.sync_every, after a sleep of at most the sweep interval or 5 minutes); a
file older than BEAT_STALE_S means beat is stuck or gone.
"""

from __future__ import annotations

import http.client
import os
import socket
import sys
import time
from pathlib import Path

PATH = "/api/v1/health"
BEAT_SCHEDULE = "celerybeat-schedule"
BEAT_STALE_S = 600.0
WORKER_PING_TIMEOUT_S = 5.0


def health_host(allowed_hosts: str | None) -> str:
    """A Host header that Django's ALLOWED_HOSTS check accepts, from PHANTOMHUB_ALLOWED_HOSTS."""
    for entry in (allowed_hosts or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        if entry == "*":
            return "localhost"
        return entry.lstrip(".")  # ".example.com" allows example.com and its subdomains
    return "localhost"  # the settings' default list names it


def check(port: int, host: str, timeout_s: float = 4.0) -> tuple[bool, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", PATH, headers={"Host": host})
        response = connection.getresponse()
        return response.status == 200, f"{response.status} {response.read(200)!r}"
    except OSError as exc:
        return False, str(exc)
    finally:
        connection.close()


def beat_check(var_dir: Path, now: float | None = None, stale_s: float = BEAT_STALE_S) -> tuple[bool, str]:
    """Whether beat's schedule file (any dbm flavour of it) was written in the last `stale_s`."""
    files = list(var_dir.glob(f"{BEAT_SCHEDULE}*"))
    if not files:
        return False, f"no {var_dir / BEAT_SCHEDULE}: beat has not started"
    age_s = (time.time() if now is None else now) - max(path.stat().st_mtime for path in files)
    if age_s > stale_s:
        return False, f"{var_dir / BEAT_SCHEDULE} last written {age_s:.0f} s ago (more than {stale_s:.0f} s)"
    return True, f"schedule written {age_s:.0f} s ago"


def worker_check(node: str, timeout_s: float = WORKER_PING_TIMEOUT_S) -> tuple[bool, str]:
    """Whether the Celery worker `node` answers a ping through the broker within `timeout_s`."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")
    from phantomhub.celery import app

    try:
        replies = app.control.ping(destination=[node], timeout=timeout_s)
    except Exception as exc:  # the broker is unreachable: the worker cannot be working either
        return False, f"ping {node}: {type(exc).__name__}: {exc}"
    if not any(node in reply for reply in replies):
        return False, f"{node} did not answer a ping within {timeout_s:g} s"
    return True, f"{node}: pong"


def main(argv: list[str]) -> int:
    role = argv[1] if len(argv) > 1 else "web"
    if role == "web":
        port = int(os.environ.get("PHANTOMHUB_PORT") or 8000)
        host = health_host(os.environ.get("PHANTOMHUB_ALLOWED_HOSTS"))
        healthy, detail = check(port, host)
        detail = f"GET http://127.0.0.1:{port}{PATH} (Host: {host}): {detail}"
    elif role == "worker":
        healthy, detail = worker_check(f"celery@{os.environ.get('HOSTNAME') or socket.gethostname()}")
    elif role == "beat":
        healthy, detail = beat_check(Path(os.environ.get("PHANTOMHUB_VAR_DIR") or "/app/var"))
    else:
        print(f"usage: {argv[0]} [web|worker|beat]", file=sys.stderr)
        return 2
    if not healthy:
        print(detail, file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

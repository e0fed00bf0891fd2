"""gunicorn settings for PhantomHub's web processes (the container, systemd, `make run`).

`gunicorn phantomhub.wsgi --config deploy/gunicorn.py`; options given on the command line win.

Forwarded headers are trusted only from PHANTOMHUB_TRUSTED_PROXIES (none by default): gunicorn
takes the scheme from X-Forwarded-Proto only when the peer is one of them, and `pre_request`
drops every X-Forwarded-* and Forwarded header that comes from anyone else, so that Django
(whose SECURE_PROXY_SSL_HEADER is set once proxies are configured) never sees a client's claim.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from phantomhub.env import env_int, env_networks

bind = f"0.0.0.0:{env_int('PHANTOMHUB_PORT', 8000, minimum=1, maximum=65535)}"
workers = env_int("PHANTOMHUB_WEB_WORKERS", 4, minimum=1, maximum=512)
accesslog = "-"

_trusted = env_networks("PHANTOMHUB_TRUSTED_PROXIES")
forwarded_allow_ips = ",".join(_trusted)  # "" trusts no one (gunicorn's own default is 127.0.0.1)
_networks = [ipaddress.ip_network(entry) for entry in _trusted if entry != "*"]


def peer_is_trusted(peer_addr: Any) -> bool:
    """The rule gunicorn applies to forwarded_allow_ips: a Unix socket's peer is the local proxy."""
    if not isinstance(peer_addr, tuple):
        return True
    if "*" in _trusted:
        return True
    try:
        address = ipaddress.ip_address(peer_addr[0])
    except ValueError:
        return False
    return any(address in network for network in _networks)


def _forwarded(name: str) -> bool:
    return name.startswith("X-FORWARDED-") or name == "FORWARDED"  # gunicorn upper-cases names


def pre_request(worker: Any, req: Any) -> None:
    worker.log.debug("%s %s", req.method, req.path)
    if not peer_is_trusted(req.peer_addr):
        req.headers = [(name, value) for name, value in req.headers if not _forwarded(name)]


def post_worker_init(worker: Any) -> None:
    # Import the URLconf, and with it every view, DRF and the API schema, before the first
    # request rather than during it: about 0.3 s that a worker's first ingest batch would wait.
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  # the property imports the modules
    # And what a worker's first analysis request builds (Celery's producer, the Redis client),
    # about 80 ms more of CPU; no connection is opened here.
    from django.conf import settings

    if not settings.CELERY_TASK_ALWAYS_EAGER:
        from phantomhub.waste.tasks import producer_warm

        try:
            producer_warm()
        except Exception:  # ingest must start anyway: the first analysis request then reports it
            logging.getLogger("gunicorn.error").warning("Celery's producer could not be built at boot", exc_info=True)

    # Without a broker (no PHANTOMHUB_REDIS_URL) one web worker sweeps in-process; otherwise a no-op.
    from phantomhub.periodic import sweeper_start

    sweeper_start()

    # Last: everything imported and built above leaves the garbage collector's reach, so a full
    # collection during a request walks only what requests made (phantomhub/runtime.py).
    from phantomhub.runtime import boot_objects_freeze

    boot_objects_freeze()

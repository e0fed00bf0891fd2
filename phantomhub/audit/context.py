"""Who an entry names and where they came from.

A request's context is set by `AuditContextMiddleware` for the whole request; code outside a
request that acts for someone (a command, the SCIM or sign-in code when it wants a label of its
own) sets one with `acting`. An entry written outside any context names "system".

The context is a function, called when an entry is written (receivers.py), not when the request
starts: a token is authenticated by the API view (DRF), after the middleware ran, and DRF sets
the request's user and token on the Django request then, so the actor is whoever the request
turned out to be.

Why not django-auditlog's own context (`auditlog.context.set_actor`): it connects a signal
receiver for every request and disconnects it after (every ingest request would pay it), and it
names that receiver by the time of day, which two threads of one process can share. A context
variable is each thread's own, and cheaper: `bench/audit_context.py` measured p50 1.2 µs a
request against 13.3 µs for set_actor (p99 1.7 against 18.8 µs; docs/performance.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest

from phantomhub.accounts.signin import client_address

# Requests under this path are the identity provider's SCIM pushes, whoever authenticated them.
SCIM_PATH = "/scim/"

Who = tuple[int | None, str, str | None]  # (the person's id, the label, the client's address)
_current: ContextVar[Callable[[], Who] | None] = ContextVar("phantomhub_audit_who", default=None)


def actor_of(request: HttpRequest) -> tuple[int | None, str]:
    """(the person's id or None, the label an entry shows) for what `request` is at this moment."""
    if request.path.startswith(SCIM_PATH):
        return None, "SCIM"
    user = getattr(request, "user", None)
    token = getattr(request, "auth", None)
    prefix = getattr(token, "prefix", None)
    if user is None or not getattr(user, "is_authenticated", False):
        # Not signed in (yet): the single sign-on callback that creates and syncs a person.
        return None, "sign-in"
    person_id = getattr(user, "pk", None)
    if person_id is None:  # a project or node token: no person behind it
        return None, f"token {prefix}…" if prefix else str(user)
    name = user.get_username()
    return person_id, f"{name} (token {prefix}…)" if prefix else name


@contextlib.contextmanager
def _context(who: Callable[[], Who]) -> Iterator[None]:
    token = _current.set(who)
    try:
        yield
    finally:
        _current.reset(token)  # a context set inside another gives the outer one back


def request_context(request: HttpRequest) -> contextlib.AbstractContextManager[None]:
    """The context of one request: its actor and client address (behind PHANTOMHUB_TRUSTED_PROXIES,
    the client's; never a forwarded header from anyone else), both worked out at each write."""
    return _context(lambda: (*actor_of(request), client_address(request)))


def acting(label: str, *, person: Any = None, address: str | None = None) -> contextlib.AbstractContextManager[None]:
    """Entries written inside name `person` (if any) and `label`, e.g. `acting("SCIM")`."""
    return _context(lambda: (getattr(person, "pk", None), label, address))


def who() -> Who | None:
    """Who the current context names (None outside any: the entry says "system")."""
    current = _current.get()
    return current() if current is not None else None

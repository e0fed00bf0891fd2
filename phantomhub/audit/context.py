"""Who an entry names and where they came from: the context django-auditlog fills entries from.

A request's context is set by `AuditContextMiddleware` for the whole request; code outside a
request (a management command, a task that acts for someone) may set its own with `acting`.
Entries written outside any context name "system".

The actor is resolved when an entry is written, not when the request starts: a token is
authenticated by the API view (DRF), after the middleware ran, and DRF sets the request's user
and token on the Django request then. auditlog's context calls a callable value at write time,
so the actor is whoever the request turned out to be.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from auditlog.context import auditlog_value, set_extra_data
from django.http import HttpRequest

from phantomhub.accounts.signin import client_address

# Requests under this path are the identity provider's SCIM pushes, whoever authenticated them.
SCIM_PATH = "/scim/"


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
def _context(data: dict[str, Any]) -> Iterator[None]:
    # auditlog's context replaces the current one and, on leaving, does not put it back: a context
    # set inside a request would leave the rest of the request unattributed. Put it back.
    previous = auditlog_value.get(None)
    try:
        with set_extra_data(context_data=data):
            yield
    finally:
        if previous is not None:
            auditlog_value.set(previous)


def request_context(request: HttpRequest) -> contextlib.AbstractContextManager[None]:
    """The context of one request: its actor (resolved at each write) and client address (behind
    PHANTOMHUB_TRUSTED_PROXIES, the client's; never a forwarded header from anyone else)."""
    actor: Callable[[], int | None] = lambda: actor_of(request)[0]  # noqa: E731
    label: Callable[[], str] = lambda: actor_of(request)[1]  # noqa: E731
    return _context({"actor_id": actor, "actor_label": label, "remote_addr": client_address(request)})


def acting(label: str, *, person: Any = None, address: str | None = None) -> contextlib.AbstractContextManager[None]:
    """Entries written inside name `person` (if any) and `label`, e.g. `acting("SCIM")`."""
    return _context({"actor_id": getattr(person, "pk", None), "actor_label": label, "remote_addr": address})

"""A token's state and, once it no longer works, why (docs/identity.md, "Tokens").

Computed from the token's own fields and the time alone, no query: the authentication checks it
on every request, cache hits included, so an expiry or an overlap's end is exact to the second
in every process. Whether a personal token's owner is still active is the one fact that lives
elsewhere (the user row); `accounts/auth.py` reads it fresh for every personal token.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum

from phantomhub.accounts.models import ApiToken

# A token expiring within this many days is listed as "expiring" (Settings shows it).
EXPIRING_WITHIN = timedelta(days=7)


class TokenState(StrEnum):
    ACTIVE = "active"
    EXPIRING = "expiring"  # works, and expires within EXPIRING_WITHIN
    ROTATED = "rotated"  # replaced by rotation: works until its overlap ends, then never again
    EXPIRED = "expired"
    REVOKED = "revoked"


def stamp(when: datetime) -> str:
    """A time as the refusals and listings write it: UTC, to the second, with a Z."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_state(token: ApiToken, now: datetime) -> TokenState:
    if token.revoked_at is not None:
        return TokenState.REVOKED
    if token.replaced_by_id is not None:
        return TokenState.ROTATED
    if token.expires_at is not None and token.expires_at <= now:
        return TokenState.EXPIRED
    if token.expires_at is not None and token.expires_at - now <= EXPIRING_WITHIN:
        return TokenState.EXPIRING
    return TokenState.ACTIVE


def token_ends_at(token: ApiToken) -> datetime | None:
    """When it stops (or stopped) working: the first of revocation, the overlap's end, expiry."""
    ends = [t for t in (token.revoked_at, token.overlap_ends_at, token.expires_at) if t is not None]
    return min(ends) if ends else None


def token_refusal(token: ApiToken, now: datetime) -> str | None:
    """Why the token no longer works, naming it and when; None while it works.

    The first of its ends that has passed is the reason (a token revoked during its overlap says
    revoked; one that expired before its overlap ended says expired)."""
    name = f"token {token.prefix}…"
    ended = [
        (when, text)
        for when, text in (
            (token.revoked_at, "was revoked at {}"),
            (token.overlap_ends_at, "was replaced by rotation; its overlap ended at {}"),
            (token.expires_at, "expired at {}"),
        )
        if when is not None and when <= now
    ]
    if ended:
        when, text = min(ended, key=lambda pair: pair[0])
        return f"{name} {text.format(stamp(when))}"
    return None

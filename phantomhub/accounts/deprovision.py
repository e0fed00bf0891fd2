"""Turning a person off and on again without their sign-in (SCIM, docs/identity.md "SCIM provisioning").

Deactivating stops everything the person holds at once, not at their next sign-in:
- `is_active` goes False: password and OIDC sign-ins are refused, and Django's session check
  refuses the user at their next request;
- every personal token of theirs is revoked (`revoked_at` set) and forgotten by this process's
  token cache once the change commits (other processes: accounts/token_cache.py);
- their sessions are deleted, so a session whose backend does not check `is_active` ends too.

Reactivating restores sign-in only: revoked tokens stay revoked (a token leaked while its owner
was gone must not come back), and the person makes new ones.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from phantomhub.accounts.models import ApiToken, TokenKind
from phantomhub.accounts.services import token_revoke
from phantomhub.accounts.token_cache import token_cache_forget


def _sessions_of(user_id: int) -> list[str]:
    """The keys of the unexpired sessions signed in as `user_id`. Sessions are stored encoded,
    so each is decoded: one pass over the live sessions, at each deactivation only."""
    keys = []
    live = Session.objects.filter(expire_date__gt=timezone.now()).iterator()
    for session in live:
        if str(session.get_decoded().get("_auth_user_id")) == str(user_id):
            keys.append(session.session_key)
    return keys


def _active_set(user: Any, active: bool) -> None:
    """Through save(), not a queryset update: the audit log records model saves (docs/audit.md),
    and a person's deactivation is one of the changes it must show. Nothing is written (or
    recorded) when the flag already reads so."""
    row = get_user_model().objects.select_for_update().get(pk=user.pk)
    if row.is_active != active:
        row.is_active = active
        row.save(update_fields=["is_active"])
    user.is_active = active


@transaction.atomic
def user_deactivate(user: Any) -> int:
    """Deactivate `user`, revoke their personal tokens and end their sessions; returns how many
    tokens were revoked. Idempotent: a second call finds nothing left to stop."""
    _active_set(user, False)
    tokens = list(ApiToken.objects.filter(user_id=user.pk, kind=TokenKind.PERSONAL, revoked_at__isnull=True))
    for token in tokens:
        token_revoke(token=token)  # the one way a token is revoked; it forgets it from this process's cache
    Session.objects.filter(session_key__in=_sessions_of(user.pk)).delete()

    def forget() -> None:  # again after the commit: a request of this process that read a token
        for token in tokens:  # before it would otherwise keep the unrevoked row cached
            token_cache_forget(token.digest)

    transaction.on_commit(forget)
    return len(tokens)


@transaction.atomic
def user_reactivate(user: Any) -> None:
    """Let `user` sign in again; their revoked tokens stay revoked."""
    _active_set(user, True)

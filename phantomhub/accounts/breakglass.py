"""The break-glass sign-in: how the first organization admin gets in when single sign-on is the
only way in (PHANTOMHUB_LOCAL_PASSWORDS=0) and the provider is down or misconfigured
(docs/identity.md, "Local passwords off and break-glass").

`manage.py breakglass USERNAME` (shell access to the service is the proof of authority) prints a
link valid LINK_MAX_AGE_S that signs that person in once. It is refused for anyone who is not an
active organization admin, and every link made or used is logged as a warning. Single use
without a table: the link carries the person's last sign-in time, and signing in changes it (as
Django's password-reset links do), so a used link, or one older than a later sign-in, matches no
more.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from phantomhub.accounts.permissions import is_org_admin

log = logging.getLogger(__name__)

LINK_MAX_AGE_S = 600
_SALT = "phantomhub.accounts.breakglass"


class LinkRefused(Exception):
    """The link cannot sign anyone in (its reason is for the log)."""


def _last_login(user: Any) -> str:
    return user.last_login.isoformat() if user.last_login else ""


def _may(user: Any) -> str | None:
    if not user.is_active:
        return f"{user.get_username()} is deactivated"
    if not is_org_admin(user):
        return f"{user.get_username()} is not an organization admin"
    return None


def link_create(username: str) -> str:
    """A single-use sign-in link for an active organization admin; LinkRefused otherwise."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise LinkRefused(f"no person is named {username!r}")
    why = _may(user)
    if why:
        raise LinkRefused(why)
    token = signing.dumps({"u": user.pk, "l": _last_login(user)}, salt=_SALT)
    log.warning("break-glass sign-in link made for %s (valid %s s, once)", username, LINK_MAX_AGE_S)
    return f"{settings.PUBLIC_URL.rstrip('/')}{reverse('auth-breakglass')}?{urlencode({'token': token})}"


@transaction.atomic
def link_use(token: str) -> Any:
    """The person the link signs in, with their last sign-in moved on so the link works once."""
    try:
        data = signing.loads(token, salt=_SALT, max_age=LINK_MAX_AGE_S)
    except signing.SignatureExpired:
        raise LinkRefused(f"the link is older than {LINK_MAX_AGE_S} s") from None
    except signing.BadSignature:
        raise LinkRefused("the link is not one this service made") from None
    if not isinstance(data, dict):
        raise LinkRefused("the link is not one this service made")
    user_id = data.get("u")
    user = get_user_model().objects.select_for_update().filter(pk=user_id).first() if isinstance(user_id, int) else None
    if user is None:
        raise LinkRefused("the link's person no longer exists")
    if data.get("l") != _last_login(user):
        raise LinkRefused(f"the link was used already (or {user.get_username()} signed in since it was made)")
    why = _may(user)
    if why:
        raise LinkRefused(why)
    user.last_login = timezone.now()
    user.save(update_fields=["last_login"])
    return user

"""Fixtures of the audit log's tests: signed-in people behind a chain of trusted proxies."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role, Team
from phantomhub.audit.models import AuditEntry

# The client's address as the proxies pass it on: 203.0.113.5 reached the outer proxy (198.51.100.7),
# which reached the inner one (the test client's 127.0.0.1); both proxies are trusted.
CLIENT_ADDRESS = "203.0.113.5"
FORWARDED = f"{CLIENT_ADDRESS}, 198.51.100.7"


@pytest.fixture(autouse=True)
def proxies(settings: Any) -> None:
    settings.TRUSTED_PROXIES = ["127.0.0.1/32", "198.51.100.0/24"]


def signed_in(user: User) -> APIClient:
    """A browser session of `user` (the session cookie, as the web UI signs in), behind the proxies."""
    client = APIClient(HTTP_X_FORWARDED_FOR=FORWARDED)
    client.force_login(user)
    return client


@pytest.fixture
def people(db: None) -> dict[str, User]:
    """root (organization admin), fin (finance), ann (a member of nlp), each with a session."""
    nlp, _ = Team.objects.get_or_create(slug="nlp", defaults={"name": "nlp"})
    users = {name: User.objects.create_user(name, password="pw") for name in ("root", "fin", "ann")}
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Profile.objects.create(user=users["fin"], is_finance=True)
    Membership.objects.create(user=users["ann"], team=nlp, role=Role.MEMBER)
    return users


def entries_since(mark: int, **filters: Any) -> list[AuditEntry]:
    """The entries written after entry number `mark` (oldest first)."""
    return list(AuditEntry.objects.filter(id__gt=mark, **filters).order_by("id"))


def mark() -> int:
    last = AuditEntry.objects.order_by("-id").first()
    return last.pk if last else 0

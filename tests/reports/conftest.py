"""Fixtures of the report tests: September 2026 with two teams' runs priced at $36/GPU-hour (the
real ingest and analysis), people with addresses, and the alerts' local webhook receiver."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.core import mail
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import sweeps
from tests.alerts.conftest import receiver  # noqa: F401
from tests.conftest import Tenant
from tests.portal.runs import client_for, finished_run

# Monday of ISO week 2026-W39; the month is September 2026 (over: closable).
WEEK_START = datetime(2026, 9, 21, 9, tzinfo=UTC)
MONTH = "2026-09"


@dataclass
class Books:
    owner: Tenant
    outsider: Tenant
    users: dict[str, User]

    def client(self, name: str) -> APIClient:
        return client_for(self.users[name])


@pytest.fixture
def books(owner: Tenant, outsider: Tenant, settings: object) -> Books:
    """nlp (owner) ran 900 s and 600 s, vision (outsider) 1200 s, all in week 2026-W39; fin is
    finance, root an organization admin, ann a member of nlp; each has an address."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"  # type: ignore[attr-defined]
    mail.outbox = []
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    finished_run(owner, "nlp-a", WEEK_START, 900, 0.25)
    finished_run(owner, "nlp-b", WEEK_START.replace(day=23), 600, 0.4)
    finished_run(outsider, "vision-a", WEEK_START.replace(day=24), 1200, 0.1)
    sweeps.analysis_sweep(inline=True)
    users = {name: User.objects.create_user(name, email=f"{name}@example.com") for name in ("fin", "root", "ann", "bob")}
    Profile.objects.create(user=users["fin"], is_finance=True)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Membership.objects.create(user=users["ann"], team=owner.project.team, role=Role.MEMBER)
    Membership.objects.create(user=users["bob"], team=outsider.project.team, role=Role.MEMBER)
    return Books(owner=owner, outsider=outsider, users=users)

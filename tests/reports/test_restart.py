"""The scheduler restarted: new processes (each its own Django, as after a deploy or a crash) find
the period claimed in the database and send it exactly once, by real SMTP and a local webhook."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from phantomhub.reports import services
from phantomhub.reports.models import ReportDelivery
from tests.alerts.conftest import Receiver, Smtp, smtp  # noqa: F401
from tests.reports.conftest import Books
from tests.reports.test_sending import FINANCE_DUE, _finance_sub

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _scheduler_pass(at: str, email_port: int) -> str:
    """One pass of the reports job in a new process against the test database."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {**os.environ, "PHANTOMHUB_DATABASE_URL": url, "PHANTOMHUB_DEBUG": "1", "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
           "PHANTOMHUB_EMAIL_HOST": "127.0.0.1", "PHANTOMHUB_EMAIL_PORT": str(email_port)}  # fmt: skip
    code = (
        "import django; django.setup()\n"
        "from datetime import datetime\n"
        "from phantomhub.reports import services\n"
        f"print(services.reports_send(now=datetime.fromisoformat({at!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_a_claim_cut_short_by_a_crash_is_sent_once_by_the_restarted_scheduler(
    books: Books,
    receiver: Receiver,
    smtp: Smtp,  # noqa: F811
    settings: Any,
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the scheduler's process needs the PostgreSQL test database")
    sub = _finance_sub(books, receiver)
    sub.refresh_from_db()
    assert services.period_claim(sub=sub, now=FINANCE_DUE) == "claimed"  # then this process "dies"
    port = settings.EMAIL_PORT
    first = _scheduler_pass((FINANCE_DUE + timedelta(minutes=1)).isoformat(), port)
    assert "claimed=0" in first and "sent=2" in first
    second = _scheduler_pass((FINANCE_DUE + timedelta(minutes=2)).isoformat(), port)
    assert "claimed=0" in second and "sent=0" in second
    assert len(smtp.got) == 1 and len(receiver.got) == 1
    assert sorted(smtp.got[0].rcpt_tos) == ["cfo@example.com", "root@example.com"]
    content = smtp.got[0].content.decode()
    assert "phantomhub-finance-2026-09-open.csv" in content and "text/html" in content
    assert set(ReportDelivery.objects.values_list("status", flat=True)) == {"sent"}

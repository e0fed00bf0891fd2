"""The scheduler restarted: new processes (each its own Django, as after a deploy or a crash) run
the periodic job as the sweeper and beat do, find the period claimed in the database and send it
exactly once, by real SMTP and a local webhook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from phantomhub.reports import services
from phantomhub.reports.models import ReportDelivery
from tests.alerts.conftest import Receiver, Smtp, smtp  # noqa: F401
from tests.reports.conftest import Books
from tests.reports.test_sending import _finance_sub

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _scheduler_pass(email_port: int) -> dict[str, int]:
    """One pass of the `reports-send` job, called as the embedded sweeper calls it (the task found
    by its name in phantomhub/periodic.py, the real clock), in a new process on the test database."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {**os.environ, "PHANTOMHUB_DATABASE_URL": url, "PHANTOMHUB_DEBUG": "1", "DJANGO_SETTINGS_MODULE": "phantomhub.settings",
           "PHANTOMHUB_EMAIL_HOST": "127.0.0.1", "PHANTOMHUB_EMAIL_PORT": str(email_port)}  # fmt: skip
    code = (
        "import django, json; django.setup()\n"
        "from phantomhub import periodic\n"
        "job = next(job for job in periodic.JOBS if job.name == 'reports-send')\n"
        "print(json.dumps(periodic._task(job)()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_claim_cut_short_by_a_crash_is_sent_once_by_the_restarted_scheduler(
    books: Books,
    receiver: Receiver,
    smtp: Smtp,  # noqa: F811
    settings: Any,
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the scheduler's process needs the PostgreSQL test database")
    sub = _finance_sub(books, receiver)  # due since 1 October
    sub.refresh_from_db()
    assert services.period_claim(sub=sub, now=timezone.now()) == "claimed"  # then this process "dies"
    [period] = set(ReportDelivery.objects.values_list("period_key", flat=True))
    port = settings.EMAIL_PORT
    first = _scheduler_pass(port)
    assert (first["claimed"], first["sent"], first["failed"]) == (0, 2, 0)
    second = _scheduler_pass(port)  # restarted again: nothing is due, nothing pending
    assert (second["claimed"], second["sent"]) == (0, 0)
    assert len(smtp.got) == 1 and len(receiver.got) == 1
    assert sorted(smtp.got[0].rcpt_tos) == ["cfo@example.com", "root@example.com"]
    content = smtp.got[0].content.decode()
    assert f"phantomhub-finance-{period}-open.csv" in content and "text/html" in content
    assert set(ReportDelivery.objects.values_list("status", flat=True)) == {"sent"}

"""FOCUS import hardening: money in the organization's currency only, charge periods within
2000..2100, a refused file answers a page of errors (not megabytes), and a large file is a
background job whose status, progress and errors the API lists, all or nothing and idempotent."""

from __future__ import annotations

import time
from typing import Any

import pytest
from celery.exceptions import Retry
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.fleet import focus
from phantomhub.fleet.focus import focus_import, invoice_import_queue, invoice_import_run
from phantomhub.fleet.models import ImportStatus, InvoiceImport, InvoiceLine

HEADER = "BilledCost,ResourceId,ChargePeriodStart,ChargePeriodEnd,ServiceName,SkuId,BillingCurrency\n"


def line(i: int, cost: str = "1.00", currency: str = "USD", start: str = "2026-09-21T10:00:00Z", end: str = "") -> str:
    return f"{cost},i-{i},{start},{end or '2026-09-21T11:00:00Z'},Amazon EC2,p5,{currency}\n"


def invoice(n: int, **kwargs: Any) -> str:
    return HEADER + "".join(line(i, **kwargs) for i in range(n))


@pytest.fixture
def finance(db: None) -> APIClient:
    user = User.objects.create_user("fin", password="pw")
    Profile.objects.create(user=user, is_finance=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def _post(client: APIClient, text: str, filename: str = "bill.csv") -> Any:
    return client.post(f"/api/v1/fleet/invoices?filename={filename}", text, content_type="text/csv")


def _finished(client: APIClient, import_id: int, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        (row,) = [r for r in client.get("/api/v1/fleet/invoices").json() if r["id"] == import_id]
        if row["status"] in (ImportStatus.DONE, ImportStatus.FAILED):
            return dict(row)
        assert time.monotonic() < deadline, row
        time.sleep(0.05)


@pytest.mark.django_db
def test_a_line_billed_in_another_currency_is_refused_with_its_line(settings: Any) -> None:
    result = focus_import(text=HEADER + line(1) + line(2, cost="150000", currency="JPY"))
    assert result.errors == [
        "line 3: BillingCurrency: 'JPY' is not the organization's currency USD (PHANTOMHUB_CURRENCY); convert the invoice first"
    ]
    assert not InvoiceLine.objects.exists()
    settings.CURRENCY = "JPY"  # an organization that keeps its books in yen takes the yen lines
    assert focus_import(text=HEADER + line(2, cost="150000", currency="jpy")).created
    assert InvoiceLine.objects.get().currency == "JPY"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("start", "end", "error"),
    [
        ("0001-01-01T00:00:00Z", "", "ChargePeriodStart: '0001-01-01T00:00:00Z' is outside 2000-01-01..2100-01-01"),
        (
            "2026-09-21T10:00:00Z",
            "9999-12-31T00:00:00Z",
            "ChargePeriodEnd: '9999-12-31T00:00:00Z' is outside 2000-01-01..2100-01-01",
        ),
        ("1999-12-31T23:00:00Z", "", "ChargePeriodStart: '1999-12-31T23:00:00Z' is outside 2000-01-01..2100-01-01"),
    ],
)
def test_charge_periods_outside_2000_to_2100_are_refused_with_their_line(start: str, end: str, error: str) -> None:
    result = focus_import(text=HEADER + line(1) + line(2, start=start, end=end))
    assert result.errors == [f"line 3: {error}"]
    assert not InvoiceImport.objects.exists()


def test_a_file_wrong_on_every_line_answers_twenty_errors_and_a_count(finance: APIClient, settings: Any) -> None:
    settings.FOCUS_INLINE_LINES = 100_000  # checked in the request
    response = _post(finance, invoice(62_000, cost="n/a"))
    assert response.status_code == 400
    error = response.json()["error"]
    assert len(error["fields"]) == 20 and error["fields"]["line 2"] == "BilledCost: 'n/a' is not a number"
    assert error["message"].endswith("; … and 61,980 more")
    assert len(response.content) < 4000
    assert not InvoiceImport.objects.exists() and not InvoiceLine.objects.exists()


def test_a_body_over_the_cap_is_refused_before_it_is_parsed(finance: APIClient, settings: Any) -> None:
    settings.FOCUS_MAX_BYTES = 2048
    response = _post(finance, invoice(100))
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"


@pytest.mark.django_db(transaction=True)
def test_a_large_file_is_a_background_job_listed_with_its_progress(finance: APIClient, settings: Any) -> None:
    settings.FOCUS_INLINE_LINES = 50
    text = invoice(120)
    queued = _post(finance, text, "big.csv")
    # No broker here (the embedded default): a thread runs the job; the request does not wait for it.
    assert queued.status_code == 202
    job = queued.json()
    assert (job["status"], job["filename"], job["lines"], job["duplicate_file"]) == ("queued", "big.csv", 120, False)
    done = _finished(finance, job["id"])
    assert (done["status"], done["lines"], done["lines_checked"], done["lines_new"], done["errors"]) == (
        "done",
        120,
        120,
        120,
        [],
    )
    assert InvoiceLine.objects.count() == 120
    assert InvoiceImport.objects.get(pk=job["id"]).text == ""  # the CSV does not stay in the database
    again = _post(finance, text, "big.csv")  # idempotent: the same file changes nothing
    assert again.status_code == 200 and again.json()["duplicate_file"] is True and again.json()["id"] == job["id"]
    small = _post(finance, invoice(3, cost="2.00", start="2026-09-22T10:00:00Z", end="2026-09-22T11:00:00Z"))
    assert small.status_code == 201 and small.json()["status"] == "done"  # small files still import at once
    assert InvoiceLine.objects.count() == 123


@pytest.mark.django_db(transaction=True)
def test_a_refused_job_stores_nothing_keeps_its_first_errors_and_may_be_posted_again(finance: APIClient, settings: Any) -> None:
    settings.FOCUS_INLINE_LINES = 50
    text = invoice(40) + "".join(line(100 + i, currency="JPY") for i in range(60))
    job = _post(finance, text).json()
    failed = _finished(finance, job["id"])
    assert (failed["status"], failed["error_count"], len(failed["errors"])) == ("failed", 60, 20)
    assert failed["errors"][0].startswith("line 42: BillingCurrency: 'JPY'")
    assert not InvoiceLine.objects.exists()  # all or nothing
    retried = _post(finance, text)
    assert retried.status_code == 202 and retried.json()["id"] == job["id"]  # a failed file may be queued again
    assert _finished(finance, job["id"])["status"] == "failed"


@pytest.mark.django_db(transaction=True)
def test_with_a_broker_the_job_is_a_task_enqueued_on_commit(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from phantomhub.fleet import tasks

    settings.CELERY_TASK_ALWAYS_EAGER = False
    sent: list[int] = []
    from phantomhub.celery import app as celery_app

    def send_task(name: str, args: tuple[int, ...] = (), **options: Any) -> None:
        assert name == tasks.invoice_import.name  # the task, sent by name (phantomhub/jobs.py)
        sent.append(args[0])

    monkeypatch.setattr(celery_app, "send_task", send_task)
    job, queued = invoice_import_queue(text=invoice(10), filename="x.csv")
    assert queued and sent == [job.pk]  # on commit (autocommit here: at once)
    InvoiceImport.objects.filter(pk=job.pk).update(status=ImportStatus.RUNNING)
    with pytest.raises(Retry):  # running elsewhere (or its worker died): asked again once it would be stale
        tasks.invoice_import(job.pk)
    InvoiceImport.objects.filter(pk=job.pk).update(status=ImportStatus.QUEUED)
    assert tasks.invoice_import(job.pk) == "done"  # what the worker runs
    assert tasks.invoice_import(job.pk) == "done"  # a redelivered task changes nothing
    assert InvoiceLine.objects.count() == 10 and InvoiceImport.objects.get().lines_new == 10


@pytest.mark.django_db
def test_a_job_that_died_is_queued_again_by_the_same_file_and_a_live_one_is_not(
    settings: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    started: list[int] = []
    monkeypatch.setattr(focus, "_job_start", started.append)
    with django_capture_on_commit_callbacks(execute=True):
        job, queued = invoice_import_queue(text=invoice(10))
    assert queued and started == [job.pk]
    InvoiceImport.objects.filter(pk=job.pk).update(status=ImportStatus.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        assert invoice_import_queue(text=invoice(10)) == (job, False)  # running and heard from: left alone
    assert invoice_import_run(import_id=job.pk) == "running"  # nor taken over by another run
    InvoiceImport.objects.filter(pk=job.pk).update(updated_at=job.updated_at - focus.STALE_AFTER * 2)
    with django_capture_on_commit_callbacks(execute=True):
        assert invoice_import_queue(text=invoice(10))[1] is True
    assert started == [job.pk, job.pk]
    assert invoice_import_run(import_id=job.pk) == "done" and InvoiceLine.objects.count() == 10


def test_a_large_file_with_a_nul_character_is_refused_with_its_line_not_queued(finance: APIClient, settings: Any) -> None:
    settings.FOCUS_INLINE_LINES = 5
    text = invoice(10).replace("i-7,", "i-\x007,")
    response = _post(finance, text)
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"line 9": "NUL characters are not allowed"}
    assert not InvoiceImport.objects.exists()


@pytest.mark.django_db
def test_a_small_file_already_queued_answers_that_import_as_it_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(focus, "_job_start", lambda import_id: None)
    job, _ = invoice_import_queue(text=invoice(3))
    again = focus_import(text=invoice(3))
    assert again.duplicate_file and again.as_dict()["status"] == "queued" and again.as_dict()["id"] == job.pk

"""Scheduled delivery end to end: through the periodic job, Django's email backend (locmem) and a
local webhook receiver, exactly one report per period across passes, a restart of the scheduler
and a crash after the claim; the attachment's totals are the page's."""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.utils import timezone

from phantomhub.accounts.models import Membership
from phantomhub.reports import services
from phantomhub.reports.models import ReportDelivery, Subscription
from phantomhub.waste import sweeps
from tests.alerts.conftest import Receiver
from tests.reports.conftest import MONTH, Books

pytestmark = [pytest.mark.django_db, pytest.mark.backends]  # the once-per-period claim on SQLite too
FINANCE_DUE = datetime(2026, 10, 1, 6, 0, tzinfo=UTC)  # 1 October 08:00 in Berlin (CEST)
DIGEST_DUE = datetime(2026, 9, 27, 22, 30, tzinfo=UTC)  # Monday 28 September 00:30 in Berlin


def _subscribe(books: Books, who: str, body: dict[str, Any], due: datetime) -> Subscription:
    """Subscribe through the API, as if before `due` (the API schedules from the real clock)."""
    response = books.client(who).post("/api/v1/reports/subscriptions", body, format="json")
    assert response.status_code == 201, response.content
    sub = Subscription.objects.get(pk=response.json()["id"])
    assert sub.next_due_at is not None and sub.next_due_at > timezone.now()
    Subscription.objects.filter(pk=sub.pk).update(next_due_at=due)
    return sub


def _finance_sub(books: Books, receiver: Receiver | None = None) -> Subscription:
    body = {"kind": "finance_month", "cadence": "monthly", "day_of_month": 1, "hour": 8, "minute": 0,
            "timezone": "Europe/Berlin", "email_to": ["cfo@example.com", "root@example.com"]}  # fmt: skip
    if receiver is not None:
        body["webhook_url"] = receiver.url
    return _subscribe(books, "root", body, FINANCE_DUE)


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_finance_review_goes_out_once_per_period_through_passes_and_a_restart(books: Books, receiver: Receiver) -> None:
    sub = _finance_sub(books, receiver)
    assert services.reports_send(now=FINANCE_DUE - timedelta(minutes=1)).claimed == 0  # not due yet
    assert mail.outbox == [] and receiver.got == []
    first = services.reports_send(now=FINANCE_DUE + timedelta(seconds=5))
    assert (first.claimed, first.sent, first.failed) == (1, 2, 0)
    again = services.reports_send(now=FINANCE_DUE + timedelta(minutes=1))  # the next pass
    assert (again.claimed, again.sent) == (0, 0)
    assert services.reports_send(now=FINANCE_DUE + timedelta(days=20)).claimed == 0  # later in the month
    assert len(mail.outbox) == 1 and len(receiver.got) == 1
    rows = ReportDelivery.objects.filter(subscription=sub)
    assert sorted(rows.values_list("period_key", "channel", "status", "attempts")) == [
        ("2026-09", "email", "sent", 1), ("2026-09", "webhook", "sent", 1)
    ]  # fmt: skip

    message = mail.outbox[0]
    assert message.subject == "[PhantomHub] Finance review, 2026-09"
    assert sorted(message.to) == ["cfo@example.com", "root@example.com"]
    link = f"{settings.PUBLIC_URL.rstrip('/')}/finance?month={MONTH}"
    assert link in message.body
    html, kind = message.alternatives[0]
    assert kind == "text/html" and f'href="{link}"' in html
    [(name, attached, mimetype)] = message.attachments
    assert (name, mimetype) == ("phantomhub-finance-2026-09-open.csv", "text/csv")

    # The attachment is the finance page's own CSV, and its TOTAL line the page's totals.
    page_csv = books.client("fin").get(f"/api/v1/portal/finance/{MONTH}.csv").content.decode()
    assert attached == page_csv
    page = books.client("fin").get(f"/api/v1/portal/finance/{MONTH}").json()
    total = _csv(attached)[-1]
    assert total["team"] == "TOTAL"
    for key in ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd"):
        assert float(total[key]) == page["totals"][key]
    assert page["totals"]["cost_usd"] > 0 and {r["project"] for r in _csv(attached)[:-1]} == {
        books.owner.project.slug,
        books.outsider.project.slug,
    }

    got = receiver.got[0]
    ts = got.headers["x-phantomhub-timestamp"]
    expected = hmac.new(sub.webhook_secret.encode(), f"{ts}.".encode() + got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-phantomhub-signature"] == f"v1={expected}"
    body = got.json
    assert body["period"] == {"key": "2026-09", "start": "2026-09-01", "end": "2026-09-30"}
    assert body["url"] == link and body["csv"] == page_csv and body["note"] is None
    assert body["totals"]["cost_usd"] == page["totals"]["cost_usd"]


def test_a_crash_after_the_claim_is_sent_by_the_next_pass_and_a_sent_report_never_again(books: Books, receiver: Receiver) -> None:
    sub = _finance_sub(books, receiver)
    sub.refresh_from_db()
    # The claim commits, then the process dies before any attempt.
    assert services.period_claim(sub=sub, now=FINANCE_DUE + timedelta(seconds=1)) == "claimed"
    assert mail.outbox == [] and receiver.got == []
    assert set(ReportDelivery.objects.values_list("status", flat=True)) == {"pending"}
    sub.refresh_from_db()
    assert sub.next_due_at == datetime(2026, 11, 1, 7, 0, tzinfo=UTC)  # moved on in the claim's transaction (CET)
    # A restarted scheduler: the period is claimed, so nothing is built again; the rows are sent.
    Subscription.objects.filter(pk=sub.pk).update(next_due_at=FINANCE_DUE)  # even were the move lost
    result = services.reports_send(now=FINANCE_DUE + timedelta(minutes=2))
    assert (result.claimed, result.sent) == (0, 2)
    assert len(mail.outbox) == 1 and len(receiver.got) == 1
    # Marked sent: never attempted again, whatever the passes after.
    ReportDelivery.objects.update(next_attempt_at=FINANCE_DUE)
    for minutes in (3, 4, 60):
        services.reports_send(now=FINANCE_DUE + timedelta(minutes=minutes))
    assert len(mail.outbox) == 1 and len(receiver.got) == 1


def test_a_failed_webhook_is_retried_without_sending_the_email_twice(books: Books, receiver: Receiver, settings: Any) -> None:
    settings.REPORT_RETRY_BASE_S = 10
    receiver.answers = [503]
    _finance_sub(books, receiver)
    first = services.reports_send(now=FINANCE_DUE)
    assert (first.sent, first.failed) == (1, 1)
    hook = ReportDelivery.objects.get(channel="webhook")
    assert (hook.status, hook.attempts, hook.status_code) == ("pending", 1, 503)
    assert hook.next_attempt_at is not None and hook.next_attempt_at > timezone.now()  # backing off
    ReportDelivery.objects.filter(pk=hook.pk).update(next_attempt_at=FINANCE_DUE)  # its time has come
    assert services.reports_send(now=FINANCE_DUE + timedelta(minutes=1)).sent == 1
    assert len(mail.outbox) == 1 and len(receiver.got) == 2
    assert receiver.got[0].body == receiver.got[1].body  # the same report, signed afresh


def test_a_closed_month_whose_live_figures_moved_says_so_in_the_email_and_the_csv(books: Books, receiver: Receiver) -> None:
    fin, root = books.client("fin"), books.client("root")
    frozen = fin.get(f"/api/v1/portal/finance/{MONTH}").json()["totals"]
    assert fin.post(f"/api/v1/portal/finance/{MONTH}/close").status_code == 200
    body = {"gpu": "H100-SXM", "usd_per_gpu_hour": "45", "effective_from": "2026-09-01T00:00:00Z"}
    assert root.post("/api/v1/pricing/prices?confirm_closed=1", body, format="json").status_code == 201
    sweeps.analysis_sweep(inline=True)
    _finance_sub(books, receiver)
    services.reports_send(now=FINANCE_DUE)
    [message] = mail.outbox
    [(name, attached, _)] = message.attachments
    assert name == "phantomhub-finance-2026-09-closed.csv"
    assert "NOTE: 2026-09 was closed on" in message.body and "by fin" in message.body
    assert "Causes: price." in message.body and "Note:" in message.alternatives[0][0]
    # The CSV: the page's (the closed figures, their TOTAL line), then the note.
    page_csv = fin.get(f"/api/v1/portal/finance/{MONTH}.csv").content.decode()
    assert attached.startswith(page_csv)
    note = attached[len(page_csv) :].splitlines()
    assert note[0] == "note" and "live figures now differ by +$" in note[1]
    total = _csv(page_csv)[-1]
    assert float(total["cost_usd"]) == frozen["cost_usd"]
    difference = round(frozen["cost_usd"] * 45 / 36 - frozen["cost_usd"], 2)
    assert f"+${difference:,.2f} cost" in message.body or f"+${difference + 0.01:,.2f} cost" in message.body
    assert receiver.got[0].json["note"] == ReportDelivery.objects.get(channel="email").note != ""


def test_a_team_digest_at_0030_berlin_covers_the_berlin_week_with_the_team_page_totals(books: Books) -> None:
    body = {"kind": "digest_team", "team": "nlp", "cadence": "weekly", "weekday": 0, "hour": 0, "minute": 30,
            "timezone": "Europe/Berlin"}  # fmt: skip
    _subscribe(books, "ann", body, DIGEST_DUE)
    services.reports_send(now=DIGEST_DUE + timedelta(seconds=30))
    [message] = mail.outbox
    assert message.to == ["ann@example.com"]  # a member subscribes their own address
    assert message.subject == "[PhantomHub] Weekly digest, team nlp, 2026-W39"
    assert "Budget: no budget set." in message.body
    assert "No week before to compare with" in message.body
    page = books.client("ann").get("/api/v1/portal/teams/nlp", {"period": "2026-09-21..2026-09-27"}).json()
    [(name, attached, _)] = message.attachments
    assert name == "phantomhub-team-nlp-2026-W39.csv"
    rows = _csv(attached)
    assert rows[-1]["team"] == "TOTAL" and [r["project"] for r in rows[:-1]] == ["llm-pretrain"]  # ann sees nlp only
    for key in ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd"):
        assert float(rows[-1][key]) == page["totals"][key]
    assert int(rows[-1]["runs"]) == page["totals"]["runs"] == 2
    assert "/teams/nlp?period=2026-09-21..2026-09-27" in message.body


def test_a_team_digest_states_the_team_budget_of_the_month_as_the_budgets_page_does(books: Books, receiver: Receiver) -> None:
    from phantomhub.periods import month_period
    from phantomhub.planning.models import Budget
    from phantomhub.planning.selectors import budget_status

    team = books.owner.project.team
    budget = Budget.objects.create(scope="team", team=team, amount_usd=Decimal("5"), effective_from=date(2026, 9, 1))
    project = books.owner.project
    Budget.objects.create(scope="project", project=project, amount_usd=Decimal("900"), effective_from=date(2026, 9, 1))
    body = {"kind": "digest_team", "team": "nlp", "cadence": "weekly", "weekday": 0, "hour": 0, "minute": 30,
            "timezone": "Europe/Berlin", "email_to": ["root@example.com"], "webhook_url": receiver.url}  # fmt: skip
    sub = _subscribe(books, "root", body, DIGEST_DUE)
    sent_at = DIGEST_DUE + timedelta(seconds=30)
    services.reports_send(now=sent_at)
    [message] = mail.outbox
    status = budget_status(budget=budget, month=month_period("2026-09"), now=sent_at).as_dict()
    assert status["state"] == "open" and status["over"]  # 15 minutes at $36 an hour and more against $5
    forecast = status["forecast"]
    line = next(line for line in message.body.splitlines() if line.startswith("Budget 2026-09"))
    assert line.startswith(f"Budget 2026-09 (every GPU model): ${status['spent_usd']:,.2f} of $5.00 spent; ")
    assert f"forecast ${forecast['point_usd']:,.2f} (p10 ${forecast['p10_usd']:,.2f} to p90 ${forecast['p90_usd']:,.2f})" in line
    assert f"over by ${status['over_by_usd']:,.2f}" in line
    assert "$900.00" not in message.body  # the team's own budget, not its projects'
    [hook] = [got for got in receiver.got if got.json.get("subscription_id", sub.pk) == sub.pk]
    assert [b["budget"]["id"] for b in hook.json["figures"]["budgets"]] == [budget.pk]
    assert hook.json["figures"]["budgets"][0]["spent_usd"] == status["spent_usd"]


def test_a_subscription_edited_while_due_still_sends_its_period(books: Books) -> None:
    sub = _finance_sub(books)
    edited = books.client("root").patch(
        f"/api/v1/reports/subscriptions/{sub.pk}", {"email_to": ["cfo@example.com"]}, format="json"
    )
    assert edited.status_code == 200, edited.content
    sub.refresh_from_db()
    assert sub.next_due_at == FINANCE_DUE  # still due: the edit came after its due time, before the pass
    result = services.reports_send(now=timezone.now())
    assert (result.claimed, result.sent) == (1, 1)
    assert [m.to for m in mail.outbox] == [["cfo@example.com"]]
    assert services.reports_send(now=timezone.now()).claimed == 0  # and once only
    sub.refresh_from_db()
    assert sub.next_due_at is not None and sub.next_due_at > timezone.now()


def test_a_subscriber_who_left_the_team_gets_no_digest_and_the_log_says_why(books: Books) -> None:
    body = {"kind": "digest_team", "team": "nlp", "cadence": "weekly", "weekday": 0, "hour": 0, "minute": 30,
            "timezone": "Europe/Berlin"}  # fmt: skip
    sub = _subscribe(books, "ann", body, DIGEST_DUE)
    Membership.objects.filter(user=books.users["ann"]).delete()
    result = services.reports_send(now=DIGEST_DUE)
    assert (result.claimed, result.refused, result.sent) == (0, 1, 0)
    assert mail.outbox == []
    [row] = ReportDelivery.objects.filter(subscription=sub)
    assert row.status == "failed" and "no longer sees the team nlp" in row.error
    log = books.client("ann").get("/api/v1/reports/deliveries").json()["deliveries"]
    assert [(d["period_key"], d["status"]) for d in log] == [("2026-W39", "failed")]


def test_a_saved_runs_view_is_sent_as_its_owner_reads_it_with_the_runs_csv(books: Books, receiver: Receiver) -> None:
    from phantomhub.portal.models import SavedView

    view = SavedView.objects.create(owner=books.users["root"], name="<b>nlp</b> runs", page="runs", query="team=nlp")
    body = {"kind": "saved_view", "saved_view": view.pk, "cadence": "weekly", "weekday": 0, "hour": 0, "minute": 30,
            "timezone": "Europe/Berlin", "webhook_url": receiver.url, "webhook_format": "slack"}  # fmt: skip
    _subscribe(books, "root", {**body, "email_to": ["root@example.com"]}, DIGEST_DUE)
    services.reports_send(now=DIGEST_DUE)
    [message] = mail.outbox
    [(name, attached, _)] = message.attachments
    page_csv = b"".join(books.client("root").get("/api/v1/portal/runs.csv", {"team": "nlp"}).streaming_content).decode()
    assert name == "phantomhub-runs-2026-W39.csv" and attached == page_csv
    assert sorted(r["name"] for r in _csv(attached)) == ["nlp-a", "nlp-b"]
    html = message.alternatives[0][0]
    assert "&lt;b&gt;nlp&lt;/b&gt; runs" in html and "<b>nlp</b>" not in html  # a name is text, not markup
    slack = receiver.got[0].json
    assert set(slack) == {"text", "blocks"} and "&lt;b&gt;nlp&lt;/b&gt;" in slack["text"]
    assert "/runs?team=nlp|Open the page>" in slack["text"]


def test_the_audit_log_records_the_subscription_not_its_moving_due_time(books: Books) -> None:
    from phantomhub.audit.models import AuditEntry

    sub = _finance_sub(books)
    services.reports_send(now=FINANCE_DUE)
    entries = AuditEntry.objects.filter(object_pk=str(sub.pk), content_type__model="subscription")
    assert list(entries.values_list("action", flat=True)) == [0]  # its creation only: no entry per send
    assert "next_due_at" not in entries.get().changes_dict and "kind" in entries.get().changes_dict


def test_on_the_spring_dst_night_the_0030_berlin_digest_goes_out_at_2230_utc_for_the_berlin_week(books: Books) -> None:
    body = {"kind": "digest_team", "team": "nlp", "cadence": "weekly", "weekday": 0, "hour": 0, "minute": 30,
            "timezone": "Europe/Berlin"}  # fmt: skip
    due = datetime(2026, 3, 29, 22, 30, tzinfo=UTC)  # Monday 30 March 00:30 CEST, summer time since 02:00
    sub = _subscribe(books, "ann", body, due)
    assert services.reports_send(now=due - timedelta(seconds=1)).claimed == 0
    assert services.reports_send(now=due).claimed == 1
    [row] = ReportDelivery.objects.filter(subscription=sub)
    assert (row.period_key, str(row.period_start), str(row.period_end)) == ("2026-W13", "2026-03-23", "2026-03-29")
    sub.refresh_from_db()
    assert sub.next_due_at == datetime(2026, 4, 5, 22, 30, tzinfo=UTC)
    assert mail.outbox[0].subject == "[PhantomHub] Weekly digest, team nlp, 2026-W13"

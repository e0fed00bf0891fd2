"""One delivery attempt of an outbound message: a signed webhook POST or an email, and the retry
schedule. Shared by the apps that deliver (alerts, scheduled reports); it imports no app.

Webhooks carry ``X-PhantomHub-Timestamp`` (unix seconds) and ``X-PhantomHub-Signature:
v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>``; a receiver recomputes it and refuses
a timestamp older than a few minutes, so a captured request cannot be replayed later. 5xx,
429 and network errors are retried with backoff; other 4xx are not (the receiver said no), nor
is a URL the egress policy refuses. Every call goes through phantomhub/egress.py.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import smtplib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.mail import EmailMessage
from django.db.models import F, Model, TextChoices
from django.utils import timezone

from phantomhub import egress
from phantomhub.errors import invalid, query_int


class WebhookFormat(TextChoices):
    """A webhook's body: the generic JSON, or Slack's message shape (alert rules, report subscriptions)."""

    GENERIC = "generic"
    SLACK = "slack"


def webhook_secret_new() -> str:
    """A webhook's signing secret (the default of the alerts' and the reports' webhook_secret)."""
    return "whsec_" + secrets.token_urlsafe(32)


SIGNATURE_HEADER = "X-PhantomHub-Signature"
TIMESTAMP_HEADER = "X-PhantomHub-Timestamp"
DELIVERY_HEADER = "X-PhantomHub-Delivery"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    return "v1=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def retry_delay_s(attempts: int, *, base_s: float) -> float:
    """Wait after the ``attempts``-th failed attempt: base × 3^(attempts−1) (10, 30, 90, 270,
    810 s with a base of 10 s)."""
    return float(base_s * 3 ** max(attempts - 1, 0))


@dataclass(frozen=True)
class Attempt:
    ok: bool
    retry: bool  # worth trying again later
    status_code: int | None
    error: str  # a short, sanitised reason (phantomhub/egress.py), never a raw error


def webhook_post(*, url: str, body: bytes, secret: str, delivery_id: str, user_agent: str, timeout_s: float) -> Attempt:
    """One signed POST through the egress policy (phantomhub/egress.py); never raises."""
    ts = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        TIMESTAMP_HEADER: ts,
        SIGNATURE_HEADER: signature(secret, ts, body),
        DELIVERY_HEADER: delivery_id,
    }
    out = egress.post(url, body=body, headers=headers, timeout_s=timeout_s)
    return Attempt(out.ok, out.retry, out.status_code, egress.text_clean(out.reason))


def email_send(message: EmailMessage) -> Attempt:
    """One email through the configured mail server (an operator's address, not a user's). A
    header or address the mail library refuses (BadHeaderError, a ValueError) would be refused at
    every try: permanent. The caller gives the subject as one clean line (egress.text_clean)."""
    try:
        message.send(fail_silently=False)
    except ValueError:  # BadHeaderError, or an address with a line break
        return Attempt(False, False, None, "the message has an invalid header or address")
    except TimeoutError:
        return Attempt(False, True, None, "the mail server timed out")
    except smtplib.SMTPRecipientsRefused:
        return Attempt(False, True, None, "the mail server refused the recipients")
    except smtplib.SMTPResponseException as exc:
        # 5xx is the server's final no; 4xx (and anything odd) may pass later.
        return Attempt(False, not 500 <= exc.smtp_code < 600, None, f"the mail server answered {int(exc.smtp_code)}")
    except Exception as exc:  # SMTP and socket errors alike: the mail server may come back
        return Attempt(False, True, None, f"the mail server could not be reached ({type(exc).__name__})")
    return Attempt(True, False, None, "")


# -- the outbox: a table of deliveries, each attempted until sent or given up ---------------------
# The alerts' AlertDelivery and the reports' ReportDelivery share the fields it reads and writes:
# status ("pending", "sent", "failed"), attempts, next_attempt_at, status_code, error, sent_at.

log = logging.getLogger(__name__)
PENDING, SENT, FAILED = "pending", "sent", "failed"


@dataclass(frozen=True)
class Outbox:
    model: type[Model]
    send: Callable[[Any], Attempt]  # one attempt at one delivery; may raise (counted as a failure)
    max_attempts: Callable[[], int]  # read at each attempt, so settings overridden in tests apply
    retry_base_s: Callable[[], float]
    claim_s: float  # an attempt in progress is not attempted by anyone else for this long
    related: tuple[str, ...] = ()  # select_related when a due delivery is loaded
    label: str = "delivery"  # in the server log


def delivery_attempt(outbox: Outbox, item: Any) -> Any:
    """One attempt; on failure either the next attempt is scheduled (backoff) or it gave up.

    The attempt is counted, and its retry scheduled, before it is made: one that raises, hangs past
    its claim or takes the worker down with it still uses up one of max_attempts, so no delivery is
    re-sent forever. Whatever happens ends with a stored, sanitised reason."""
    most = outbox.max_attempts()
    if item.attempts >= most:
        item.status, item.next_attempt_at = FAILED, None
        item.error = egress.text_clean(item.error or "out of attempts")
        item.save(update_fields=["status", "next_attempt_at", "error"])
        return item
    item.attempts += 1
    item.next_attempt_at = timezone.now() + timedelta(seconds=retry_delay_s(item.attempts, base_s=outbox.retry_base_s()))
    outbox.model._default_manager.filter(pk=item.pk).update(attempts=F("attempts") + 1, next_attempt_at=item.next_attempt_at)
    try:
        attempt = outbox.send(item)
    except Exception:
        log.exception("%s %s: the attempt raised", outbox.label, item.pk)
        attempt = Attempt(False, True, None, "the attempt failed inside PhantomHub (see the server log)")
    item.status_code = attempt.status_code
    item.error = egress.text_clean(attempt.error)
    if attempt.ok:
        item.status, item.sent_at, item.next_attempt_at = SENT, timezone.now(), None
    elif attempt.retry and item.attempts < most:
        item.status = PENDING
    else:
        item.status, item.next_attempt_at = FAILED, None
    item.save(update_fields=["status_code", "error", "status", "sent_at", "next_attempt_at"])
    return item


def deliveries_send_due(outbox: Outbox, *, now: datetime | None = None, limit: int = 200) -> tuple[int, int]:
    """Attempt every pending delivery whose time has come, oldest first; returns (sent, failed
    attempts). Each is claimed first (its next attempt moved claim_s ahead, atomically), so two
    workers never attempt the same delivery at once; one that fails in any way is logged and
    counted failed, and the others are still attempted."""
    now = now or timezone.now()
    rows = outbox.model._default_manager
    sent = failed = 0
    due = list(
        rows.filter(status=PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .values_list("pk", "next_attempt_at")[:limit]
    )
    for pk, at in due:
        try:
            taken = rows.filter(pk=pk, status=PENDING, next_attempt_at=at).update(
                next_attempt_at=timezone.now() + timedelta(seconds=outbox.claim_s)
            )
            if not taken:
                continue
            item = delivery_attempt(outbox, rows.select_related(*outbox.related).get(pk=pk))
        except Exception:
            log.exception("%s %s could not be attempted", outbox.label, pk)
            failed += 1
            continue
        sent += item.status == SENT
        failed += item.status != SENT
    return sent, failed


def log_page(items: Any, params: Any, *, owner: str) -> list[Any]:
    """A delivery log as its API lists it: `?<owner>=` (one rule's or subscription's), `?status=`
    (pending, sent, failed), newest first, `?limit=` (1 to 500, default 100); a bad value is a
    400 naming it."""
    if params.get(owner):
        items = items.filter(**{f"{owner}_id": query_int(params, owner, 0, 1, 2**31)})
    wanted = params.get("status", "").strip()
    if wanted:
        if wanted not in (PENDING, SENT, FAILED):
            raise invalid("status", "must be pending, sent or failed")
        items = items.filter(status=wanted)
    return list(items.order_by("-id")[: query_int(params, "limit", 100, 1, 500)])

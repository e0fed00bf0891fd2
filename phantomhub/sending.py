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
import smtplib
import time
from dataclasses import dataclass

from django.core.mail import EmailMessage

from phantomhub import egress

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

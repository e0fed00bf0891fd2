"""Sending one alert delivery attempt: a signed webhook POST or an email, and the retry schedule.

The signing, the egress call and the email's failure classes are phantomhub/sending.py's (shared
with the scheduled reports); this module gives them the alerts' settings and user agent.
"""

from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMessage

from phantomhub import egress, sending
from phantomhub.sending import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, Attempt, signature

__all__ = ["DELIVERY_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "Attempt", "email_send", "retry_delay_s",
           "signature", "webhook_post"]  # fmt: skip


def retry_delay_s(attempts: int) -> float:
    """Wait after the ``attempts``-th failed attempt: ALERT_RETRY_BASE_S × 3^(attempts−1)."""
    return sending.retry_delay_s(attempts, base_s=settings.ALERT_RETRY_BASE_S)


def webhook_post(*, url: str, body: bytes, secret: str, delivery_id: int) -> Attempt:
    """One signed POST through the egress policy (phantomhub/egress.py); never raises."""
    return sending.webhook_post(
        url=url, body=body, secret=secret, delivery_id=str(delivery_id), user_agent="PhantomHub-Alerts/1",
        timeout_s=settings.ALERT_WEBHOOK_TIMEOUT_S,
    )  # fmt: skip


def email_send(*, to: list[str], subject: str, text: str) -> Attempt:
    """One email; the subject is sent as one clean line whatever was stored."""
    message = EmailMessage(egress.text_clean(subject, max_chars=250), text, settings.DEFAULT_FROM_EMAIL, to)
    return sending.email_send(message)

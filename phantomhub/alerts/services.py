"""Writes: rules, the per-subject state machine, deliveries and their attempts.

alerts_evaluate() is what Celery beat (tasks.evaluate) and the embedded sweeper call: every
enabled rule observes its subjects (evaluate.py), each (rule, subject) state moves
ok -> pending -> firing -> resolved, a firing that is neither muted nor snoozed gets one
delivery per channel, its resolve one more; then every delivery that is due is attempted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from phantomhub import sending
from phantomhub.alerts import delivery, payloads
from phantomhub.alerts.evaluate import Observation, observe, run_link
from phantomhub.alerts.liveness import server_beat
from phantomhub.alerts.models import (
    AlertDelivery,
    AlertRule,
    AlertState,
    DeliveryChannel,
    DeliveryEvent,
    DeliveryStatus,
    StateKind,
    WebhookFormat,
)
from phantomhub.telemetry.models import Run, RunStatus

log = logging.getLogger(__name__)
# A claimed delivery is not attempted by anyone else for this long (one attempt's timeout, and
# then some): two evaluators never send the same attempt twice.
CLAIM_S = 60
LOG_DAYS = 90  # resolved alerts and finished deliveries are kept this long


@dataclass
class EvaluateResult:
    rules: int = 0
    fired: int = 0
    resolved: int = 0
    skipped: int = 0  # rules that cannot be evaluated here (idle GPUs without the fleet collector)
    sent: int = 0
    failed: int = 0


def _suppressed(rule: AlertRule, state: AlertState, now: datetime) -> bool:
    return bool(
        rule.muted
        or state.muted
        or (rule.snoozed_until is not None and rule.snoozed_until > now)
        or (state.snoozed_until is not None and state.snoozed_until > now)
    )


def deliveries_create(*, rule: AlertRule, state: AlertState | None, body: dict[str, Any], event: str) -> list[AlertDelivery]:
    now = timezone.now()
    made = []
    if rule.webhook_url:
        raw = payloads.slack(body) if rule.webhook_format == WebhookFormat.SLACK else body
        made.append(
            AlertDelivery(
                rule=rule, alert=state, event=event, channel=DeliveryChannel.WEBHOOK, target=rule.webhook_url,
                body=json.dumps(raw, sort_keys=True), next_attempt_at=now,
            )
        )  # fmt: skip
    if rule.email_to:
        subject, text = payloads.email(body)
        made.append(
            AlertDelivery(
                rule=rule, alert=state, event=event, channel=DeliveryChannel.EMAIL, target=", ".join(rule.email_to),
                subject=subject, body=text, next_attempt_at=now,
            )
        )  # fmt: skip
    return AlertDelivery.objects.bulk_create(made)


def _tell(rule: AlertRule, state: AlertState, event: str) -> None:
    url = run_link(state.run_id) if state.run_id else None
    deliveries_create(rule=rule, state=state, body=payloads.generic(rule, state, event, url=url), event=event)


def _record(state: AlertState, obs: Observation, now: datetime) -> None:
    state.subject_label = obs.label[:300]
    state.run = obs.run
    state.value = obs.value
    state.usd_per_hour = obs.usd_per_hour
    state.evidence = {**obs.evidence, "figure": obs.figure, "threshold": obs.threshold}
    state.evaluated_at = now


def _gone_because(state: AlertState) -> str:
    if state.subject.startswith("budget:"):
        return "the budget no longer applies (its month ended, or it was changed or deleted)"
    if state.run_id is None:
        return "the GPU is no longer idle-held (released, busy again, or its node stopped reporting)"
    status = Run.objects.filter(pk=state.run_id).values_list("status", flat=True).first()
    if status == RunStatus.CRASHED:
        return "the run ended: marked crashed after its silence, billed up to its last telemetry"
    return f"the run ended ({status or 'deleted'})"


def state_apply(*, rule: AlertRule, state: AlertState, obs: Observation | None, now: datetime) -> str | None:
    """One step of the state machine; returns "fired" or "resolved" when that happened."""
    happened = None
    if obs is not None:
        _record(state, obs, now)
    breached = obs is not None and obs.breached
    if breached:
        assert obs is not None
        if state.state in (StateKind.OK, StateKind.RESOLVED):
            state.state = StateKind.PENDING
            state.pending_since = obs.breached_since or now
            state.fired_at = state.resolved_at = None
            state.notified = False
        since = state.pending_since
        if state.state == StateKind.PENDING and since is not None and (now - since).total_seconds() >= rule.for_s:
            state.state = StateKind.FIRING
            state.fired_at = now
            happened = "fired"
        if state.state == StateKind.FIRING and not state.notified and not _suppressed(rule, state, now):
            state.notified = True
            state.save()
            _tell(rule, state, DeliveryEvent.FIRING)
    elif state.state == StateKind.PENDING:
        state.state = StateKind.OK
        state.pending_since = None
    elif state.state == StateKind.FIRING:
        state.state = StateKind.RESOLVED
        state.resolved_at = now
        happened = "resolved"
        if obs is None:
            state.evidence = {**state.evidence, "resolved_because": _gone_because(state)}
        if state.notified:
            state.save()
            _tell(rule, state, DeliveryEvent.RESOLVED)
    state.save()
    return happened


def rule_evaluate(*, rule: AlertRule, now: datetime, result: EvaluateResult, up_since: datetime | None = None) -> None:
    observations = observe(rule, now, up_since)
    if observations is None:
        result.skipped += 1
        return
    seen = {obs.subject: obs for obs in observations}
    with transaction.atomic():
        locked = AlertRule.objects.select_for_update().filter(pk=rule.pk).first()
        if locked is None:
            return  # deleted meanwhile
        existing = {s.subject: s for s in AlertState.objects.filter(rule=locked)}
        for subject, obs in seen.items():
            state = existing.get(subject)
            if obs.unknown:
                continue
            if state is None:
                if not obs.breached:
                    continue  # no row for subjects that never breached
                state = AlertState(rule=locked, subject=subject)
            happened = state_apply(rule=locked, state=state, obs=obs, now=now)
            result.fired += happened == "fired"
            result.resolved += happened == "resolved"
        unknown = tuple(subject + ":" for subject, obs in seen.items() if obs.unknown)
        for subject, state in existing.items():
            if subject.startswith(unknown) if unknown else False:
                continue  # a straggler rank of a run whose analysis could not be read
            if subject not in seen and state.state in (StateKind.PENDING, StateKind.FIRING):
                happened = state_apply(rule=locked, state=state, obs=None, now=now)
                result.resolved += happened == "resolved"


def alerts_prune(*, now: datetime) -> int:
    """Forget what no one needs: subjects back to ok for a day, and resolved alerts and deliveries
    older than LOG_DAYS (the log keeps its rows' text; an alert's deliveries outlive it)."""
    old = now - timedelta(days=LOG_DAYS)
    gone = AlertState.objects.filter(state=StateKind.OK, evaluated_at__lt=now - timedelta(days=1)).delete()[0]
    gone += AlertState.objects.filter(state=StateKind.RESOLVED, resolved_at__lt=old).delete()[0]
    gone += AlertDelivery.objects.filter(created_at__lt=old).exclude(status=DeliveryStatus.PENDING).delete()[0]
    return int(gone)


def alerts_evaluate(*, now: datetime | None = None, send: bool = True) -> EvaluateResult:
    """Evaluate every enabled rule, then attempt the deliveries that are due, then prune. Each
    step runs whatever the one before did: a rule that fails (bad data in one analysis) is logged
    and does not stop the others, and a delivery that fails does not stop pruning."""
    now = now or timezone.now()
    result = EvaluateResult()
    try:  # the server's own liveness: what it missed while down is not its subjects' doing
        up_since = server_beat(at=timezone.now())
    except Exception:
        log.exception("the evaluator's beat could not be stored")
        up_since = None
    for rule in AlertRule.objects.filter(enabled=True).select_related("team", "project"):
        result.rules += 1
        try:
            rule_evaluate(rule=rule, now=now, result=result, up_since=up_since)
        except Exception:
            log.exception("alert rule %s could not be evaluated", rule.pk)
    if send:
        try:
            result.sent, result.failed = deliveries_send_due()
        except Exception:
            log.exception("due alert deliveries could not be read")
    try:
        alerts_prune(now=now)
    except Exception:
        log.exception("old alerts could not be pruned")
    return result


def _send(item: AlertDelivery) -> delivery.Attempt:
    if item.channel == DeliveryChannel.WEBHOOK:
        secret = item.rule.webhook_secret
        return delivery.webhook_post(url=item.target, body=item.body.encode(), secret=secret, delivery_id=item.pk)
    to = [a.strip() for a in item.target.split(",") if a.strip()]
    return delivery.email_send(to=to, subject=item.subject, text=item.body)


def _max_attempts() -> int:
    from django.conf import settings

    return int(settings.ALERT_MAX_ATTEMPTS)


def _retry_base_s() -> float:
    from django.conf import settings

    return float(settings.ALERT_RETRY_BASE_S)


OUTBOX = sending.Outbox(
    model=AlertDelivery, send=lambda item: _send(item), max_attempts=_max_attempts, retry_base_s=_retry_base_s,
    claim_s=CLAIM_S, related=("rule",), label="alert delivery",
)  # fmt: skip


def delivery_attempt(*, item: AlertDelivery) -> AlertDelivery:
    """One attempt; on failure either the next attempt is scheduled (backoff) or it gave up
    (sending.delivery_attempt: counted before it is made, so no delivery is re-sent forever)."""
    result: AlertDelivery = sending.delivery_attempt(OUTBOX, item)
    return result


def deliveries_send_due(*, now: datetime | None = None, limit: int = 200) -> tuple[int, int]:
    """Attempt every pending delivery whose time has come, oldest first (sending.deliveries_send_due)."""
    return sending.deliveries_send_due(OUTBOX, now=now, limit=limit)


def rule_test_send(*, rule: AlertRule) -> list[AlertDelivery]:
    """A test message through every channel of the rule, sent now (and retried like any other)."""
    example = AlertState(rule=rule, subject="test", subject_label="a test message", value=None)
    example.evidence = {"figure": "test", "note": "sent from Settings to check this destination"}
    body = payloads.generic(rule, example, DeliveryEvent.TEST, url=None)
    body["summary"] = f"Test of the alert rule {rule.name!r}: this destination receives its alerts"
    with transaction.atomic():
        made = deliveries_create(rule=rule, state=None, body=body, event=DeliveryEvent.TEST)
    out = []
    for item in made:
        item.rule = rule
        try:
            out.append(delivery_attempt(item=item))
        except Exception:  # the log row keeps what happened; the caller still gets an answer
            log.exception("alert delivery %s: the test attempt could not be recorded", item.pk)
            item.refresh_from_db()
            out.append(item)
    return out


def rule_save(*, rule: AlertRule, changes: dict[str, Any]) -> AlertRule:
    for key, value in changes.items():
        setattr(rule, key, value)
    with transaction.atomic():
        rule.save()
        if not rule.enabled:
            # A disabled rule watches nothing: its pending subjects start over when re-enabled.
            AlertState.objects.filter(rule=rule, state=StateKind.PENDING).update(state=StateKind.OK, pending_since=None)
    return rule


def state_silence(*, state: AlertState, muted: bool | None, snoozed_until: datetime | None, clear_snooze: bool) -> AlertState:
    if muted is not None:
        state.muted = muted
    if clear_snooze:
        state.snoozed_until = None
    elif snoozed_until is not None:
        state.snoozed_until = snoozed_until
    state.save(update_fields=["muted", "snoozed_until"])
    return state

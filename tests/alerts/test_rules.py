"""One test per rule kind on runs analysed by the real pipeline, then dedup, resolve, snooze, mute.

Oracles are the injected step compositions: e.g. steps of 2 s whose FLOPs are worth 0.35 s at the
target MFU leave a useful share of 0.35 / 2, so waste is 1 - 0.175 of the run's $36/h.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from phantomhub.alerts import services
from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState
from phantomhub.telemetry.models import Run
from phantomhub.waste.models import RunAnalysis
from tests.alerts.conftest import Receiver, analyse, live_run, steps
from tests.conftest import Tenant
from tests.waste.test_analysis_service import T0_NS, S, finish, make_run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("price_36")]
NOW = datetime(2026, 9, 21, 12, 0, tzinfo=UTC)


def rule(**fields: Any) -> AlertRule:
    base: dict[str, Any] = {"name": "r", "kind": "waste_rate", "for_s": 60, "window_s": 30}
    return AlertRule.objects.create(**(base | fields))


def state_of(r: AlertRule) -> AlertState:
    return AlertState.objects.get(rule=r)


def stalled_run(owner: Tenant) -> str:
    """60 steps of 1 s (useful 0.35 s each), then 30 of 2 s with 1.2 s of data wait each."""
    return live_run(owner, steps(60), steps(30, first=60, dur_s=2.0, data_s=1.2, t0_ns=T0_NS + 60 * S - 120 * S))


def test_waste_rate_fires_after_n_minutes_at_the_injected_rate(owner: Tenant, receiver: Receiver) -> None:
    run_id = stalled_run(owner)
    r = rule(params={"usd_per_hour": 25.0}, webhook_url=receiver.url)
    services.alerts_evaluate(now=NOW)
    s = state_of(r)
    assert s.state == "pending" and s.pending_since == NOW
    # Oracle: useful share 0.35 / 2 s over the last 30 s of steps, at $36 per GPU-hour.
    assert s.value == pytest.approx((1 - 0.35 / 2) * 36, rel=0.02)
    assert s.evidence["shares"]["data_stall"] == pytest.approx(1.2 / 2, rel=0.02)
    services.alerts_evaluate(now=NOW + timedelta(seconds=59))
    assert state_of(r).state == "pending" and not AlertDelivery.objects.exists()
    services.alerts_evaluate(now=NOW + timedelta(seconds=61))
    s = state_of(r)
    assert s.state == "firing" and s.notified
    got = receiver.wait_for(1, 5)
    assert len(got) == 1
    body = got[0].json
    assert body["event"] == "firing" and body["subject"]["run_id"] == run_id
    assert body["url"].endswith(f"/runs/{run_id}") and body["url"].startswith("http")
    assert body["usd_per_hour"] == pytest.approx(29.7, rel=0.02) and body["figure"]["threshold"] == 25.0
    assert body["evidence"]["run_usd_per_hour"] == pytest.approx(36, rel=0.01)


def test_waste_share_rule_does_not_fire_on_a_healthy_run(owner: Tenant) -> None:
    live_run(owner, steps(100))
    r = rule(params={"share": 0.7}, for_s=0)  # healthy waste share: 1 - 0.35 = 0.65
    services.alerts_evaluate(now=NOW)
    assert not AlertState.objects.filter(rule=r).exists()
    r.params = {"share": 0.6}
    r.save()
    services.alerts_evaluate(now=NOW)
    assert state_of(r).state == "firing" and state_of(r).value == pytest.approx(0.65, rel=0.02)


def test_one_alert_until_it_resolves_then_one_resolve(owner: Tenant, receiver: Receiver) -> None:
    run_id = stalled_run(owner)
    r = rule(params={"usd_per_hour": 25.0}, for_s=0, webhook_url=receiver.url)
    for k in range(5):
        services.alerts_evaluate(now=NOW + timedelta(seconds=20 * k))
    assert len(receiver.wait_for(1, 5)) == 1 and AlertDelivery.objects.count() == 1
    # The stall ends: 40 s of healthy steps push the stalled ones out of the 30 s window.
    assert owner.post_steps(run_id, steps(40, first=90, t0_ns=T0_NS + 180 * S - 90 * S)).status_code == 200
    analyse(run_id)
    services.alerts_evaluate(now=NOW + timedelta(seconds=120))
    services.alerts_evaluate(now=NOW + timedelta(seconds=140))
    got = receiver.wait_for(2, 5)
    assert [g.json["event"] for g in got] == ["firing", "resolved"]
    assert state_of(r).state == "resolved" and state_of(r).value == pytest.approx(0.65 * 36, rel=0.02)


def test_a_run_that_ends_while_firing_resolves(owner: Tenant, receiver: Receiver) -> None:
    run_id = stalled_run(owner)
    rule(params={"usd_per_hour": 25.0}, for_s=0, webhook_url=receiver.url)
    services.alerts_evaluate(now=NOW)
    finish(owner, run_id, T0_NS + 120 * S)
    analyse(run_id)
    services.alerts_evaluate(now=NOW + timedelta(seconds=20))
    got = receiver.wait_for(2, 5)
    assert [g.json["event"] for g in got] == ["firing", "resolved"]
    assert got[1].json["evidence"]["resolved_because"] == "the run ended (finished)"
    assert got[1].json["summary"].endswith(": the run ended (finished)")


def test_a_breach_shorter_than_n_minutes_never_fires(owner: Tenant) -> None:
    run_id = stalled_run(owner)
    r = rule(params={"usd_per_hour": 25.0}, for_s=120)
    services.alerts_evaluate(now=NOW)
    owner.post_steps(run_id, steps(40, first=90, t0_ns=T0_NS + 180 * S - 90 * S))
    analyse(run_id)
    services.alerts_evaluate(now=NOW + timedelta(seconds=60))
    assert state_of(r).state == "ok" and not AlertDelivery.objects.exists()


@pytest.mark.parametrize("where", ["rule", "subject"])
def test_muted_and_snoozed_alerts_send_nothing_until_the_snooze_ends(owner: Tenant, receiver: Receiver, where: str) -> None:
    stalled_run(owner)
    r = rule(params={"usd_per_hour": 25.0}, for_s=0, webhook_url=receiver.url)
    if where == "rule":
        r.snoozed_until = NOW + timedelta(minutes=10)
        r.save()
        services.alerts_evaluate(now=NOW)
    else:
        services.alerts_evaluate(now=NOW - timedelta(seconds=1))  # creates the subject, and tells
        AlertDelivery.objects.all().delete()
        receiver.got.clear()
        s = state_of(r)
        s.state, s.notified, s.snoozed_until = "pending", False, NOW + timedelta(minutes=10)
        s.save()
        services.alerts_evaluate(now=NOW)
    assert state_of(r).state == "firing" and not state_of(r).notified
    services.alerts_evaluate(now=NOW + timedelta(minutes=5))
    assert not AlertDelivery.objects.exists()
    services.alerts_evaluate(now=NOW + timedelta(minutes=11))  # the snooze is over, still firing
    assert len(receiver.wait_for(1, 5)) == 1 and state_of(r).notified


def test_a_muted_subject_fires_and_resolves_silently(owner: Tenant, receiver: Receiver) -> None:
    run_id = stalled_run(owner)
    r = rule(params={"usd_per_hour": 25.0}, for_s=0, webhook_url=receiver.url, muted=True)
    services.alerts_evaluate(now=NOW)
    assert state_of(r).state == "firing"
    finish(owner, run_id, T0_NS + 120 * S)
    analyse(run_id)
    services.alerts_evaluate(now=NOW + timedelta(seconds=20))
    assert state_of(r).state == "resolved" and not AlertDelivery.objects.exists() and not receiver.got


def _baseline_runs(owner: Tenant, n: int = 3) -> None:
    for k in range(n):
        t0 = T0_NS - (k + 1) * 1000 * S
        run_id = make_run(owner, allocation_start=_iso(t0), started_at=_iso(t0))
        owner.post_steps(run_id, steps(50, t0_ns=t0, tokens=1000))
        finish(owner, run_id, t0 + 50 * S)
        analyse(run_id)


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")


def test_tokens_per_second_below_the_project_baseline(owner: Tenant) -> None:
    _baseline_runs(owner)
    # 1,000 tokens a step at 1.6 s a step: 625 tokens/s against the baseline's 1,000 (-37.5%).
    live_run(owner, steps(40, dur_s=1.6, data_s=0.8, tokens=1000))
    r = rule(kind="efficiency_drop", params={"metric": "tokens_per_s", "drop_pct": 20}, for_s=0)
    services.alerts_evaluate(now=NOW)
    s = state_of(r)
    assert s.state == "firing"
    assert s.evidence["baseline"] == pytest.approx(1000, rel=0.02) and s.evidence["current"] == pytest.approx(625, rel=0.03)
    assert s.value == pytest.approx(37.5, abs=1.5) and len(s.evidence["baseline_run_ids"]) == 3
    assert s.usd_per_hour == pytest.approx(0.375 * 36, rel=0.05)


def test_mfu_below_the_project_baseline_and_a_run_at_baseline(owner: Tenant) -> None:
    _baseline_runs(owner)  # MFU over step time 0.5 x 0.35
    slow = live_run(owner, steps(40, dur_s=2.0, data_s=1.0))  # half the MFU: -50%
    live_run(owner, steps(40))  # at the baseline
    r = rule(kind="efficiency_drop", params={"metric": "mfu", "drop_pct": 30}, for_s=0)
    services.alerts_evaluate(now=NOW)
    states = list(AlertState.objects.filter(rule=r))
    assert [s.subject for s in states] == [f"run:{slow}"]
    assert states[0].value == pytest.approx(50, abs=2)


def test_a_straggler_rank_costing_others_more_than_x_per_hour(owner: Tenant) -> None:
    n = 100
    run_id = make_run(owner, gpu_count=2, world_size=2, allocation_start=_iso(T0_NS))
    for rank, (compute_s, comm_s) in enumerate([(0.5, 0.4), (0.9, 0.0)]):
        body = steps(n, rank=rank, data_s=0.1)
        body["steps"].update(
            forward_ns=[int(compute_s * S)] * n, backward_ns=[0] * n, optimizer_ns=[0] * n, comm_ns=[int(comm_s * S)] * n
        )
        assert owner.post_steps(run_id, body).status_code == 200
    analyse(run_id)
    r = rule(kind="straggler", params={"usd_per_hour": 10.0}, for_s=0)
    services.alerts_evaluate(now=NOW)
    s = state_of(r)
    # Rank 0 waits 0.4 s a step for rank 1: 0.4 GPU-s per second of run at $36 per GPU-hour.
    assert s.subject == f"run:{run_id}:rank:1" and s.state == "firing"
    assert s.value == pytest.approx(0.4 * 36, rel=0.03)
    r.params = {"usd_per_hour": 20.0}
    r.save()
    services.alerts_evaluate(now=NOW)
    assert state_of(r).state == "resolved"


def test_a_silent_run_that_is_still_billed(owner: Tenant) -> None:
    run_id = live_run(owner, steps(10))
    now = timezone.now()
    Run.objects.filter(pk=run_id).update(last_seen_at=now - timedelta(seconds=400))
    r = rule(kind="silent_run", for_s=300)
    services.alerts_evaluate(now=now)
    s = state_of(r)
    assert s.state == "firing" and s.value == pytest.approx(400, abs=1)
    assert s.usd_per_hour == pytest.approx(36, rel=0.01)
    owner.post_steps(run_id, steps(5, first=10))  # telemetry again
    services.alerts_evaluate(now=timezone.now())
    assert state_of(r).state == "resolved" and "resolved_because" not in state_of(r).evidence


def test_a_silent_run_marked_crashed_resolves_saying_so(owner: Tenant, receiver: Receiver) -> None:
    from phantomhub.waste.sweeps import runs_mark_crashed

    run_id = live_run(owner, steps(10))
    now = timezone.now()
    Run.objects.filter(pk=run_id).update(last_seen_at=now - timedelta(seconds=1000))
    rule(kind="silent_run", for_s=300, webhook_url=receiver.url)
    services.alerts_evaluate(now=now)
    assert runs_mark_crashed(now=now) == 1  # crash_after_s (900 s) passed: billing stops
    services.alerts_evaluate(now=now + timedelta(seconds=20))
    got = receiver.wait_for(2, 5)
    assert [g.json["event"] for g in got] == ["firing", "resolved"]
    assert "marked crashed" in got[1].json["summary"]


def test_without_the_fleet_collector_the_idle_gpu_rule_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "phantomhub.fleet.selectors", None)
    rule(kind="idle_gpu", for_s=60)
    result = services.alerts_evaluate(now=NOW)
    assert result.skipped == 1 and not AlertState.objects.exists()


def test_email_names_the_run_the_figure_and_the_link(owner: Tenant, settings: Any) -> None:
    from django.core import mail

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.PUBLIC_URL = "https://phantomhub.example.com"
    run_id = stalled_run(owner)
    rule(params={"usd_per_hour": 25.0}, for_s=0, email_to=["oncall@example.com"])
    services.alerts_evaluate(now=NOW)
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["oncall@example.com"] and "waste rate $29." in message.subject
    assert f"https://phantomhub.example.com/runs/{run_id}" in message.body
    assert AlertDelivery.objects.get().status == "sent"


def test_one_unreadable_analysis_leaves_its_alert_alone_and_the_others_are_evaluated(owner: Tenant) -> None:
    broken = stalled_run(owner)
    r = rule(params={"usd_per_hour": 25.0}, for_s=0)
    services.alerts_evaluate(now=NOW)
    assert state_of(r).state == "firing"
    RunAnalysis.objects.filter(run_id=broken).update(result={"windows": {"t_start_ns": [1], "width_ns": "wide"}})
    healthy_stalled = stalled_run(owner)
    services.alerts_evaluate(now=NOW + timedelta(seconds=20))
    states = {s.subject: s.state for s in AlertState.objects.filter(rule=r)}
    assert states == {f"run:{broken}": "firing", f"run:{healthy_stalled}": "firing"}


def test_without_the_project_baselines_module_the_same_gpu_runs_stand_in(owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "phantomhub.waste.baseline", None)
    _baseline_runs(owner)
    live_run(owner, steps(40, dur_s=1.6, data_s=0.8, tokens=1000))
    r = rule(kind="efficiency_drop", params={"metric": "tokens_per_s", "drop_pct": 20}, for_s=0)
    services.alerts_evaluate(now=NOW)
    s = state_of(r)
    assert s.state == "firing" and "last 3 finished runs" in s.evidence["baseline_basis"]
    assert s.evidence["baseline"] == pytest.approx(1000, rel=0.02)

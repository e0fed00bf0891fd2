"""What an alert says: the generic JSON body, the Slack-compatible one, and the email text."""

from __future__ import annotations

from typing import Any

from phantomhub.alerts.models import AlertRule, AlertState
from phantomhub.egress import text_clean

FIGURE_NAMES = {
    "waste_share": "waste share",
    "waste_usd_per_hour": "waste rate",
    "mfu_drop_pct": "MFU below baseline",
    "tokens_per_s_drop_pct": "tokens/s below baseline",
    "caused_wait_usd_per_hour": "others' wait caused",
    "silent_seconds": "silent for",
    "idle_held_seconds": "idle-held for",
    "forecast_usd": "month-end forecast",
}


def _fmt(figure: str, value: float | None) -> str:
    if value is None:
        return "unknown"
    if figure == "waste_share":
        return f"{value * 100:.1f}%"
    if figure.endswith("_pct"):
        return f"{value:.1f}%"
    if figure.endswith("_usd"):
        return f"${value:,.2f}"
    if figure.endswith("usd_per_hour"):
        return f"${value:,.2f}/h"
    if figure.endswith("_seconds"):
        return f"{value / 60:.1f} min" if value >= 120 else f"{value:.0f} s"
    return f"{value:g}"


def summary(rule: AlertRule, state: AlertState, event: str) -> str:
    figure = str(state.evidence.get("figure", ""))
    name = FIGURE_NAMES.get(figure, figure.replace("_", " "))
    money = f", ${state.usd_per_hour:,.2f}/h" if state.usd_per_hour is not None and not figure.endswith("usd_per_hour") else ""
    if event == "resolved":
        gone = state.evidence.get("resolved_because")
        if gone:
            return f"Resolved: {rule.name}: {state.subject_label}: {gone}"
        return f"Resolved: {rule.name}: {state.subject_label} is back within the rule ({name} {_fmt(figure, state.value)})"
    threshold = state.evidence.get("threshold")
    limit = f" (threshold {_fmt(figure, threshold)})" if isinstance(threshold, (int, float)) else ""
    cut = state.evidence.get("cut_usd")
    if isinstance(cut, (int, float)) and figure == "forecast_usd":
        enough = "would bring it under budget" if state.evidence.get("cut_enough") else "is all there is, not enough"
        money += f"; recovering ${cut:,.2f} of recoverable spend {enough}"
    return f"{rule.name}: {state.subject_label}: {name} {_fmt(figure, state.value)}{limit}{money}"


def generic(rule: AlertRule, state: AlertState, event: str, *, url: str | None) -> dict[str, Any]:
    evidence = {k: v for k, v in state.evidence.items() if k not in ("figure", "threshold")}
    return {
        "event": event,
        "alert_id": state.pk,
        "rule": {"id": rule.pk, "name": rule.name, "kind": rule.kind, "scope": rule.scope, "for_s": rule.for_s},
        "subject": {"key": state.subject, "label": state.subject_label, "run_id": str(state.run_id) if state.run_id else None},
        "figure": {
            "name": state.evidence.get("figure"),
            "value": state.value,
            "threshold": state.evidence.get("threshold"),
        },
        "usd_per_hour": state.usd_per_hour,
        "evidence": evidence,
        "summary": summary(rule, state, event),
        "url": url,
        "pending_since": state.pending_since.isoformat() if state.pending_since else None,
        "fired_at": state.fired_at.isoformat() if state.fired_at else None,
        "resolved_at": state.resolved_at.isoformat() if state.resolved_at else None,
    }


def slack_escape(text: object) -> str:
    """Text as Slack shows it literally: control characters gone, and `&`, `<`, `>` escaped
    (Slack's own rules), so a run named `<!channel>` pings nobody and `<url|label>` links nowhere."""
    return text_clean(text, max_chars=3000).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(body: dict[str, Any]) -> dict[str, Any]:
    """Slack incoming-webhook shape: `text` (notifications) and one mrkdwn section."""
    icon = ":white_check_mark:" if body["event"] == "resolved" else ":rotating_light:"
    link = f" <{slack_escape(body['url'])}|open the run>" if body.get("url") else ""
    text = f"{icon} {slack_escape(body['summary'])}{link}"
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


def email(body: dict[str, Any]) -> tuple[str, str]:
    """The subject (one line: it is a header) and the text; every value is one clean line, so a
    name with CR/LF adds no header and no line."""
    subject = text_clean(f"[PhantomHub] {body['summary']}", max_chars=250)
    lines = [text_clean(body["summary"], max_chars=2000), ""]
    if body.get("url"):
        lines += [f"Run page: {text_clean(body['url'], max_chars=2000)}", ""]
    lines.append("Evidence:")
    for key, value in sorted(body["evidence"].items()):
        lines.append(f"  {text_clean(key, max_chars=200)}: {text_clean(value, max_chars=2000)}")
    return subject, "\n".join(lines) + "\n"

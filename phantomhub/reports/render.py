"""A report as it is sent: the email (subject, text, HTML; the CSV attached by the sender) and the
webhook body, generic JSON or Slack's shape (docs/reports.md, "Email" and "Webhook").

Every value from a name people chose (a team, a view, a run) is escaped in the HTML and made one
clean line in the subject and the text (egress.text_clean), so a name with markup or CR/LF adds
no tag, header or line.
"""

from __future__ import annotations

from typing import Any

from django.utils.html import escape

from phantomhub.egress import text_clean
from phantomhub.reports.content import Report

# The CSV goes in the webhook's body up to this size; past it `csv` is null and the link is the way
# to the figures (a runs list of thousands of rows is not a webhook payload).
WEBHOOK_CSV_MAX_BYTES = 256 * 1024


def email_subject(report: Report) -> str:
    return text_clean(f"[PhantomHub] {report.title}", max_chars=250)


def email_text(report: Report) -> str:
    lines = [text_clean(report.title, max_chars=300), ""]
    if report.note:
        lines += [f"NOTE: {text_clean(report.note, max_chars=2000)}", ""]
    lines += [text_clean(line, max_chars=2000) for line in report.lines]
    for table in report.tables:
        lines += ["", text_clean(table.title, max_chars=300) + ":"]
        if not table.rows:
            lines.append("  none")
        else:
            lines.append("  " + " | ".join(table.columns))
        for row in table.rows:
            lines.append("  " + " | ".join(text_clean(cell, max_chars=300) for cell in row))
    lines += ["", f"The figures are in the attached {report.csv_name}."]
    lines.append(f"Open the page: {text_clean(report.url, max_chars=2000)}")
    return "\n".join(lines) + "\n"


def email_html(report: Report) -> str:
    parts = [f"<h2>{escape(report.title)}</h2>"]
    if report.note:
        parts.append(f'<p style="padding:8px;border-left:4px solid #b45309;background:#fffbeb"><strong>Note:</strong> '
                     f"{escape(report.note)}</p>")  # fmt: skip
    parts += [f"<p>{escape(line)}</p>" for line in report.lines]
    for table in report.tables:
        parts.append(f"<h3>{escape(table.title)}</h3>")
        if not table.rows:
            parts.append("<p>None.</p>")
            continue
        head = "".join(f'<th style="text-align:left;padding:2px 8px">{escape(c)}</th>' for c in table.columns)
        body = "".join(
            "<tr>" + "".join(f'<td style="padding:2px 8px">{escape(cell)}</td>' for cell in row) + "</tr>" for row in table.rows
        )
        parts.append(f'<table style="border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    parts.append(f"<p>The figures are in the attached {escape(report.csv_name)}. "
                 f'<a href="{escape(report.url)}">Open the page in PhantomHub</a>.</p>')  # fmt: skip
    return '<!doctype html><html><body style="font-family:sans-serif">' + "".join(parts) + "</body></html>"


def webhook_generic(report: Report, *, subscription_id: int) -> dict[str, Any]:
    small = len(report.csv.encode()) <= WEBHOOK_CSV_MAX_BYTES
    return {
        "event": "report",
        "subscription_id": subscription_id,
        "report": report.kind,
        "title": report.title,
        "period": {"key": report.period.key, "start": report.period.start.isoformat(), "end": report.period.end.isoformat()},
        "summary": report.lines,
        "note": report.note or None,
        "totals": report.totals,
        "figures": report.figures,
        "url": report.url,
        "csv_name": report.csv_name,
        "csv": report.csv if small else None,
        "csv_truncated": not small,
    }


def _slack_escape(text: object) -> str:
    return text_clean(text, max_chars=3000).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_slack(report: Report) -> dict[str, Any]:
    """Slack's incoming-webhook shape: `text` and one mrkdwn section; names cannot ping or link."""
    note = f"\n:warning: {_slack_escape(report.note)}" if report.note else ""
    text = f":bar_chart: *{_slack_escape(report.title)}*\n" + "\n".join(_slack_escape(line) for line in report.lines)
    text += f"{note}\n<{_slack_escape(report.url)}|Open the page>"
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]}

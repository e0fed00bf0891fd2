"""The month's finance review as a PDF for sign-off (docs/portal-api.md, Finance).

Drawn from the review dict the page and the CSV answer (api._finance_view: the closed month's copy
or the live rollups, restricted to the reader's rows), never computed again: its rows and totals
are printed with the CSV's rounding (money to the cent, GPU-hours to the thousandth). The only
sums made here are the per-team subtotals, added from the printed project rows in Decimal so that
they foot to the rows and the total exactly.

Every page carries the month's status (closed on a date by someone, or live: figures may change),
"page X of Y" and when it was generated, so a printed page on its own says what it is. The work is
bounded: at most `max_rows` project rows (and as many team rows) are printed, the largest by spend,
and the first page says how many were left out; the totals always cover every row.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import KeepTogether, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle
from reportlab.platypus.flowables import Flowable

from phantomhub.waste.core.model import CATEGORIES

PAGE = landscape(A4)
MARGIN = 14 * mm
FONT, BOLD, SIZE = "Helvetica", "Helvetica-Bold", 7
CATEGORY_LABEL = {
    "useful_compute": "Useful compute",
    "compute_inefficiency": "Compute inefficiency",
    "data_stall": "Data stall",
    "comm_exposed": "Exposed communication",
    "host_overhead": "Host overhead",
    "idle": "Idle",
}
CATEGORY_SHORT = {"useful_compute": "Useful", "compute_inefficiency": "Ineffic.", "data_stall": "Data",
                  "comm_exposed": "Comm", "host_overhead": "Host", "idle": "Idle"}  # fmt: skip


@dataclass(frozen=True)
class PdfContext:
    """Who the PDF is for and when: the title and every page's footer say it."""

    org: str
    reader: str
    sees_everything: bool
    generated_at: datetime
    currency: str
    max_rows: int


def money(value: float | int | None) -> str:
    """A figure as the CSV writes it (2 places), with thousands separators; never `-0.00`."""
    text = f"{(value or 0):,.2f}"
    return "0.00" if text == "-0.00" else text


def hours(value: float | int | None) -> str:
    text = f"{(value or 0):,.3f}"
    return "0.000" if text == "-0.000" else text


def signed(value: float | int | None) -> str:
    text = money(value)
    return text if text.startswith("-") or text == "0.00" else "+" + text


def price(text: str | None) -> str:
    """A price-book price as the page shows it: to the cent when it is whole cents, else 4 places."""
    if text is None:
        return ""
    value = Decimal(text)
    return f"{value:,.2f}" if value == value.quantize(Decimal("0.01")) else f"{value:,.4f}"


def _tier(tier: str | None) -> str:
    return tier.replace("_", "-") if tier else "any"


def _when(iso: str | None) -> str:
    if not iso:
        return ""
    at = datetime.fromisoformat(iso)
    return f"{at:%Y-%m-%d %H:%M} UTC" if at.utcoffset() is not None else f"{at:%Y-%m-%d %H:%M}"


def _month_name(label: str) -> str:
    return datetime.strptime(label, "%Y-%m").strftime("%B %Y")


def status_line(review: dict[str, Any]) -> str:
    """The month's status as each page's footer says it."""
    if review.get("closed"):
        by = f" by {review['closed_by']}" if review.get("closed_by") else ""
        return f"{review['month']} CLOSED on {_when(review.get('closed_at'))}{by}: frozen figures"
    return f"{review['month']} LIVE: figures may change"


def _clip(text: str, width: float, font: str = FONT, size: float = SIZE) -> str:
    """Text cut to fit a cell (a long project name must not widen the table off the page)."""
    if stringWidth(text, font, size) <= width:
        return text
    while text and stringWidth(text + "…", font, size) > width:
        text = text[:-1]
    return text + "…"


def _numbered_canvas(review: dict[str, Any], ctx: PdfContext) -> type[Canvas]:
    """A canvas that holds its pages until the end, to print "page X of Y" on each."""
    status = status_line(review)
    head = f"{ctx.org} · Finance review {review['month']}"
    generated = f"Generated {ctx.generated_at:%Y-%m-%d %H:%M} UTC for {ctx.reader}"

    class NumberedCanvas(Canvas):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pages: list[dict[str, Any]] = []

        def showPage(self) -> None:  # reportlab's name
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self) -> None:
            total = len(self._pages)
            for number, state in enumerate(self._pages, start=1):
                self.__dict__.update(state)
                self._furniture(number, total)
                super().showPage()
            super().save()

        def _furniture(self, number: int, total: int) -> None:
            width, height = PAGE
            self.saveState()
            self.setFont(FONT, 7)
            self.setFillColor(colors.HexColor("#555555"))
            self.drawString(MARGIN, height - MARGIN + 4 * mm, _clip(head, width / 2, FONT, 7))
            self.setStrokeColor(colors.HexColor("#999999"))
            self.line(MARGIN, MARGIN - 3 * mm, width - MARGIN, MARGIN - 3 * mm)
            self.setFillColor(colors.black)
            self.setFont(BOLD, 7.5)
            self.drawString(MARGIN, MARGIN - 7 * mm, _clip(status, width / 2 + 15 * mm, BOLD, 7.5))
            self.setFont(FONT, 7)
            self.drawCentredString(width / 2 + 40 * mm, MARGIN - 7 * mm, f"Page {number} of {total}")
            self.drawRightString(width - MARGIN, MARGIN - 7 * mm, _clip(generated, 70 * mm, FONT, 7))
            self.restoreState()

    return NumberedCanvas


def _styles() -> dict[str, ParagraphStyle]:
    base = getSampleStyleSheet()
    return {
        "title": ParagraphStyle("title", parent=base["Title"], alignment=0, fontSize=16, leading=20, spaceAfter=2),
        "h2": ParagraphStyle("h2", parent=base["Heading2"], fontSize=11, leading=14, spaceBefore=8, spaceAfter=4),
        "body": ParagraphStyle("body", parent=base["BodyText"], fontSize=8.5, leading=11),
        "status": ParagraphStyle("status", parent=base["BodyText"], fontSize=10, leading=13, spaceAfter=4),
        "small": ParagraphStyle("small", parent=base["BodyText"], fontSize=7.5, leading=9.5),
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[float], *, numeric_from: int,
           total_last: bool = False) -> Table:  # fmt: skip
    """A table with a repeated header row (if it spans pages), numbers right-aligned."""
    table = Table([list(header), *[list(r) for r in rows]], colWidths=list(widths), repeatRows=1, hAlign="LEFT")
    style = [
        ("FONT", (0, 0), (-1, -1), FONT, SIZE),
        ("FONT", (0, 0), (-1, 0), BOLD, SIZE),
        ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8ebf0")),
        ("LINEBELOW", (0, 0), (-1, 0), 0.6, colors.HexColor("#667085")),
        ("ALIGN", (numeric_from, 0), (-1, -1), "RIGHT"),
        ("TOPPADDING", (0, 0), (-1, -1), 1.5),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
        ("LEFTPADDING", (0, 0), (-1, -1), 2.5),
        ("RIGHTPADDING", (0, 0), (-1, -1), 2.5),
        ("ROWBACKGROUNDS", (0, 1), (-1, -1), [colors.white, colors.HexColor("#f6f7f9")]),
    ]
    if total_last:
        style += [("FONT", (0, -1), (-1, -1), BOLD, SIZE), ("LINEABOVE", (0, -1), (-1, -1), 0.6, colors.black)]
    table.setStyle(TableStyle(style))
    return table


def _rows_table(header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[float], *, numeric_from: int,
               total: Sequence[str] | None) -> list[Flowable]:  # fmt: skip
    """Rows (and the total, last) as one table that splits across pages with its header repeated
    (one table of 5,000 rows renders in about 2.5 s: the split is not quadratic)."""
    body = [list(r) for r in rows] + ([list(total)] if total is not None else [])
    return [_table(header, body, widths, numeric_from=numeric_from, total_last=total is not None)]


def _largest(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most `limit` rows, the largest by spend, in their order (team, project)."""
    if len(rows) <= limit:
        return rows
    kept = {id(r) for r in sorted(rows, key=lambda r: -r["cost_usd"])[:limit]}
    return [r for r in rows if id(r) in kept]


FIGURE_KEYS = ("cost_usd", "waste_usd", "recoverable_usd", "lost_usd")


def _figures(row: dict[str, Any]) -> list[str]:
    """A row's figures in the project table's order: the CSV's, money first as on the page."""
    cats = [money(row["categories_usd"][c]) for c in CATEGORIES]
    return [str(row["runs"]), hours(row["gpu_hours"]), *(money(row.get(k, 0)) for k in FIGURE_KEYS), *cats]


def _project_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    rows = review["rows"]
    if not rows:
        return [Paragraph("By team and project", styles["h2"]), Paragraph("No spend this month.", styles["body"])]
    shown = _largest(rows, ctx.max_rows)
    header = ["Team", "Project", "Runs", "GPU-hours", "Spend", "Waste", "Recoverable", "Lost",
              *(CATEGORY_SHORT[c] for c in CATEGORIES)]  # fmt: skip
    numbers = [30.0, 58.0] + [52.0] * 10
    names = (PAGE[0] - 2 * MARGIN - sum(numbers)) / 2
    widths = [names, names, *numbers]
    body = [[_clip(r["team"], names - 5), _clip(r["project"], names - 5), *_figures(r)] for r in shown]
    total = ["TOTAL", "", *_figures(review["totals"])]
    out: list[Flowable] = [Paragraph(f"By team and project ({ctx.currency})", styles["h2"])]
    if len(shown) < len(rows):
        out.append(_truncated(len(shown), len(rows), "project rows", styles))
    out.append(Paragraph(
        "Categories: " + "; ".join(f"{CATEGORY_SHORT[c]} = {CATEGORY_LABEL[c]}" for c in CATEGORIES)
        + ". Lost = lost to failures (rework, restarts, checkpoints; part of Idle).", styles["small"],
    ))  # fmt: skip
    out.append(Spacer(1, 2 * mm))
    return [*out, *_rows_table(header, body, widths, numeric_from=2, total=total)]


def _truncated(shown: int, total: int, what: str, styles: dict[str, ParagraphStyle]) -> Paragraph:
    return Paragraph(
        f"<b>Truncated:</b> the {shown:,} largest of {total:,} {what} by spend are listed; the other "
        f"{total - shown:,} are counted in the totals. The CSV of the month has every row.",
        styles["body"],
    )


def _team_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per team, the sums of its printed project rows (Decimal of the printed figures: they foot)."""
    teams: dict[str, dict[str, Any]] = {}
    for row in rows:
        team = teams.setdefault(row["team"], {"team": row["team"], "projects": 0, "runs": 0, "gpu_hours": Decimal(0),
                                              **dict.fromkeys(FIGURE_KEYS, Decimal(0))})  # fmt: skip
        team["projects"] += 1
        team["runs"] += row["runs"]
        team["gpu_hours"] += Decimal(f"{row['gpu_hours']:.3f}")
        for key in FIGURE_KEYS:
            team[key] += Decimal(f"{row.get(key, 0):.2f}")
    return list(teams.values())


def _team_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    teams = _team_rows(review["rows"])
    if not teams:
        return []
    shown = _largest(teams, ctx.max_rows)
    header = ["Team", "Projects", "Runs", "GPU-hours", "Spend", "Waste", "Recoverable", "Lost to failures"]
    widths = [150.0, 50.0, 50.0, 70.0, 80.0, 80.0, 80.0, 80.0]

    def line(t: dict[str, Any], projects: str) -> list[str]:
        return [projects, str(t["runs"]), hours(t["gpu_hours"]), *(money(t.get(k, 0)) for k in FIGURE_KEYS)]

    body = [[_clip(t["team"], 145), *line(t, str(t["projects"]))] for t in shown]
    total = ["TOTAL", *line(review["totals"], str(len(review["rows"])))]
    out: list[Flowable] = [Paragraph(f"By team ({ctx.currency})", styles["h2"])]
    if len(shown) < len(teams):
        out.append(_truncated(len(shown), len(teams), "teams", styles))
    return [*out, *_rows_table(header, body, widths, numeric_from=1, total=total)]


def _totals_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    totals = review["totals"]
    spend = totals["cost_usd"] or 0
    share = f"{(totals['waste_usd'] or 0) / spend:.1%} of spend" if spend else ""
    lines = [
        ["Total spend", money(totals["cost_usd"]), ctx.currency],
        ["Total waste", money(totals["waste_usd"]), share],
        ["Total recoverable", money(totals["recoverable_usd"]), "what the waste model says could be saved"],
        ["Total lost to failures", money(totals.get("lost_usd", 0)), "rework, restarts and checkpoints across jobs' attempts"],
        ["Total runs", str(totals["runs"]), f"{len(review['rows'])} team/project rows"],
        ["Total GPU-hours", hours(totals["gpu_hours"]), ""],
        *([f"Total {CATEGORY_LABEL[c].lower()}", money(totals["categories_usd"][c]), ""] for c in CATEGORIES),
    ]
    table = Table(lines, colWidths=[130, 90, 300], hAlign="LEFT")
    table.setStyle(TableStyle([
        ("FONT", (0, 0), (-1, -1), FONT, 8.5), ("FONT", (0, 0), (1, 3), BOLD, 8.5), ("ALIGN", (1, 0), (1, -1), "RIGHT"),
        ("TEXTCOLOR", (2, 0), (2, -1), colors.HexColor("#555555")), ("TOPPADDING", (0, 0), (-1, -1), 1),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 1), ("LINEBELOW", (0, 5), (-1, 5), 0.4, colors.HexColor("#999999")),
    ]))  # fmt: skip
    return [Paragraph(f"Totals ({ctx.currency})", styles["h2"]), KeepTogether(table)]


def _price_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    entries = review.get("price_entries") or []
    title = "Price-book entries used" + ("" if ctx.sees_everything else " (those that priced your teams' rows)")
    if not entries:
        return [Paragraph(title, styles["h2"]), Paragraph("No prices applied this month.", styles["body"])]
    header = ["GPU", "Provider", "Region", "Tier", f"{ctx.currency}/GPU-hour", "Effective from", "Effective to", ""]
    widths = [110.0, 100.0, 100.0, 80.0, 80.0, 95.0, 95.0, 70.0]
    body = [
        [_clip(e["gpu"], 105), _clip(e["provider"] or "any", 95), _clip(e["region"] or "any", 95), _clip(_tier(e["tier"]), 75),
         price(e["usd_per_gpu_hour"]), _when(e["effective_from"]), _when(e["effective_to"]) or "now",
         "example price" if e.get("is_example") else ""]
        for e in entries[: ctx.max_rows]
    ]  # fmt: skip
    out: list[Flowable] = [Paragraph(title, styles["h2"])]
    if len(entries) > ctx.max_rows:
        out.append(_truncated(ctx.max_rows, len(entries), "price entries", styles))
    return [*out, *_rows_table(header, body, widths, numeric_from=4, total=None)]


def cause_text(cause: dict[str, Any]) -> str:
    """A cause of an adjustment in words (as the page's components/ClosedMonthNote.tsx says it)."""
    kind = cause.get("kind")
    if kind == "price":
        who = cause.get("by") or "an organization admin"
        what = {"delete": "deleted", "create": "set"}.get(cause.get("action") or "", "changed")
        tier = _tier(cause["tier"]) if cause.get("tier") else None
        where = ", ".join(p for p in (cause.get("provider") or "any provider", cause.get("region"), tier) if p)
        before, after = cause.get("before_usd_per_gpu_hour"), cause.get("after_usd_per_gpu_hour")
        if cause.get("action") == "delete":
            prices = price(before)
        elif before and before != after:
            prices = f"{price(before)} → {price(after)}"
        else:
            prices = price(after)
        return f"{_when(cause.get('at'))}: {who} {what} the {cause.get('gpu') or 'GPU'} price ({where}) {prices} per GPU-hour"
    if kind == "policy":
        return f"{_when(cause.get('at'))}: {cause.get('by') or 'an organization admin'} changed the waste model settings"
    if kind == "model":
        return f"the waste model changed from version {cause.get('from_version')} to {cause.get('to_version')}"
    if kind == "telemetry":
        n = cause.get("runs_added", 0)
        return f"{n} run{'' if n == 1 else 's'} billed in the month arrived after it was closed"
    if kind == "telemetry_removed":
        n = cause.get("runs_removed", 0)
        return f"{n} run{'' if n == 1 else 's'} no longer billed in the month"
    return str(kind)


def _adjustment_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    adjustment = review.get("adjustment")
    if not review.get("closed") or not adjustment:
        return []
    out: list[Flowable] = [Paragraph("Adjustments since closing", styles["h2"])]
    if not adjustment.get("differs"):
        text = f"The live figures agree with the closed ones (as of {_when(adjustment.get('as_of'))})."
        return [*out, Paragraph(escape(text), styles["body"])]
    live, diff = adjustment["live_totals"], adjustment["difference"]
    text = (
        f"The figures above are {review['month']} as closed: spend {money(review['totals']['cost_usd'])} {ctx.currency}. "
        f"Live figures as of {_when(adjustment.get('as_of'))} say {money(live['cost_usd'])} {ctx.currency}, "
        f"an adjustment of {signed(diff['cost_usd'])} {ctx.currency} (waste {signed(diff['waste_usd'])}, recoverable "
        f"{signed(diff['recoverable_usd'])}, lost to failures {signed(diff.get('lost_usd', 0))}), "
        "not booked in the closed month."
    )
    out.append(Paragraph(escape(text), styles["body"]))
    causes = adjustment.get("causes") or []
    if causes:
        out += [Paragraph("• " + escape(cause_text(c)), styles["body"]) for c in causes]
    else:
        out.append(Paragraph("No recorded change explains it (a policy change or a re-analysis).", styles["body"]))
    rows = adjustment.get("rows") or []
    if rows:
        out.append(Spacer(1, 2 * mm))
        header = ["Team", "Project", "Closed spend", "Live spend", "Adjustment"]
        body = [[_clip(r["team"], 145), _clip(r["project"], 145), money(r["frozen_cost_usd"]), money(r["live_cost_usd"]),
                 signed(r["difference"]["cost_usd"])] for r in rows[: ctx.max_rows]]  # fmt: skip
        if len(rows) > ctx.max_rows:
            out.append(_truncated(ctx.max_rows, len(rows), "adjusted rows", styles))
        out += _rows_table(header, body, [150.0, 150.0, 90.0, 90.0, 90.0], numeric_from=2, total=None)
    return out


def _invoice_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    invoice = review.get("invoice")
    if not invoice or not invoice.get("rows"):
        return []
    header = ["Team", "Billed", "Measured", "Unexplained"]
    body = [[_clip(r.get("team") or r.get("team_name") or "unattributed", 145), money(r["billed_usd"]),
             money(r["measured_usd"]), money(r["unexplained_usd"])] for r in invoice["rows"][: ctx.max_rows]]  # fmt: skip
    totals = invoice["totals"]
    total = ["TOTAL", money(totals["billed_usd"]), money(totals["measured_usd"]), money(totals["unexplained_usd"])]
    title = Paragraph(f"Invoice against measured GPU cost ({ctx.currency})", styles["h2"])
    return [title, *_rows_table(header, body, [150.0, 90.0, 90.0, 90.0], numeric_from=1, total=total)]


def _history_section(review: dict[str, Any], styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    history = review.get("history") or []
    if not history:
        return []
    out: list[Flowable] = [Paragraph("Closes and reopens", styles["h2"])]
    for h in history[:50]:
        action = "closed" if h.get("action") == "close" else "reopened"
        reason = f" (“{h['reason']}”)" if h.get("reason") else ""
        out.append(Paragraph(escape(f"{_when(h.get('at'))}: {action} by {h.get('by') or 'someone no longer here'}{reason}"),
                             styles["body"]))  # fmt: skip
    return out


def _sign_off(styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    rule = "_" * 38
    lines = [
        ["Prepared by", "Name", rule, "Approved by", "Name", rule],
        ["", "Signature", rule, "", "Signature", rule],
        ["", "Date", rule, "", "Date", rule],
    ]
    table = Table(lines, colWidths=[70, 50, 200, 70, 50, 200], hAlign="LEFT")
    table.setStyle(TableStyle([("FONT", (0, 0), (-1, -1), FONT, 9), ("FONT", (0, 0), (0, -1), BOLD, 9),
                               ("FONT", (3, 0), (3, -1), BOLD, 9), ("TOPPADDING", (0, 0), (-1, -1), 9)]))  # fmt: skip
    return [KeepTogether([Paragraph("Sign-off", styles["h2"]), table])]


def _title_section(review: dict[str, Any], ctx: PdfContext, styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    month = review["month"]
    if review.get("closed"):
        by = f" by {review['closed_by']}" if review.get("closed_by") else ""
        status = f"<b>Closed</b> on {escape(_when(review.get('closed_at')))}{escape(by)}: the figures it was closed with."
    else:
        status = "<b>Live — figures may change:</b> this month is not closed; its figures follow the latest analyses."
    scope = "every team" if ctx.sees_everything else "the rows of your teams only"
    return [
        Paragraph(escape(f"Finance review — {_month_name(month)}"), styles["title"]),
        Paragraph(escape(ctx.org), styles["status"]),
        Paragraph(status, styles["status"]),
        Paragraph(escape(f"Generated {ctx.generated_at:%Y-%m-%d %H:%M} UTC for {ctx.reader}: {scope}."), styles["body"]),
    ]


SECTIONS: list[Callable[[dict[str, Any], PdfContext, dict[str, ParagraphStyle]], list[Flowable]]] = [
    _title_section, _totals_section, _team_section, _project_section, _adjustment_section, _price_section, _invoice_section,
]  # fmt: skip


def finance_pdf(review: dict[str, Any], ctx: PdfContext) -> bytes:
    """The review (as api._finance_view answers it) as a PDF document."""
    styles = _styles()
    story: list[Flowable] = []
    for section in SECTIONS:
        story += section(review, ctx, styles)
    story += _history_section(review, styles)
    story += _sign_off(styles)
    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer, pagesize=PAGE, leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN, bottomMargin=MARGIN + 4 * mm,
        title=f"Finance review {review['month']}", author=ctx.org, subject=status_line(review), creator="PhantomHub",
    )  # fmt: skip
    document.build(story, canvasmaker=_numbered_canvas(review, ctx))
    return buffer.getvalue()

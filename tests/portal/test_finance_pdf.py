"""The finance review's PDF: rendered to images page by page (pdftoppm) and read back as text
(pdftotext), its totals and every row's figures are the CSV's, its month's status is on every
page, and a member's PDF holds their teams' rows only, as their CSV does."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.portal import exports
from phantomhub.portal.finance_pdf import PdfContext, finance_pdf
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import sweeps
from phantomhub.waste.core.model import CATEGORIES
from tests.conftest import Tenant, tenant_for
from tests.portal.pdfs import FIGURES, assert_not_blank, csv_table, labelled, pages_text, pdf_table, rendered
from tests.portal.runs import client_for, finished_run


def _month_before(day: date) -> date:
    return (day.replace(day=1) - timedelta(days=1)).replace(day=1)


@pytest.fixture
def review_books(owner: Tenant, outsider: Tenant) -> dict[str, Any]:
    """Last month: three teams, four projects, six runs of different lengths; H100 at $36/GPU-hour;
    finance, an organization admin, and a member of nlp."""
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    month = _month_before(timezone.now().date())
    at = datetime(month.year, month.month, 10, 9, tzinfo=UTC)
    tokenizer, speech = tenant_for("nlp", "tokenizer"), tenant_for("speech", "asr")
    runs = [(owner, 900, 0.25), (owner, 400, 0.5), (tokenizer, 700, 0.1), (outsider, 600, 0.3), (outsider, 300, 0.6),
            (speech, 500, 0.4)]  # fmt: skip
    for n, (tenant, seconds, data_s) in enumerate(runs):
        finished_run(tenant, f"run-{n}", at + timedelta(hours=n), seconds, data_s)
    sweeps.analysis_sweep(inline=True)
    users = {name: User.objects.create_user(name) for name in ("fin", "root", "member")}
    Profile.objects.create(user=users["fin"], is_finance=True)
    Profile.objects.create(user=users["root"], is_org_admin=True)
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.VIEWER)
    return {"users": users, "month": f"{month:%Y-%m}", "start": month}


def _fetch(user: User, month: str) -> tuple[bytes, bytes]:
    client = client_for(user)
    pdf = client.get(f"/api/v1/portal/finance/{month}.pdf", HTTP_ACCEPT="application/pdf")
    assert pdf.status_code == 200, pdf.content[:500]
    assert pdf["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF-")
    body = client.get(f"/api/v1/portal/finance/{month}.csv")
    assert body.status_code == 200
    return pdf.content, body.content


def test_the_pdf_of_a_live_month_renders_every_page_with_the_csv_s_figures(review_books: dict[str, Any], tmp_path: Path) -> None:
    month = review_books["month"]
    pdf, body = _fetch(review_books["users"]["fin"], month)
    pages = pages_text(pdf, tmp_path)
    images = rendered(pdf, tmp_path)
    assert len(images) == len(pages) >= 1
    for image in images:
        assert_not_blank(image)
    for number, page in enumerate(pages, start=1):
        assert "LIVE: figures may change" in page
        assert f"Page {number} of {len(pages)}" in page
    text = "\n".join(pages)
    assert "Live — figures may change" in text and "Prepared by" in text and "Approved by" in text
    pdf_rows, pdf_total = pdf_table(text)
    csv_rows, csv_total = csv_table(body)
    assert len(csv_rows) == 4 and {team for team, _ in csv_rows} == {"nlp", "vision", "speech"}
    assert pdf_rows == csv_rows
    assert pdf_total == csv_total
    assert labelled(text, "Total spend") == Decimal(csv_total[FIGURES.index("cost_usd")])
    assert labelled(text, "Total recoverable") == csv_total[FIGURES.index("recoverable_usd")]
    assert labelled(text, "Total GPU-hours") == csv_total[FIGURES.index("gpu_hours")]
    assert re.search(r"H100-SXM\s+any\s+any\s+on-demand\s+36.00\s", text)  # the price entry that priced the month


@pytest.mark.slow  # a close, a price change and a second analysis pass: about a second
def test_the_pdf_of_a_closed_month_says_closed_on_every_page_with_its_adjustment(
    review_books: dict[str, Any], tmp_path: Path
) -> None:
    fin, root = client_for(review_books["users"]["fin"]), client_for(review_books["users"]["root"])
    month = review_books["month"]
    assert fin.post(f"/api/v1/portal/finance/{month}/close").status_code == 200
    body = {"gpu": "H100-SXM", "usd_per_gpu_hour": "45", "effective_from": f"{review_books['start']}T00:00:00Z",
            "confirm_closed": True}  # fmt: skip
    assert root.post("/api/v1/pricing/prices", body, format="json").status_code == 201
    sweeps.analysis_sweep(inline=True)
    review = fin.get(f"/api/v1/portal/finance/{month}").json()
    assert review["adjustment"]["differs"]
    pdf, csv_body = _fetch(review_books["users"]["fin"], month)
    pages = pages_text(pdf, tmp_path)
    for image in rendered(pdf, tmp_path):
        assert_not_blank(image)
    for page in pages:
        assert re.search(rf"{month} CLOSED on \d{{4}}-\d\d-\d\d \d\d:\d\d UTC by fin: frozen figures", page), page[-300:]
        assert "LIVE" not in page
    text = "\n".join(pages)
    # The closed figures, as the CSV of the closed month has them; the live ones only in the note.
    assert pdf_table(text) == csv_table(csv_body)
    assert "Adjustments since closing" in text
    adjustment = Decimal(f"{review['adjustment']['difference']['cost_usd']:.2f}")
    assert adjustment > 0 and f"an adjustment of +{adjustment:,.2f} USD" in re.sub(r"\s+", " ", text)
    assert "root set the H100-SXM price (any provider, on-demand) 45.00 per GPU-hour" in re.sub(r"\s+", " ", text)


def test_a_member_s_pdf_holds_their_teams_rows_as_their_csv_does(review_books: dict[str, Any], tmp_path: Path) -> None:
    month = review_books["month"]
    pdf, body = _fetch(review_books["users"]["member"], month)
    text = "\n".join(pages_text(pdf, tmp_path))
    pdf_rows, pdf_total = pdf_table(text)
    csv_rows, csv_total = csv_table(body)
    assert set(pdf_rows) == set(csv_rows) == {("nlp", "llm-pretrain"), ("nlp", "tokenizer")}
    assert pdf_rows == csv_rows and pdf_total == csv_total
    assert "vision" not in text and "speech" not in text
    assert "the rows of your teams only" in text and "for member" in text


# -- the renderer alone, on a review of many rows (no database) -----------------------------------


def _big_review(n: int) -> dict[str, Any]:
    """A review as finance_review writes it: n rows over 7 teams, totals their sums, one price."""
    rows = []
    for i in range(n):
        cats = {c: round(i * 0.5 + k, 2) for k, c in enumerate(CATEGORIES)}
        rows.append({
            "team": f"team-{i % 7}", "team_name": f"Team {i % 7}", "project": f"project-{i:04d}", "project_name": None,
            "runs": i % 5 + 1, "gpu_hours": round(i * 1.0007, 3), "cost_usd": round(sum(cats.values()), 2),
            "waste_usd": round(sum(cats.values()) - cats["useful_compute"], 2), "recoverable_usd": round(i * 0.25, 2),
            "lost_usd": round(i * 0.01, 2), "categories_usd": cats, "price_entry_ids": [1],
        })  # fmt: skip
    totals: dict[str, Any] = {k: sum(Decimal(f"{r[k]}") for r in rows) for k in ("gpu_hours", "cost_usd", "waste_usd",
                                                                                     "recoverable_usd", "lost_usd")}  # fmt: skip
    totals = {k: float(v) for k, v in totals.items()} | {"runs": sum(r["runs"] for r in rows)}
    totals["categories_usd"] = {c: float(sum(Decimal(f"{r['categories_usd'][c]}") for r in rows)) for c in CATEGORIES}
    entry = {"id": 1, "gpu": "H100-SXM", "provider": "", "region": "", "tier": "on_demand", "usd_per_gpu_hour": "36.0000",
             "effective_from": "2020-01-01T00:00:00+00:00", "effective_to": None, "is_example": False}  # fmt: skip
    return {"month": "2026-11", "rows": rows, "totals": totals, "price_entries": [entry], "invoice": None, "closed": False,
            "closed_at": None, "closed_by": None, "adjustment": None, "history": []}  # fmt: skip


def _context(max_rows: int) -> PdfContext:
    return PdfContext(org="Acme ML", reader="fin", sees_everything=True, generated_at=datetime(2026, 12, 5, 8, 0, tzinfo=UTC),
                      currency="USD", max_rows=max_rows)  # fmt: skip


def test_a_long_review_spans_pages_with_the_table_header_and_the_status_on_each(tmp_path: Path) -> None:
    review = _big_review(240)
    pdf = finance_pdf(review, _context(1000))
    pages = pages_text(pdf, tmp_path)
    assert len(pages) >= 5
    table_pages = [p for p in pages if pdf_table(p)[0]]
    assert len(table_pages) >= 4
    for page in table_pages:  # the header repeated over the rows on every page they reach
        assert re.search(r"Team\s+Project\s+Runs\s+GPU-hours\s+Spend\s+Waste\s+Recoverable\s+Lost", page)
    for number, page in enumerate(pages, start=1):
        assert "2026-11 LIVE: figures may change" in page and f"Page {number} of {len(pages)}" in page
        assert "Generated 2026-12-05 08:00 UTC for fin" in page
    csv_rows, csv_total = csv_table(exports.finance_csv(review).encode())
    pdf_rows, pdf_total = pdf_table("\n".join(pages))
    assert pdf_rows == csv_rows and pdf_total == csv_total


def test_a_review_over_the_row_bound_prints_the_largest_rows_and_says_so(tmp_path: Path) -> None:
    review = _big_review(120)
    text = "\n".join(pages_text(finance_pdf(review, _context(25)), tmp_path))
    pdf_rows, pdf_total = pdf_table(text)
    csv_rows, csv_total = csv_table(exports.finance_csv(review).encode())
    largest = {(r["team"], r["project"]) for r in review["rows"][-25:]}  # spend grows with the row's number
    assert set(pdf_rows) == largest and all(pdf_rows[k] == csv_rows[k] for k in largest)
    assert pdf_total == csv_total  # the totals still cover every row
    assert "the 25 largest of 120 project rows by spend are listed; the other 95 are counted in the totals" in re.sub(
        r"\s+", " ", text
    )


@pytest.mark.django_db
def test_errors_of_a_pdf_asked_for_by_accept_are_the_api_s_json() -> None:
    user = User.objects.create_user("fin")
    Profile.objects.create(user=user, is_finance=True)
    refused = client_for(user).get("/api/v1/portal/finance/2026-13.pdf", HTTP_ACCEPT="application/pdf")
    assert refused.status_code == 400 and set(refused.json()["error"]["fields"]) == {"month"}
    anonymous = client_for(None).get("/api/v1/portal/finance/2026-07.pdf", HTTP_ACCEPT="application/pdf")
    assert anonymous.status_code == 401 and anonymous["Content-Type"] == "application/json"

"""What drawing the finance review's PDF costs a request, by the number of team/project rows
(portal/finance_pdf.py; its bound is PHANTOMHUB_FINANCE_PDF_MAX_ROWS, default 2,000).

    .venv/bin/python bench/finance_pdf.py [--rows 100,1000,2000,5000] [--out bench/results/finance_pdf.json]

Each size is drawn --repeat times (default 7) from a review as finance_review writes it (rows over
40 teams, one price entry); reported: the process's first drawing of all (cold: reportlab's fonts and
modules loaded by it), each size's first, median and slowest drawing, the pages, the bytes and the
peak Python memory of one drawing (tracemalloc). No database: the review is the input, as the endpoint hands it over.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def review_of(n: int, categories: list[str]) -> dict[str, Any]:
    rows = []
    for i in range(n):
        cats = {c: round(i * 0.37 + k, 2) for k, c in enumerate(categories)}
        cost = round(sum(cats.values()), 2)
        rows.append({"team": f"team-{i % 40:02d}", "project": f"project-{i:05d}", "runs": i % 9 + 1,
                     "gpu_hours": round(i * 1.0007, 3), "cost_usd": cost, "waste_usd": round(cost / 3, 2),
                     "recoverable_usd": round(cost / 7, 2), "lost_usd": round(cost / 50, 2), "categories_usd": cats})  # fmt: skip
    keys = ("gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd")
    totals: dict[str, Any] = {k: round(sum(r[k] for r in rows), 3) for k in keys} | {"runs": sum(r["runs"] for r in rows)}
    totals["categories_usd"] = {c: round(sum(r["categories_usd"][c] for r in rows), 2) for c in categories}
    entry = {"id": 1, "gpu": "H100-SXM", "provider": "", "region": "", "tier": "on_demand", "usd_per_gpu_hour": "36.0000",
             "effective_from": "2020-01-01T00:00:00+00:00", "effective_to": None, "is_example": False}  # fmt: skip
    return {"month": "2026-11", "rows": rows, "totals": totals, "price_entries": [entry], "invoice": None, "closed": False,
            "closed_at": None, "closed_by": None, "adjustment": None, "history": []}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="100,1000,2000,5000", help="review sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=7, help="drawings per size")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "finance_pdf.json"))
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")
    os.environ.setdefault("PHANTOMHUB_SECRET_KEY", "b" * 48)
    import django

    django.setup()
    from phantomhub.portal.finance_pdf import PdfContext, finance_pdf
    from phantomhub.waste.core.model import CATEGORIES

    cold_ctx = PdfContext(org="Bench", reader="fin", sees_everything=True, generated_at=datetime.now(UTC), currency="USD",
                          max_rows=10)  # fmt: skip
    start = time.perf_counter()
    finance_pdf(review_of(10, list(CATEGORIES)), cold_ctx)
    cold_s = time.perf_counter() - start
    print(f"cold first drawing (10 rows): {cold_s:.3f} s")
    results = []
    for n in (int(x) for x in args.rows.split(",")):
        review = review_of(n, list(CATEGORIES))
        ctx = PdfContext(org="Bench", reader="fin", sees_everything=True, generated_at=datetime.now(UTC), currency="USD",
                         max_rows=max(n, 10))  # fmt: skip
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            pdf = finance_pdf(review, ctx)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        finance_pdf(review, ctx)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        pages = pdf.count(b"/Type /Page\n")
        result = {"rows": n, "first_s": round(times[0], 3), "median_s": round(statistics.median(times), 3),
                  "max_s": round(max(times), 3), "pages": pages, "bytes": len(pdf),
                  "peak_mib": round(peak / 2**20, 1)}  # fmt: skip
        results.append(result)
        print(
            f"{n:>6} rows: first {result['first_s']:.3f} s, median {result['median_s']:.3f} s, "
            f"slowest {result['max_s']:.3f} s, {pages} pages, {len(pdf) / 1024:.0f} KiB, peak {result['peak_mib']} MiB"
        )
    out = {"cold_first_s": round(cold_s, 3), "repeat": args.repeat, "finance_pdf": results}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

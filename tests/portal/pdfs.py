"""Reading a PDF the service answers as a person would see it: each page rendered to an image
(pdftoppm) and its text laid out as printed (pdftotext), from poppler-utils (.ci/run installs it;
in CI a missing tool fails the test, elsewhere it skips with the reason)."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from PIL import Image

from phantomhub.waste.core.model import CATEGORIES

# The figures of a project row as the CSV has them, in the PDF's column order.
FIGURES = ["runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd", *(f"{c}_usd" for c in CATEGORIES)]


def poppler_tool(name: str) -> str:
    """poppler-utils' tool; CI installs it (.ci/run), so there a missing one fails the test."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing in CI: .ci/run installs poppler-utils")
        pytest.skip(f"{name} is not installed (apt-get install poppler-utils)")
    return path


def pages_text(pdf: bytes, tmp_path: Path) -> list[str]:
    """Each page's text, laid out as printed (pdftotext -layout separates pages by form feeds)."""
    source = tmp_path / "review.pdf"
    source.write_bytes(pdf)
    done = subprocess.run([poppler_tool("pdftotext"), "-layout", str(source), "-"], capture_output=True, check=True)
    pages = done.stdout.decode().split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def rendered(pdf: bytes, tmp_path: Path) -> list[Image.Image]:
    """Every page rendered to a PNG at 50 dpi, in page order."""
    source = tmp_path / "render.pdf"
    source.write_bytes(pdf)
    subprocess.run([poppler_tool("pdftoppm"), "-r", "50", "-png", str(source), str(tmp_path / "page")], check=True)
    files = sorted(tmp_path.glob("page-*.png"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    return [Image.open(f).convert("L") for f in files]


def assert_not_blank(image: Image.Image) -> None:
    """Print between the running head and the footer (a page of furniture alone is blank): at 50
    dpi a page of a few lines of text has a few hundred dark pixels there (the sign-off page 448)."""
    width, height = image.size
    body = image.crop((0, int(height * 0.07), width, int(height * 0.9)))
    dark = sum(body.histogram()[:160])
    assert dark > 200, f"page is blank between its head and its footer ({dark} dark pixels)"


def number(token: str) -> Decimal:
    return Decimal(token.replace(",", ""))


def pdf_table(text: str) -> tuple[dict[tuple[str, str], list[Decimal]], list[Decimal]]:
    """The project table read back: (team, project) → its figures, and the TOTAL line's figures."""
    rows: dict[tuple[str, str], list[Decimal]] = {}
    total: list[Decimal] = []
    numeric = re.compile(r"^-?[\d,]+(\.\d+)?$")
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) == 2 + len(FIGURES) and all(numeric.match(t) for t in tokens[2:]):
            rows[(tokens[0], tokens[1])] = [number(t) for t in tokens[2:]]
        elif len(tokens) == 1 + len(FIGURES) and tokens[0] == "TOTAL" and all(numeric.match(t) for t in tokens[1:]):
            total = [number(t) for t in tokens[1:]]
    return rows, total


def csv_table(body: bytes) -> tuple[dict[tuple[str, str], list[Decimal]], list[Decimal]]:
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    figures = {(r["team"], r["project"]): [Decimal(r[k]) for k in FIGURES] for r in rows}
    total = figures.pop(("TOTAL", ""))
    return figures, total


def labelled(text: str, label: str) -> Decimal:
    found = re.search(rf"^\s*{label}\s+(-?[\d,]+\.\d+)\b", text, re.MULTILINE)
    assert found, f"{label!r} not in the PDF"
    return number(found.group(1))

"""The one CSV writer for files people open (docs/api.md, "CSV files"): every CSV the service
answers goes through here, so neutralising formulas happens in one place. Any app may import it;
it imports nothing of PhantomHub.

A spreadsheet runs a cell as a formula when its text starts with `=`, `+`, `-` or `@` (and some
strip a leading tab or carriage return first): `=cmd|' /C calc'!A0` in a run name, a price book's
provider or an invoice tag would run on the reader's machine. Such a text cell is written with a
leading apostrophe (`'=cmd|' /C calc'!A0`), which spreadsheets show as text.

Only text is neutralised. Numbers (int, float, Decimal) are written as numbers, negative ones
included: `-12.5` is a number to a spreadsheet, not a formula, and must stay one so that sums
work. A number that arrives as a string (`"-12.50"`) is text and is neutralised like any other,
so callers pass figures as numbers (a `Decimal` keeps a fixed number of places). None is an empty
cell; anything else (dates, booleans) is written as its text, neutralised when it needs to be.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """What one cell is written as: numbers as numbers, None empty, text neutralised."""
    if value is None:
        return ""
    if isinstance(value, int | float | Decimal):  # bool is an int: True/False, no sign to fear
        return value
    text = value if isinstance(value, str) else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_uncell(text: str) -> str:
    """The inverse of `csv_cell` on text read back from one of our own files (a price book export
    imported again): the apostrophe it added before a formula character is taken off."""
    if len(text) > 1 and text[0] == "'" and text[1] in FORMULA_START:
        return text[1:]
    return text


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """The header, then one line per row, as they are read: a streamed export of thousands of rows
    never builds one big string."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([csv_cell(name) for name in header])
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.tell():  # no rows: the header alone
        yield buffer.getvalue()


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The whole file as one string (small files: a price book, a month's finance review)."""
    return "".join(csv_lines(header, rows))

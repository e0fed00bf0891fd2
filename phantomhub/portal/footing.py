"""Rounding that foots: a column of figures rounded so that it adds up to its rounded total.

Rounding each figure on its own can leave a column a cent off its total ($22.46 against $22.45).
The largest-remainder method (Hamilton's) keeps every figure within one unit of its exact value
and makes the column add up exactly: round everything down, then give the units still missing to
the figures that lost the most, ties to the earlier figure. The method itself is the waste
model's (phantomhub/waste/core/money.py ``largest_remainder``), so a run's categories and a
portal column are footed by the same code; here only the decimal places are.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from phantomhub.waste.core.money import largest_remainder as units_allocate


def largest_remainder(values: Sequence[float | Decimal], total: float | Decimal, digits: int) -> list[float]:
    """`values` rounded to `digits` decimals so that they add up to `total` rounded the same way
    (half away from zero).

    The total is normally the exact sum of the values; where it is not (a stored total rounded on
    its own), the difference is still spread one unit at a time over the largest remainders (or
    taken from the smallest), so the column always foots."""
    if not values:
        return []
    unit = Decimal(1).scaleb(-digits)
    exact = [Decimal(str(v)) / unit for v in values]
    target = int((Decimal(str(total)) / unit).to_integral_value(rounding=ROUND_HALF_UP))
    units = units_allocate([Fraction(e) for e in exact], target)
    # A -0 left as it is stays -0.0, as it always has.
    return [float(e * unit) if u == 0 and e == 0 else float(Decimal(u) * unit) for u, e in zip(units, exact, strict=True)]

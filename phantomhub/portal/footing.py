"""Rounding that foots: a column of figures rounded so that it adds up to its rounded total.

Rounding each figure on its own can leave a column a cent off its total ($22.46 against $22.45).
The largest-remainder method (Hamilton's) keeps every figure within one unit of its exact value
and makes the column add up exactly: round everything down, then give the units still missing to
the figures that lost the most, ties to the earlier figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal


def largest_remainder(values: Sequence[float | Decimal], total: float | Decimal, digits: int) -> list[float]:
    """`values` rounded to `digits` decimals so that they add up to `total` rounded the same way.

    The total is normally the exact sum of the values; where it is not (a stored total rounded on
    its own), the difference is still spread one unit at a time over the largest remainders (or
    taken from the smallest), so the column always foots."""
    if not values:
        return []
    unit = Decimal(1).scaleb(-digits)
    exact = [Decimal(str(v)) / unit for v in values]
    floors = [e.to_integral_value(rounding=ROUND_FLOOR) for e in exact]
    target = (Decimal(str(total)) / unit).to_integral_value(rounding=ROUND_HALF_UP)
    missing = int(target - sum(floors))
    by_remainder = sorted(range(len(values)), key=lambda i: (-(exact[i] - floors[i]), i))
    out = list(floors)
    step = 1 if missing >= 0 else -1
    order = by_remainder if missing >= 0 else list(reversed(by_remainder))
    for k in range(abs(missing)):
        out[order[k % len(order)]] += step
    return [float(v * unit) for v in out]

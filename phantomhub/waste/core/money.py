"""Exact money: rational dollars, rounding to cents, integer allocation by largest remainder.

Dollars are carried as Fractions until the single rounding of the run's cost to cents; the cents
are then handed out with the largest-remainder method, so the parts always add up to the whole.
``largest_remainder`` is the one implementation of that method in PhantomHub: the cents of a
run's categories (``cents_allocate``), of a fleet node's classes and teams, and the portal's
footed columns (phantomhub/portal/footing.py) all go through it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

NS_PER_HOUR = 3_600 * 10**9


def usd_for(gpu_ns: Fraction | int, usd_per_gpu_hour: Fraction | None) -> Fraction:
    """Exact dollars for GPU-nanoseconds at an hourly price (unpriced time costs nothing)."""
    if usd_per_gpu_hour is None:
        return Fraction(0)
    return Fraction(gpu_ns) * usd_per_gpu_hour / NS_PER_HOUR


def cents_round(usd: Fraction) -> int:
    """Round half up to whole cents (the way an invoice line is rounded)."""
    return math.floor(usd * 100 + Fraction(1, 2))


def largest_remainder(exact: Sequence[Fraction], target: int) -> list[int]:
    """Whole units for ``exact`` amounts (in units) that add up to ``target``.

    Each amount gets its floor; the units still missing go one each to the amounts with the
    largest fractional remainders, ties to the earlier amount. When the floors already pass the
    target (a target rounded on its own, not the exact sum), units are taken back one each from
    the smallest remainders, ties from the later amount. A difference larger than the number of
    amounts goes round them again. Every amount then stays within one unit of its exact value
    whenever ``target`` is within one unit of their exact sum (always, for a proportional split).
    """
    if not exact:
        return []
    out = [math.floor(x) for x in exact]
    missing = target - sum(out)
    if missing == 0:
        return out
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - out[i]), i))
    step = 1 if missing > 0 else -1
    order = by_remainder if missing > 0 else by_remainder[::-1]
    for k in range(abs(missing)):
        out[order[k % len(order)]] += step
    return out


def cents_allocate(total_cents: int, exact_usd: Mapping[str, Fraction]) -> dict[str, int]:
    """Split ``total_cents`` over the keys in proportion to their exact dollars.

    Each key gets the floor of its exact share; the cents left over go one each to the keys
    with the largest fractional remainders, ties broken by key order (``largest_remainder``).
    The result sums to ``total_cents`` exactly. With a zero total the shares are all zero.
    """
    keys: Sequence[str] = list(exact_usd)
    whole = sum(exact_usd.values(), Fraction(0))
    if total_cents == 0 or whole == 0:
        return dict.fromkeys(keys, 0)
    shares = [exact_usd[k] / whole * total_cents for k in keys]
    return dict(zip(keys, largest_remainder(shares, total_cents), strict=True))

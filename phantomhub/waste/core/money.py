"""Exact money: rational dollars, rounding to cents, integer-cent allocation.

Dollars are carried as Fractions until the single rounding of the run's cost to cents; the cents
are then handed out with the largest-remainder method, so the parts always add up to the whole.
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


def cents_allocate(total_cents: int, exact_usd: Mapping[str, Fraction]) -> dict[str, int]:
    """Split ``total_cents`` over the keys in proportion to their exact dollars.

    Each key gets the floor of its exact share; the cents left over go one each to the keys
    with the largest fractional remainders, ties broken by key order (deterministic). The result
    sums to ``total_cents`` exactly. With a zero total the shares are all zero.
    """
    keys: Sequence[str] = list(exact_usd)
    whole = sum(exact_usd.values(), Fraction(0))
    if total_cents == 0 or whole == 0:
        return dict.fromkeys(keys, 0)
    shares = {k: exact_usd[k] / whole * total_cents for k in keys}
    out = {k: math.floor(shares[k]) for k in keys}
    left = total_cents - sum(out.values())
    order = sorted(range(len(keys)), key=lambda i: (-(shares[keys[i]] - out[keys[i]]), i))
    for i in order[:left]:
        out[keys[i]] += 1
    return out

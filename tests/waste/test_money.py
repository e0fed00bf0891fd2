"""Largest remainder, the one implementation (waste/core/money.py): what a run's categories, a
fleet node's classes and the portal's footed columns are all rounded with."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from phantomhub.portal.footing import largest_remainder as footed
from phantomhub.waste.core.money import cents_allocate, largest_remainder


def test_the_missing_units_go_to_the_largest_remainders_ties_to_the_earlier() -> None:
    # 1/3 each of 10: floors 3 + 3 + 3, one unit missing, three equal remainders.
    assert largest_remainder([Fraction(10, 3)] * 3, 10) == [4, 3, 3]
    assert largest_remainder([Fraction(1, 10), Fraction(9, 10), Fraction(5, 10)], 2) == [0, 1, 1]


def test_a_target_below_the_floors_takes_units_from_the_smallest_remainders_ties_from_the_later() -> None:
    assert largest_remainder([Fraction(3, 2), Fraction(3, 2), Fraction(11, 10)], 2) == [1, 1, 0]
    assert largest_remainder([Fraction(2), Fraction(2)], 3) == [2, 1]


def test_a_difference_larger_than_the_amounts_goes_round_them_again() -> None:
    assert largest_remainder([Fraction(0), Fraction(0)], 5) == [3, 2]
    assert largest_remainder([], 0) == []


@given(st.lists(st.fractions(min_value=0, max_value=10**6, max_denominator=997), min_size=1, max_size=12))
def test_a_proportional_split_adds_up_and_moves_no_amount_by_a_unit(exact: list[Fraction]) -> None:
    target = round(sum(exact))
    out = largest_remainder(exact, target)
    assert sum(out) == target
    assert all(abs(o - x) < 1 for o, x in zip(out, exact, strict=True))


def test_cents_by_weight_and_a_footed_column_round_alike() -> None:
    usd = {"a": Fraction(7485, 1000), "b": Fraction(7485, 1000), "c": Fraction(7485, 1000)}
    cents = cents_allocate(2246, usd)
    assert cents == {"a": 749, "b": 749, "c": 748}
    assert footed([Decimal("7.485")] * 3, Decimal("22.455"), 2) == [v / 100 for v in cents.values()]

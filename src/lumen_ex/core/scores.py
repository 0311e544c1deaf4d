"""Exact points: scores are counted in whole hundredths of a point, so that they always add up.

A group's points are shared among its tests (src/lumen_ex/harness/check.py ``score``). Sharing 2 points among
3 tests as floats and rounding each share for the record gives 0.6667 + 0.6667 + 0.6667 = 2.0001,
so a perfect run could total 10.0002 out of 10. Here every share is a whole number of hundredths,
split by the largest-remainder rule (200 -> 67, 67, 66): the shares of a group add up to the
group's points exactly, every total is the sum of its tests, never above its maximum, and each
value has at most two decimals, the precision every writer shows (``results.points``), so every
format (JSON, JUnit, Gradescope, GitHub, PrairieLearn, the gradebook) shows numbers that add up.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

PER_POINT = 100          # the unit: a hundredth of a point


def to_units(points: float) -> int:
    """Points (a number from the catalogue or a record) as whole hundredths, rounded."""
    return round(Fraction(str(points)) * PER_POINT) if points else 0


def from_units(units: int) -> float:
    """Whole hundredths as points: the float whose shortest form has at most two decimals."""
    return float(Decimal(units) / PER_POINT)


def share(total_units: int, parts: int) -> list[int]:
    """``total_units`` split into ``parts`` whole shares that add up to it exactly, the larger
    shares first (largest remainder: every share is the exact quotient rounded down, and the
    hundredths left over go one each to the first shares)."""
    if parts <= 0:
        return []
    base, left = divmod(total_units, parts)
    return [base + (1 if i < left else 0) for i in range(parts)]


def total(values: Iterable[float]) -> float:
    """The exact sum of scores that each have at most two decimals (a record's, a row's)."""
    return from_units(sum(to_units(v) for v in values))

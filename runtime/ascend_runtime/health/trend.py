"""Robust trend estimation: the Theil-Sen slope, dependency-free.

Theil-Sen takes the median of the slopes between every pair of points. Up to about 29 % of the
points can be arbitrary (bursts, a single step, a restart's spike) without moving it much, and it
needs no distribution assumption. It is O(n^2) in time and memory; the leak detector feeds it
bounded windows (a few dozen bucket minima), where the pure-Python version takes well under a
millisecond, so neither numpy nor scipy is needed in the runtime image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

__all__ = ["TheilSen", "theil_sen", "theil_sen_slope", "MAX_POINTS"]

#: The most points one call accepts; callers downsample longer series first.
MAX_POINTS = 512


@dataclass(frozen=True)
class TheilSen:
    """The median pairwise slope and Sen's rank-based confidence bounds around it."""

    slope: float
    low: float
    high: float


def theil_sen(times: Sequence[float], values: Sequence[float], z: float = 1.0) -> TheilSen | None:
    """Theil-Sen slope with Sen's confidence interval (``z`` standard normal deviates).

    The bounds are order statistics of the pairwise slopes at ranks ``(N -/+ C) / 2`` with
    ``C = z * sqrt(n (n - 1) (2n + 5) / 18)`` (Sen 1968, no ties correction). Returns None when
    fewer than two distinct times are given.
    """

    slopes = _pairwise_slopes(times, values)
    if not slopes:
        return None
    slopes.sort()
    count, n = len(slopes), len(times)
    spread = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    low_rank = max(0, min(count - 1, math.floor((count - spread) / 2)))
    high_rank = max(0, min(count - 1, math.ceil((count + spread) / 2) - 1))
    return TheilSen(slope=median(slopes), low=slopes[low_rank], high=slopes[high_rank])


def theil_sen_slope(times: Sequence[float], values: Sequence[float]) -> float | None:
    """Median pairwise slope of ``values`` over ``times`` (units per time unit).

    Returns None when fewer than two distinct times are given. Pairs with equal times are
    skipped (their slope is undefined).
    """

    slopes = _pairwise_slopes(times, values)
    return median(slopes) if slopes else None


def _pairwise_slopes(times: Sequence[float], values: Sequence[float]) -> list[float]:

    if len(times) != len(values):
        raise ValueError(f"times and values differ in length ({len(times)} != {len(values)})")
    n = len(times)
    if n > MAX_POINTS:
        raise ValueError(f"{n} points given; at most {MAX_POINTS} (downsample first)")
    slopes: list[float] = []
    for i in range(n - 1):
        ti, yi = times[i], values[i]
        for j in range(i + 1, n):
            dt = times[j] - ti
            if dt != 0:
                slopes.append((values[j] - yi) / dt)
    return slopes

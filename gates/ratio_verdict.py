"""C10's verdict from interleaved pairs: each pair's ratio candidate / baseline, their median,
and a distribution-free interval for that median from the order statistics (the k-th lowest
and k-th highest pair ratio, k the largest rank whose interval covers the true median with
probability >= COVERAGE under a coin-flip model of each pair landing above or below it).

Pass when the interval's low end clears the floor, fail when its high end is below it; in
between the gate times more pairs, and only after MAX pairs says `inconclusive` (never a
pass). One pair gives a point interval: a figure with no noise estimate, stated as such.
"""
from dataclasses import dataclass
from math import comb

COVERAGE = 0.75


def median_rank(n: int) -> int:
    """k for n pairs: [r_(k), r_(n+1-k)] covers the median with probability >= COVERAGE
    (1 when no k reaches it: the widest interval, min to max)."""
    best = 1
    for k in range(1, n // 2 + 1):
        below = sum(comb(n, i) for i in range(k)) / 2 ** n  # P(at most k - 1 pairs below the median)
        if 1 - 2 * below >= COVERAGE:
            best = k
    return best


@dataclass(frozen=True)
class RatioVerdict:
    status: str
    """pass, fail or inconclusive."""
    ratio: float
    """Median of the pair ratios."""
    low: float
    high: float
    """The interval around the median (the noise figure)."""
    coverage: float
    """Its coverage under the coin-flip model (0 for one pair: no noise estimate)."""


def decide(pair_ratios, floor: float) -> RatioVerdict:
    """The verdict of these pair ratios against `floor`; ValueError without any."""
    ratios = sorted(pair_ratios)
    n = len(ratios)
    if n == 0:
        raise ValueError("decide: no timed pair")
    middle = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
    k = median_rank(n)
    low, high = ratios[k - 1], ratios[n - k]
    coverage = 1 - 2 * sum(comb(n, i) for i in range(k)) / 2 ** n if n > 1 else 0.0
    status = "pass" if low >= floor else "fail" if high < floor else "inconclusive"
    return RatioVerdict(status, middle, low, high, coverage)

"""C10's verdict from interleaved pairs: the median of the pair ratios (candidate / baseline)
and a distribution-free interval for it, the k-th lowest to k-th highest ratio, k the largest
rank covering the median with probability >= COVERAGE (each pair above or below it by a coin).

Pass when the interval clears the floor, fail when it lies below; in between more pairs, and
after the last `inconclusive`, never a pass. One pair is a point: no noise estimate.
"""
from dataclasses import dataclass
from math import comb

COVERAGE = 0.75


def coverage(n: int, k: int) -> float:
    """P([r_(k), r_(n+1-k)] holds the median) = 1 - 2 P(at most k - 1 of n pairs fall below it)."""
    return 1 - 2 * sum(comb(n, i) for i in range(k)) / 2 ** n


def median_rank(n: int) -> int:
    """k for n pairs: [r_(k), r_(n+1-k)] covers the median with probability >= COVERAGE
    (1 when no k reaches it: the widest interval, min to max)."""
    return max([k for k in range(1, n // 2 + 1) if coverage(n, k) >= COVERAGE], default=1)


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


def median_interval(pair_ratios) -> tuple:
    """(median, low, high, coverage) of the pair ratios: the interval is the noise figure
    (coverage 0 for one pair: no noise estimate); ValueError without any."""
    ratios = sorted(pair_ratios)
    n = len(ratios)
    if n == 0:
        raise ValueError("decide: no timed pair")
    middle = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
    k = median_rank(n)
    return middle, ratios[k - 1], ratios[n - k], coverage(n, k) if n > 1 else 0.0


def decide(pair_ratios, floor: float) -> RatioVerdict:
    """The verdict of these pair ratios against `floor`; ValueError without any."""
    middle, low, high, covered = median_interval(pair_ratios)
    status = "pass" if low >= floor else "fail" if high < floor else "inconclusive"
    return RatioVerdict(status, middle, low, high, covered)

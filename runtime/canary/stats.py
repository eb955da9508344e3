"""The error gate's statistics: is the canary's failure rate above the stable's?

The two versions answer random shares of the same traffic, so under "the canary is no worse"
their failure rates are equal, whatever the clients' own mistakes add to both. Given how many
requests each answered and how many failed in all, the canary's failures then follow the
hypergeometric law, and Fisher's exact test (one-sided, "greater") gives the chance of at
least as many as it had. The gate fails the canary when that chance is at most ``alpha``:
``alpha`` is the chance, per look, that a version exactly as good as the stable fails it.

How many requests a step needs follows from the same test: enough that a canary failing
``detect`` more often than the stable would have failed it with probability ``power``
(:func:`requests_needed`). Written with numpy's sums of log-binomials (no SciPy in the
project for one test); tests/runtime/canary/test_stats.py checks them by hand and by
simulation.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

_log_fact: Any = None  # log(k!) for k in 0..len-1, grown on demand; numpy when first asked


def _log_factorials(n: int) -> np.ndarray:
    """log(k!) for k in 0..n at least (one table, grown on demand)."""
    import numpy as np

    global _log_fact
    if _log_fact is None or len(_log_fact) <= n:
        size = max(n + 1, 2 * (0 if _log_fact is None else len(_log_fact)), 1024)
        _log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, size)))])
    return _log_fact


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
    lf = _log_factorials(n)
    return lf[n] - lf[k] - lf[n - k]


def _sum_exp(logs: np.ndarray) -> float:
    import numpy as np

    if logs.size == 0:
        return 0.0
    peak = float(logs.max())
    return math.exp(peak) * float(np.exp(logs - peak).sum())


def fisher_greater(canary_failed: int, canary_n: int, stable_failed: int, stable_n: int) -> float:
    """P(the canary has at least ``canary_failed`` of the failures | equal rates): the
    one-sided p-value of Fisher's exact test. 1.0 when nothing failed."""
    import numpy as np

    failed, total = canary_failed + stable_failed, canary_n + stable_n
    if not 0 <= canary_failed <= canary_n or not 0 <= stable_failed <= stable_n:
        raise ValueError("failures must be between 0 and the requests answered")
    if failed == 0:
        return 1.0
    x = np.arange(max(canary_failed, failed - stable_n), min(failed, canary_n) + 1)
    logs = (
        _log_comb(canary_n, x)
        + _log_comb(stable_n, failed - x)
        - float(_log_comb(total, np.array(failed)))
    )
    return min(1.0, _sum_exp(logs))


def binomial_at_least(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) >= k)."""
    import numpy as np

    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    x = np.arange(k, n + 1)
    return min(1.0, _sum_exp(_log_comb(n, x) + x * math.log(p) + (n - x) * math.log1p(-p)))


def critical_failures(canary_n: int, stable_failed: int, stable_n: int, alpha: float) -> int:
    """The fewest canary failures (of ``canary_n``) the test rejects at ``alpha``;
    ``canary_n + 1`` when none would be."""
    low, high = 0, canary_n + 1  # the p-value falls as the canary's failures rise
    while low < high:
        mid = (low + high) // 2
        if fisher_greater(mid, canary_n, stable_failed, stable_n) <= alpha:
            high = mid
        else:
            low = mid + 1
    return low


def power(canary_n: int, share: float, stable_rate: float, detect: float, alpha: float) -> float:
    """The chance the test fails a canary that fails ``stable_rate + detect`` of its
    ``canary_n`` requests, when it answers ``share`` of the traffic and the stable fails
    ``stable_rate`` of the rest: summed over the stable's likely failure counts (``CELLS``
    cells over its mean ± 5 standard deviations, each at its probability)."""
    stable_n = max(1, round(canary_n * (1 - share) / share))
    bad = min(1.0, stable_rate + detect)
    total = 0.0
    for failed, weight in _likely_counts(stable_n, stable_rate):
        k = critical_failures(canary_n, failed, stable_n, alpha)
        total += weight * binomial_at_least(k, canary_n, bad)
    return total


def _likely_counts(n: int, p: float) -> list[tuple[int, float]]:
    """(count, probability) cells covering Binomial(n, p) but for ~1e-6 of it."""
    import numpy as np

    if p <= 0 or p >= 1:
        return [(round(n * p), 1.0)]
    sd = math.sqrt(n * p * (1 - p))
    low, high = max(0, math.floor(n * p - 5 * sd)), min(n, math.ceil(n * p + 5 * sd))
    x = np.arange(low, high + 1)
    mass = np.exp(_log_comb(n, x) + x * math.log(p) + (n - x) * math.log1p(-p))
    width = max(1, round(len(x) / CELLS))
    cells = [(int(x[i + len(x[i : i + width]) // 2]), float(mass[i : i + width].sum()))
             for i in range(0, len(x), width)]  # fmt: skip
    scale = sum(m for _, m in cells)
    return [(c, m / scale) for c, m in cells]


#: How many cells of the stable's likely failure counts ``power`` sums over.
CELLS = 15


@lru_cache(maxsize=256)
def requests_needed(
    share: float, stable_rate: float, detect: float, alpha: float, want: float, limit: int = 20_000
) -> int:
    """The fewest canary requests at which :func:`power` reaches ``want`` (``limit`` if it
    does not before). Arguments are rounded by the caller so the cache is hit."""
    if not 0 < share < 1:
        raise ValueError(f"the canary's share must be within (0, 1), not {share}")
    high = 32  # double until enough, then halve the last doubling: few costly looks
    while high < limit and power(high, share, stable_rate, detect, alpha) < want:
        high *= 2
    low, high = high // 2 + 1, min(high, limit)
    while low < high:  # power rises with the requests, up to the test's discreteness
        mid = (low + high) // 2
        if power(mid, share, stable_rate, detect, alpha) >= want:
            high = mid
        else:
            low = mid + 1
    return low

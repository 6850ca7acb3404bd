"""The binomial tail, computed in pure Python and rounded up so that it stays a bound.

The certificates (common.certificate for the voting algorithms, common.cde for CDE) all reduce to
P(Bin(n, p) >= m) for their N agents; the agents import them too, and a device should not need
scipy for it.
"""

from __future__ import annotations

import math

# A computed tail is within about 1e-13 (relative) of the exact one: Loader's terms and a sum of
# doubles. Rounding up by this keeps it an upper bound; below TINY a double says "at most TINY".
RELATIVE_MARGIN = 1e-8
TINY = 1e-300


def binomial_tail(n: int, m: int, p: float) -> float:
    """P(Bin(n, p) >= m), rounded up: 1.0 when m <= 0, 0.0 when m > n or p = 0, else at least
    TINY (a tail below 1e-300 is reported as 1e-300, still an upper bound).

    Pure Python (the agents import this module through common.votes, and a device should not need
    scipy): the terms are summed in the direction in which they fall, from the term at m (above
    the mode: the tail itself) or at m - 1 (at or below it: the tail is 1 minus that sum, at least
    about 1/2, so the subtraction loses nothing that matters), each from the one before by the
    ratio of consecutive binomial terms, until they no longer change the sum."""
    if m <= 0:
        return 1.0
    if m > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    odds = p / (1.0 - p)
    above = m > (n + 1) * p  # the terms fall from m upwards
    k = m if above else m - 1
    log_first = log_binomial_term(n, k, p)
    total, term = 0.0, 1.0
    while term > total * 1e-18:
        total += term
        if above:
            if k == n:
                break
            term *= (n - k) / (k + 1) * odds
            k += 1
        else:
            if k == 0:
                break
            term *= k / ((n - k + 1) * odds)
            k -= 1
    log_sum = log_first + math.log(total)
    value = math.exp(log_sum) if above else -math.expm1(log_sum) if log_sum < 0 else 0.0
    return min(1.0, max(value * (1.0 + RELATIVE_MARGIN), TINY))


def _stirling_error(n: int) -> float:
    """log(n!) - log(sqrt(2 pi n) (n / e)^n), by its series above 15 (Loader 2000)."""
    if n <= 15:
        return math.lgamma(n + 1) - (n + 0.5) * math.log(n) + n - 0.5 * math.log(2 * math.pi)
    nn = float(n) * n
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    if n > 500:
        return (s0 - s1 / nn) / n
    if n > 80:
        return (s0 - (s1 - s2 / nn) / nn) / n
    if n > 35:
        return (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _deviance(x: float, mean: float) -> float:
    """x log(x / mean) + mean - x, without its cancellation when x is near mean (Loader 2000)."""
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        total = (x - mean) * v
        term = 2 * x * v
        j = 1
        while True:
            term *= v * v
            following = total + term / (2 * j + 1)
            if following == total:
                return following
            total, j = following, j + 1
    return x * math.log(x / mean) + mean - x


def log_binomial_term(n: int, k: int, p: float) -> float:
    """log P(Bin(n, p) = k), 0 < p < 1, accurate to a few ulps even for n in the billions (Loader's
    saddle-point form, as R's dbinom: log-gamma of a large n would lose its last digits)."""
    q = 1.0 - p
    if k == 0:
        return n * math.log1p(-p)
    if k == n:
        return n * math.log(p)
    log_c = (
        _stirling_error(n)
        - _stirling_error(k)
        - _stirling_error(n - k)
        - _deviance(k, n * p)
        - _deviance(n - k, n * q)
    )
    return log_c - 0.5 * (math.log(2 * math.pi) + math.log(k) + math.log1p(-k / n))

"""Mean, standard deviation and 95% confidence interval of a few trials; intervals on rates."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Described:
    n: int
    mean: float
    std: float  # population std (ddof=0), as common.simulation.summarize reports it
    ci95_low: float  # Student t interval on the mean (sample std, ddof=1); nan for one trial
    ci95_high: float

    @property
    def half_width(self) -> float:
        return (self.ci95_high - self.ci95_low) / 2


def t_quantile_975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def describe(values: Sequence[float]) -> Described:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        nan = math.nan
        return Described(0, nan, nan, nan, nan)
    mean = float(x.mean())
    std = float(x.std())
    if x.size < 2:
        return Described(1, mean, std, math.nan, math.nan)
    half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Described(int(x.size), mean, std, mean - half, mean + half)


def proportion_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval on a rate of successes/n (a tie rate, a failure rate): it stays
    inside [0, 1] and is not empty at 0/n or n/n, unlike the normal approximation. (nan, nan)
    for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} must be in [0, n={n}]")
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + level / 2))
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high

"""Mean, standard deviation and 95% confidence interval of a few trials; intervals on rates.

Pure: the simulators' summaries, the privacy audits (common/privacy.py, common/dp_audit.py) and the
command line use the same intervals.
"""

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
    low, high = _wilson(successes / n, n, level)
    return (0.0 if successes == 0 else low), (1.0 if successes == n else high)


def clopper_pearson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval on a Bernoulli rate: each side holds with
    probability >= (1 + level) / 2 whatever the true rate, which is what a lower bound on a
    privacy parameter needs (the Wilson interval is only approximately right)."""
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} must be in [0, n={n}]")
    from scipy.stats import beta

    alpha = 1.0 - level
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, n - successes + 1))
    high = 1.0 if successes == n else float(beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    return low, high


def clustered_rate_interval(
    cluster_means: Sequence[float], cluster_sizes: Sequence[int], level: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high) of a rate observed in clusters whose members are not independent (the
    agents of one trial share its run): a Wilson interval on the pooled rate with the effective
    sample size n_eff = p (1 - p) / Var(estimate), Var estimated from the spread of the cluster
    means (Kish's design effect). n_eff stays between the number of clusters (members perfectly
    correlated) and the number of observations (independent); at p = 0 or 1 the spread says
    nothing, and n_eff is the number of clusters. Values may be probabilities rather than 0/1
    outcomes; both have variance <= p (1 - p)."""
    means = np.asarray(cluster_means, dtype=float)
    sizes = np.asarray(cluster_sizes, dtype=float)
    if means.shape != sizes.shape or means.size == 0 or (sizes <= 0).any():
        raise ValueError("need one positive size per cluster, and at least one cluster")
    total = float(sizes.sum())
    p = float((means * sizes).sum() / total)
    c = means.size
    n_eff = float(c)
    if c >= 2 and 0 < p < 1:
        # ratio-estimator variance of a weighted mean of cluster means
        weights = sizes / sizes.mean()
        var = float(((weights * (means - p)) ** 2).sum() / (c * (c - 1)))
        n_eff = total if var <= 0 else min(total, max(float(c), p * (1 - p) / var))
    # Student's quantile on C - 1 degrees of freedom: the variance comes from C cluster means
    from scipy.stats import t

    z = float(t.ppf(0.5 + level / 2, c - 1)) if c >= 2 else None
    low, high = _wilson(p, n_eff, level, z)
    return p, low, high


def _wilson(p: float, n: float, level: float, z: float | None = None) -> tuple[float, float]:
    from scipy.stats import norm

    if z is None:
        z = float(norm.ppf(0.5 + level / 2))
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)

"""Mean, standard deviation and 95% confidence interval of a few trials."""

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

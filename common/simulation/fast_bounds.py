"""Compiled mirrors of `common.subroutines.bounds` for the fast simulator (same formulas)."""

from __future__ import annotations

import numpy as np
from numba import njit

from common.subroutines.bounds import (
    KL_ITERATIONS,
    KL_LUCB_ALPHA,
    KL_LUCB_K1,
    STITCH_ALPHA,
    STITCH_LOGLOG,
    STITCH_SCALE,
)


@njit(cache=True)
def kl_bernoulli(p, q):
    out = 0.0
    if p > 0.0:
        out += p * np.log(p / q) if q > 0.0 else np.inf
    if p < 1.0:
        out += (1.0 - p) * np.log((1.0 - p) / (1.0 - q)) if q < 1.0 else np.inf
    return out


@njit(cache=True)
def kl_upper(mean, pulls, level):
    mean = min(max(mean, 0.0), 1.0)
    low = mean
    high = 1.0
    for _ in range(KL_ITERATIONS):
        mid = 0.5 * (low + high)
        if pulls * kl_bernoulli(mean, mid) > level:
            high = mid
        else:
            low = mid
    return low


@njit(cache=True)
def kl_lower(mean, pulls, level):
    mean = min(max(mean, 0.0), 1.0)
    low = 0.0
    high = mean
    for _ in range(KL_ITERATIONS):
        mid = 0.5 * (low + high)
        if pulls * kl_bernoulli(mean, mid) > level:
            low = mid
        else:
            high = mid
    return high


@njit(cache=True)
def elimination_level(rounds, n_arms, confidence):
    return np.log(4.0 * n_arms * rounds * rounds / confidence)


@njit(cache=True)
def kl_lucb_level(time, n_arms, confidence):
    return np.log(KL_LUCB_K1 * n_arms * float(time) ** KL_LUCB_ALPHA / confidence)


@njit(cache=True)
def stitched_radius(pulls, n_arms, confidence, sigma, bounded):
    scale = 0.5 if bounded else sigma
    alpha = confidence / (2.0 * n_arms)
    n = float(pulls)
    inner = np.log(np.log(2.0 * n)) + STITCH_LOGLOG * np.log(STITCH_ALPHA / alpha)
    return STITCH_SCALE * scale * np.sqrt(inner / n)


@njit(cache=True)
def gaussian_radius(pulls, level, sigma):
    return sigma * np.sqrt(2.0 * level / pulls)

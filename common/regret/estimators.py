"""The two estimators of Dubey & Pentland: the interval mechanism's private release and the
trimmed mean under Huber's contamination, on histograms of the few values rewards can take."""

from __future__ import annotations

import math

import numpy as np


def release_interval(dp_epsilon: float) -> int:
    """f = ceil(1 / eps): an agent re-publishes its mean of an arm every f pulls of it. The paper's
    series W_n (Tossou & Dimitrakakis's interval mechanism) is garbled in its text; this is the
    fixed interval of DP-UCB-INT, which the paper cites for the same role."""
    return math.ceil(1.0 / dp_epsilon - 1e-12)


def release_scale(pulls: np.ndarray, v: float) -> np.ndarray:
    """Laplace scale n^(v/2 - 1) of a release after n pulls: the mean's sensitivity is 1/n, so
    one release is n^(-v/2)-differentially private with respect to those n rewards."""
    return np.power(np.maximum(pulls, 1).astype(float), v / 2.0 - 1.0)


def composed_epsilon(pulls: int, interval: int, v: float) -> float:
    """Basic composition over one arm's releases at n = f, 2f, ... <= pulls: a reward drawn
    first is in every one of them, so sum_j (j f)^(-v/2). It grows without bound in the pulls
    (v/2 < 1): what the math gives for a whole run, next to the per-release n^(-v/2)."""
    n = np.arange(interval, pulls + 1, interval, dtype=float)
    return float(np.sum(n ** (-v / 2.0)))


def trimmed_mean(
    values: np.ndarray, x_counts: np.ndarray, y_counts: np.ndarray, eps: float, delta: float
) -> np.ndarray:
    """The robust trimmed estimator (Prasad et al.; the paper's Definition), on histograms.

    values: (V,) sorted distinct values; x_counts, y_counts: (..., V) counts of the two halves.
    alpha = max(eps, ln(1/delta)/N); Z = the shortest interval [values[i], values[j]] holding at
    least N (1 - 2 alpha - sqrt(2 alpha ln(4/delta)/N) - ln(4/delta)/N) (and >= 1) of the Y
    points (ties: the one holding more); the estimate is the mean of the X points in Z, or of all
    X points when Z holds none of them. N is the size of the Y half."""
    n_y = y_counts.sum(axis=-1)
    safe = np.maximum(n_y, 1)
    alpha = np.maximum(eps, math.log(1.0 / delta) / safe)
    log4 = math.log(4.0 / delta)
    need = safe * (1.0 - 2.0 * alpha - np.sqrt(2.0 * alpha * log4 / safe) - log4 / safe)
    need = np.maximum(need, 1.0)
    n_values = values.size
    cy = np.concatenate([np.zeros((*y_counts.shape[:-1], 1)), np.cumsum(y_counts, -1)], -1)
    cx = np.concatenate([np.zeros((*x_counts.shape[:-1], 1)), np.cumsum(x_counts, -1)], -1)
    sx = np.concatenate([np.zeros((*x_counts.shape[:-1], 1)), np.cumsum(x_counts * values, -1)], -1)
    best_len = np.full(n_y.shape, np.inf)
    best_in = np.full(n_y.shape, -1.0)
    est = np.zeros(n_y.shape)
    for i in range(n_values):
        for j in range(i, n_values):
            inside = cy[..., j + 1] - cy[..., i]
            length = values[j] - values[i]
            better = (inside >= need) & (
                (length < best_len) | ((length == best_len) & (inside > best_in))
            )
            x_in = cx[..., j + 1] - cx[..., i]
            x_sum = sx[..., j + 1] - sx[..., i]
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_in = np.where(x_in > 0, x_sum / np.maximum(x_in, 1), np.nan)
            est = np.where(better, mean_in, est)
            best_len = np.where(better, length, best_len)
            best_in = np.where(better, inside, best_in)
    x_all = cx[..., -1]
    fallback = np.where(x_all > 0, sx[..., -1] / np.maximum(x_all, 1), 0.0)
    return np.where(np.isfinite(est) & (best_in >= 0), est, fallback)


def trimmed_mean_samples(x: np.ndarray, y: np.ndarray, eps: float, delta: float) -> float:
    """The same estimator on plain arrays of samples (the tests' reference)."""
    values = np.unique(np.concatenate([x, y]))
    xc = np.array([(x == v).sum() for v in values], float)
    yc = np.array([(y == v).sum() for v in values], float)
    return float(trimmed_mean(values, xc, yc, eps, delta))

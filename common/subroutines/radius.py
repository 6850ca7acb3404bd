"""Confidence radii: Hoeffding for rewards in [0, 1], sub-Gaussian with a stated sigma otherwise."""

from __future__ import annotations

import math


def elimination_radius(rounds: int, n_arms: int, confidence: float, sigma: float | None) -> float:
    """Anytime radius after `rounds` samples of every arm, union bound over arms and rounds.

    [0, 1]: sqrt(log(4 K r^2 / conf) / (2 r)); sub-Gaussian: sigma sqrt(2 log(4 K r^2 / conf) / r).
    """
    log_term = math.log(4.0 * n_arms * rounds * rounds / confidence)
    if sigma is None:
        return math.sqrt(log_term / (2.0 * rounds))
    return sigma * math.sqrt(2.0 * log_term / rounds)


def lucb_radius(
    pulls: int, time: int, n_arms: int, confidence: float, sigma: float | None
) -> float:
    """LUCB1's beta(u, t) = sqrt(log(5 K t^4 / (4 conf)) / (2 u)) (Kalyanakrishnan et al. 2012)."""
    log_term = math.log(5.0 * n_arms * float(time) ** 4 / (4.0 * confidence))
    if sigma is None:
        return math.sqrt(log_term / (2.0 * pulls))
    return sigma * math.sqrt(2.0 * log_term / pulls)


def median_elimination_samples(epsilon: float, delta: float, sigma: float | None) -> int:
    """(4 / eps_l^2) log(3 / delta_l) samples per arm; a sigma-sub-Gaussian reward needs (2 sigma)^2
    times more than a [0, 1] one (which is 1/2-sub-Gaussian)."""
    scale = 1.0 if sigma is None else (2.0 * sigma) ** 2
    return math.ceil(scale * 4.0 / epsilon**2 * math.log(3.0 / delta))


def dp_epoch_length(epoch: int, n_arms: int, beta: float, dp_epsilon: float) -> int:
    """R(e) = max(32 log(8 K e^2 / beta) / eps_e^2, 8 log(4 K e^2 / beta) / (eps_dp eps_e))."""
    eps_e = 2.0**-epoch
    e2 = float(epoch * epoch)
    return math.ceil(
        max(
            32.0 * math.log(8.0 * n_arms * e2 / beta) / eps_e**2,
            8.0 * math.log(4.0 * n_arms * e2 / beta) / (dp_epsilon * eps_e),
        )
    )


def dp_elimination_gap(
    epoch: int, rounds: int, n_arms: int, beta: float, dp_epsilon: float
) -> float:
    """2 (h + c): h = sqrt(log(8 K e^2 / beta) / (2 R)), c = log(4 K e^2 / beta) / (eps_dp R)."""
    e2 = float(epoch * epoch)
    h = math.sqrt(math.log(8.0 * n_arms * e2 / beta) / (2.0 * rounds))
    c = math.log(4.0 * n_arms * e2 / beta) / (dp_epsilon * rounds)
    return 2.0 * (h + c)

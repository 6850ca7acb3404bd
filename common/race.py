"""Races between per-arm report counts, bounded whatever the arms' shares (docs/CDE.md, section 3).

CDE's honest reports are i.i.d. draws of one distribution over the K arms. Whether its answer is
right comes down to two races between the arms' counts:

- `race`: one arm (share at most `one`) gets `needed` reports before any of s rival arms (shares
  summing to at least `rivals_share`) gets `threshold`;
- `none_reach`: among the first n reports, none of s arms (shares summing to at least
  `rivals_share`) gets `threshold`.

How the rivals' total share is split among them matters, and the worst split is the even one
(each function says why): the bounds below take s equal shares rivals_share / s, and are exact
there.

Pure arithmetic (numpy; scipy's special functions, imported where used so that a device importing
common/ does not need scipy). Every value is rounded up, so it stays a bound.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from common.binomial import RELATIVE_MARGIN, binomial_tail

# `race`'s exact sum needs, for each s, the chance that j balls thrown uniformly into s boxes leave
# every box below m, for j up to s (m - 1): about s^2 m^2 / 2 binomial weights for all s up to K.
# Above this many it integrates instead (the cost then does not grow with m).
EXACT_LIMIT = 1_000_000
RACE_SLACK = 1e-2  # the integral's upper sum stops within this share of its lower sum
TAIL = 1e-18  # the integral's mass left outside its grid, at each end (counted as a bound)
FLOAT_ERROR = 1e-15  # absolute error allowed per special-function value (scipy's: about 1e-16)


def race(needed: int, threshold: int, one: float, rivals_share: float, rivals: int) -> float:
    """P(one arm's count reaches `needed` before any rival's reaches `threshold`), rounded up, in
    an endless sequence of i.i.d. reports where the one arm has share at most `one` and the
    `rivals` arms together at least `rivals_share`, split among them in any way.

    Why the even split is the worst: Poissonization (reports at the events of a rate-1 Poisson
    process) makes the arms' counts independent Poisson processes; the one arm's needed-th report
    comes at some time tau, and the race is won when each rival's count is then below m. The
    chance that a count of mean x is below m, S_m(x) = P(Poisson(x) <= m - 1) = P(Gamma(m, 1) >
    x), is log-concave in x (the survival function of a log-concave density), so the product over
    the rivals, prod S_m(share_i tau), is largest when the shares are equal (Jensen), and grows
    as they shrink or as tau shrinks (a larger share for the one arm).

    Among the reports of these arms only, each is the one arm's with probability at most
    pi = one / (one + rivals_share). Its `needed`-th comes after j rivals' reports, j negative
    binomial (needed, pi); it wins the race when those j reports, spread evenly over the s rivals
    (the worst case), leave every rival below `threshold`. One rival: a binomial tail."""
    if needed <= 0:
        return 1.0
    if one <= 0.0 or threshold <= 0:
        return 0.0
    if rivals_share <= 0.0:
        return 1.0
    share = min(1.0, one / (one + rivals_share) * (1.0 + RELATIVE_MARGIN))
    if rivals == 1:
        return binomial_tail(needed + threshold - 1, needed, share)
    if rivals * rivals * threshold * threshold > 2 * EXACT_LIMIT:
        return _race_integral(needed, threshold, rivals_share / (rivals * one), rivals)
    from scipy.stats import nbinom

    stays = _even_spread(threshold, rivals)
    weights = nbinom.pmf(np.arange(stays.size), needed, share)
    return min(1.0, float(weights @ stays) * (1.0 + RELATIVE_MARGIN) + FLOAT_ERROR * stays.size)


@lru_cache(maxsize=4096)
def _even_spread(threshold: int, boxes: int) -> np.ndarray:
    """P(j balls thrown uniformly into `boxes` boxes leave every box below `threshold`), for j =
    0 .. boxes (threshold - 1) (none above). A box takes k of the j balls with probability
    Bin(j, 1 / boxes), the others share the rest uniformly: a recursion on the boxes, every term
    a probability (nothing cancels)."""
    from scipy.special import gammaln

    if boxes == 1:
        return np.ones(threshold)
    fewer = _even_spread(threshold, boxes - 1)
    total = np.arange(boxes * (threshold - 1) + 1)[:, None]
    taken = np.arange(threshold)[None, :]
    rest = total - taken
    valid = (rest >= 0) & (rest < fewer.size)
    safe = np.where(valid, rest, 0)
    log_weight = (
        gammaln(total + 1)
        - gammaln(taken + 1)
        - gammaln(safe + 1)
        - taken * math.log(boxes)
        + safe * math.log1p(-1.0 / boxes)
    )
    return (np.exp(np.where(valid, log_weight, -np.inf)) * fewer[safe]).sum(axis=1)


def _race_integral(needed: int, threshold: int, scale: float, rivals: int) -> float:
    """`race` for large thresholds: E[S_m(c G)^s] with G ~ Gamma(needed, 1), c = `scale`, the
    one arm's needed-th report coming at G / one and each rival's count then Poisson. The upper
    Riemann-Stieltjes sum of the decreasing S_m(c t)^s over a grid of t bounds it above; each
    cell whose upper and lower sums differ by more than its share of RACE_SLACK is cut, until the
    two sums agree within RACE_SLACK."""
    from scipy.special import gammainc, gammaincc, gammainccinv, gammaincinv

    start = float(gammaincinv(needed, TAIL))  # P(G < start) = TAIL: counted with S = 1
    end = max(
        start,
        min(  # P(G > end) = TAIL, or S_m(c end)^s = TAIL: beyond it, one cell
            float(gammainccinv(needed, TAIL)),
            float(gammainccinv(threshold, TAIL ** (1.0 / rivals))) / scale,
        ),
    )
    t = np.linspace(start, end, 1025)
    while True:
        below = gammainc(needed, t)  # P(G < t_i)
        weights = np.diff(np.append(below[:-1], 1.0))  # cells [t_i, t_(i+1)), the last to oo
        stays = gammaincc(threshold, scale * t) ** rivals
        upper = float(below[0] + weights @ stays[:-1])
        gaps = weights[:-1] * (stays[:-2] - stays[1:-1])  # upper - lower sum, per inner cell
        if gaps.sum() <= RACE_SLACK * upper or t.size > 1 << 18:
            break
        # Cutting a cell in k divides its gap by about k: cut each to its share of the slack.
        pieces = np.maximum(1, np.ceil(gaps * gaps.size / (RACE_SLACK * upper))).astype(np.int64)
        cells = np.repeat(np.arange(gaps.size), pieces - 1)  # cell i gets k_i - 1 new points
        first = np.repeat(np.cumsum(pieces - 1) - (pieces - 1), pieces - 1)
        step = (np.arange(cells.size) - first + 1) / pieces[cells]  # 1/k_i .. (k_i - 1)/k_i
        t = np.sort(np.concatenate((t, t[cells] + step * (t[cells + 1] - t[cells]))))
    return min(1.0, upper * (1.0 + RELATIVE_MARGIN) + FLOAT_ERROR * t.size)


def none_reach(reports: int, threshold: int, rivals_share: float, rivals: int) -> float:
    """P(none of `rivals` arms, with shares summing to at least `rivals_share`, gets `threshold` of
    the first `reports` i.i.d. reports), rounded up.

    The rivals' total count is binomial (n, share), and given it, the chance that the reports
    spread over them leave each below the threshold is largest for an even split (for two of
    them with j reports between them, P(j - m < X <= m - 1) for X ~ Bin(j, theta) is largest at
    theta = 1/2 and falls away from it: every step towards equal shares raises it); it falls as
    the total grows, so the smallest total share is the worst. For large thresholds, a cheaper
    bound: with a Poisson(lam) number of reports the counts are independent, so the event has
    probability prod S_m(share x lam) <= S_m(rivals_share lam / s)^s, and it only becomes likelier
    with fewer reports, so P(event after n reports) P(Poisson(lam) <= n) is at most that, for
    every lam below n."""
    if threshold <= 0:
        return 0.0
    if reports < threshold or rivals_share <= 0.0:
        return 1.0
    share = min(1.0, rivals_share)
    if rivals * rivals * threshold * threshold <= 2 * EXACT_LIMIT:
        from scipy.stats import binom

        stays = _even_spread(threshold, rivals)[: reports + 1]
        weights = binom.pmf(np.arange(stays.size), reports, share)
        value = float(weights @ stays) * (1.0 + RELATIVE_MARGIN) + FLOAT_ERROR * stays.size
        return min(1.0, value)
    from scipy.special import gammaincc

    spread = math.sqrt(reports)
    lam = np.linspace(max(reports - 8.0 * spread - 8.0, reports / 4.0), float(reports), 96)
    stays = gammaincc(threshold, share * lam / rivals) ** rivals
    enough = gammaincc(reports + 1, lam)  # P(Poisson(lam) <= n), at least 1/2 here
    bound = float(np.min((stays + FLOAT_ERROR * rivals) / enough))
    return min(1.0, bound * (1.0 + RELATIVE_MARGIN))

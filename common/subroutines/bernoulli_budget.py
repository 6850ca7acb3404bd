"""CDE's T for rewards declared Bernoulli (every reward 0 or 1), from the exact binomial law.

The sub-Gaussian T (`fixed_budget.samples_per_arm`) bounds P(local answer = b) by
exp(-T eps^2), which is about twice the T needed. For 0/1 rewards the chance is known exactly:
with S_b ~ Bin(T, mu_b) and S_a ~ Bin(T, mu_a) the two arms' sums (independent), the local answer
is b at most with probability

  f_T(mu_b, mu_a) = P(S_b > S_a) + P(S_b = S_a) / 2

(b must be at the top; tied there with the best arm a, the uniform tie-break picks b with
probability at most 1/2). f_T grows with mu_b and falls with mu_a (a binomial grows
stochastically with its mean), so over every b whose gap exceeds eps it is at most the sup over
mu in [0, 1 - eps] of F_T(mu) = f_T(mu, mu + eps). That sup is bounded rigorously, not sampled:
on a cell [m0, m1], F_T(mu) <= f_T(m1, m0 + eps) (raise mu_b to the cell's top, lower mu_a to
its bottom), so the largest cell bound is an upper bound of the sup; the cells whose bound is too
high are halved until none is (or the sup is shown too high: F_T at a point is a lower bound).
Each sum runs over a window of O(sqrt(T)) points, what it leaves out bounded by Hoeffding's
inequality and added; each value is computed in doubles and rounded by RELATIVE_MARGIN.

T is then a T at which that certified sup is <= eta / (K - 1), as small as the search finds
(`bernoulli_samples_per_arm`), at most the sub-Gaussian T, which is always valid
(f_T <= P(S_b >= S_a) <= exp(-T eps^2)). docs/CDE.md, section 3 (Lemma 1), has the proof;
scripts/cde_budget.py prints the table and checks that its Ts are the smallest.

numpy only (no scipy): the agents import this module through common.agent.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from common.binomial import RELATIVE_MARGIN

# The computed f_T is a sum of positive terms, each exp(log C(T, x) + x log p + (T - x) log q)
# with log C from math.lgamma: its relative error is a few ulps of lgamma(T + 1), about 1e-10 at
# T = 2e4, well inside RELATIVE_MARGIN (1e-8). Above EXACT_LIMIT sub-Gaussian pulls (eps below
# about 0.02) the search is not run, as it would take more than a few seconds: the sub-Gaussian
# T stands.
EXACT_LIMIT = 20_000
FIRST_CELLS = 64  # the first partition of [0, 1 - eps]
WORK = 4_000_000  # pmf points one bound may compute (about 0.3 s here): past it, the bounds it has
BLOCK = 1 << 20  # pmf entries computed at once (memory: 8 bytes each, a few arrays)
PROBES = 17  # points of F_T that the first search reads
TAIL_LOG = 36.0  # the windows leave out at most exp(-36) = 2.3e-16 of each law


@lru_cache(maxsize=16)
def _log_choose(pulls: int) -> np.ndarray:
    """log C(T, x) for x = 0..T."""
    lg = np.array([math.lgamma(x + 1.0) for x in range(pulls + 1)])
    return lg[pulls] - lg - lg[::-1]


def _pmf_at(pulls: int, log_choose: np.ndarray, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """P(Bin(T, p_i) = x_ij) for the rows p_i in [0, 1] and their points x_ij in [0, T] (as
    floats), from `log_choose`, log C(T, x_ij)."""
    inner = np.clip(p, 1e-300, 1.0 - 2**-53)  # the edge rows are set exactly below
    log_q = np.log1p(-inner)
    log = x * (np.log(inner) - log_q)[:, None]
    log += log_choose
    log += (pulls * log_q)[:, None]
    out = np.exp(log, out=log)
    for edge, at in ((p <= 0.0, 0.0), (p >= 1.0, float(pulls))):
        out[edge] = x[edge] == at
    return out


def _windows(pulls: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(n, W) points of [0, T], distinct in each row: for each cell [lo_i, hi_i], at least the
    points [T lo_i - t, T hi_i + t], t such that a Bin(T, mu) with mu in the cell, or above it
    (the best arm), falls below them, or one with mu in the cell above them, with probability at
    most exp(-TAIL_LOG) (Hoeffding: exp(-2 t^2 / T)). A row that would pass T or 0 is shifted
    back inside."""
    t = math.sqrt(pulls * TAIL_LOG / 2.0) + 1.0
    first = np.floor(pulls * lo - t)
    width = min(pulls + 1, int((np.ceil(pulls * hi + t) - first).max()) + 1)
    first = np.clip(first, 0, pulls + 1 - width).astype(np.int64)
    return first[:, None] + np.arange(width)[None, :]


def cell_values(
    pulls: int, epsilon: float, lo: np.ndarray, hi: np.ndarray, lower_bounds: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """For each cell [lo_i, hi_i] of mu, (an upper bound of f_T(hi_i, lo_i + eps), a lower bound
    of F_T(lo_i), zeros without `lower_bounds`), as computed in doubles (callers round). The
    sums run over the cell's window (`_windows`) only: what falls outside is dropped from the
    lower bound, and added to the upper one as 3 exp(-TAIL_LOG) (S_b below or above the window,
    S_a below it)."""
    upper, lower = np.empty(lo.size), np.zeros(lo.size)
    table = _log_choose(pulls)
    rows = max(1, BLOCK // (int(pulls * (hi - lo).max()) + int(9 * math.sqrt(pulls)) + 8))
    for start in range(0, lo.size, rows):
        cell = slice(start, start + rows)
        points = _windows(pulls, lo[cell], hi[cell])
        log_choose, x = table[points], points.astype(float)
        a = _pmf_at(pulls, log_choose, x, lo[cell] + epsilon)
        beats = np.zeros_like(a)  # P(first window point <= S_a < x) + P(S_a = x) / 2
        np.cumsum(a[:, :-1], axis=1, out=beats[:, 1:])
        beats += 0.5 * a
        upper[cell] = np.einsum("ij,ij->i", _pmf_at(pulls, log_choose, x, hi[cell]), beats)
        if lower_bounds:
            lower[cell] = np.einsum("ij,ij->i", _pmf_at(pulls, log_choose, x, lo[cell]), beats)
    return upper + 3.0 * math.exp(-TAIL_LOG), lower


def wrong_answer_chance(pulls: int, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """f_T(p_i, q_i) = P(S_b > S_a) + P(S_b = S_a) / 2, S_b ~ Bin(T, p_i), S_a ~ Bin(T, q_i),
    summed over every point (no window), as computed in doubles: the tests' reference."""
    p, q = np.atleast_1d(np.asarray(p, dtype=float)), np.atleast_1d(np.asarray(q, dtype=float))
    x = np.broadcast_to(np.arange(pulls + 1.0), (p.size, pulls + 1))
    log_choose = np.broadcast_to(_log_choose(pulls), x.shape)
    a = _pmf_at(pulls, log_choose, x, q)
    below = np.zeros_like(a)
    np.cumsum(a[:, :-1], axis=1, out=below[:, 1:])
    return np.asarray((_pmf_at(pulls, log_choose, x, p) * (below + 0.5 * a)).sum(axis=1))


def worst_case(
    epsilon: float, pulls: int, target: float | None = None, rtol: float = 1e-3
) -> tuple[float, float]:
    """(low, high) with low <= sup over mu in [0, 1 - eps] of F_T(mu) <= high, both rigorous
    (rounded by RELATIVE_MARGIN): high is the largest cell bound, of f_T(m1, m0 + eps), low the
    largest lower bound of an F_T(m0). Cells are halved until high <= low (1 + rtol); with a
    `target`, until high <= target (certified) or low > target (refuted). Past WORK points it
    stops with the bounds it has. With a target, only the first round computes lower bounds
    (a third of the work): a T whose sup is above it usually shows it there, and otherwise
    stops at WORK, not certified all the same."""
    top = 1.0 - epsilon
    edges = np.linspace(0.0, top, FIRST_CELLS + 1)
    lo, hi = edges[:-1], edges[1:]
    low = settled = 0.0
    first, work, spread = True, 0.0, 2.0 * math.sqrt(pulls * TAIL_LOG / 2.0) + 4.0
    while True:
        work += lo.size * (pulls * float((hi - lo).max()) + spread)
        bound, at_left = cell_values(pulls, epsilon, lo, hi, first or target is None)
        first = False
        bound *= 1.0 + RELATIVE_MARGIN
        low = max(low, float(at_left.max()) * (1.0 - RELATIVE_MARGIN))
        if target is not None and low > target:
            return low, max(settled, float(bound.max()))
        enough = low * (1.0 + rtol) if target is None else target
        done = bound <= enough
        if done.any():
            settled = max(settled, float(bound[done].max()))
        lo, hi, bound = lo[~done], hi[~done], bound[~done]
        if lo.size == 0:
            return low, settled
        if work > WORK:
            return low, max(settled, float(bound.max()))
        middle = 0.5 * (lo + hi)
        lo, hi = np.concatenate([lo, middle]), np.concatenate([middle, hi])


def certifies(epsilon: float, pulls: int, target: float) -> bool:
    """Whether T = `pulls` is proved to keep every bad arm's chance at or below `target`."""
    return worst_case(epsilon, pulls, target=target)[1] <= target


def probed(epsilon: float, pulls: int) -> float:
    """A lower bound of the sup of F_T, cheap: the largest F_T(mu) at PROBES points of the middle
    of [0, 1 - eps], where the sup lies (F_T is symmetric about (1 - eps) / 2, and the laws are
    widest there), rounded down."""
    centre = (1.0 - epsilon) / 2.0
    mu = centre + np.linspace(-0.1, 0.1, PROBES) * min(1.0, 1.0 - epsilon)
    _, lower = cell_values(pulls, epsilon, mu, mu)
    return float(lower.max()) * (1.0 - RELATIVE_MARGIN)


@lru_cache(maxsize=4096)
def bernoulli_samples_per_arm(epsilon: float, eta: float, n_arms: int, sub_gaussian: int) -> int:
    """A T in [1, `sub_gaussian`] certified for eta / (K - 1), as small as the search finds:
    `sub_gaussian` (the sub-Gaussian T, valid without any computation) when it is above
    EXACT_LIMIT or when no smaller T is certified.

    First a bisection on the cheap lower bound (`probed`) finds T0, the smallest T that it does
    not refute (if it falls with T). Then T0, T0 + 1, T0 + 3, T0 + 7, ... are certified in turn
    (the nearer T is to the edge, the finer the cells must be, past WORK just at it), and a
    bisection between the last two tried settles it. Every T returned was certified;
    scripts/cde_budget.py checks, for its table, that every smaller T is refuted (the lattice of
    the binomial need not make the sup monotone in T)."""
    if sub_gaussian > EXACT_LIMIT:
        return sub_gaussian
    target = eta / (n_arms - 1)
    low, high = 0, sub_gaussian  # low: refuted by the probes (T = 0: no run, T >= 1 needed)
    while high - low > 1:
        middle = (low + high) // 2
        if probed(epsilon, middle) > target:
            low = middle
        else:
            high = middle
    failed, pulls, step = high - 1, high, 1
    while pulls < sub_gaussian and not certifies(epsilon, pulls, target):
        failed, pulls, step = pulls, min(sub_gaussian, pulls + step), 2 * step
    while pulls - failed > 1:
        middle = (failed + pulls) // 2
        if certifies(epsilon, middle, target):
            pulls = middle
        else:
            failed = middle
    return pulls

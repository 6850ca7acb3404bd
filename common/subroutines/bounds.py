"""Confidence intervals sharper than Hoeffding's, each valid for the reward model it names.

Every function returns a (lower, upper) interval for one arm's mean from its empirical mean and
number of pulls; the caller chooses the level, i.e. how the failure probability is spread over
arms, rounds or time (docs/SUBROUTINES.md derives each choice).

- KL (Chernoff) intervals for rewards in [0, 1]: for i.i.d. rewards in [0, 1] with mean mu,
  P(mean_n <= mu - x) and P(mean_n >= mu + x) are at most exp(-n kl(mu -+ x, mu)), with kl the
  Bernoulli relative entropy (Hoeffding 1963, Theorem 1; Garivier and Cappe 2011). The interval
  {q : n kl(mean_n, q) <= level} therefore fails on each side with probability <= exp(-level);
  its ends are computed from outside (a slightly wider interval, never a narrower one).
  By Pinsker (kl(p, q) >= 2 (p - q)^2) it is never wider than Hoeffding's at the same level.
- The stitched boundary of Howard, Ramdas, McAuliffe and Sekhon (Ann. Statist. 2021): for
  s-sub-Gaussian increments, S_n <= 1.7 s sqrt(n (log log(2n) + 0.72 log(5.2 / alpha))) for every
  n >= 1 at once, with probability >= 1 - alpha. Rewards in [0, 1] are 1/2-sub-Gaussian. Anytime:
  no union over rounds or time is needed, only over arms and the two sides.
- KL-LUCB's exploration rate beta(t, delta) = log(k1 K t^alpha / delta), alpha = 1.1, k1 = 11
  (Kaufmann and Kalyanakrishnan, COLT 2013). Correctness needs only k1 > 1 + 1/(alpha - 1), 11
  here; their 405.45 is the condition of their sample-complexity bound. k1 and delta enter only
  as k1 / delta, so a larger k1 just runs the rule at a smaller confidence than the one asked.
- LUCB1, UGapEc and KL-LUCB are right on a one-sided event (the best arm's upper side and the
  lower side of the arms that are not eps-optimal), and their levels grow with t, so the union
  runs over each arm's pull counts only: `explore_commit_failure` sums it. Summed over both
  sides, every t and every n <= t, as the proofs are often written, it exceeds delta.
"""

from __future__ import annotations

import math

KL_ITERATIONS = 30  # Newton steps at most (a handful suffice: convergence is quadratic)
KL_TOLERANCE = 1e-9  # stop once pulls * kl(mean, q) is within this of the level
KL_EDGE = 1e-12  # Newton starts inside (0, 1), where kl is finite
KL_LUCB_ALPHA = 1.1
# 1 + 1/(alpha - 1), the bound of KL-LUCB's correctness condition; `explore_commit_failure` proves
# it enough: zeta(1.1) / 11 = 0.96 < 1. Its value is frozen into common/simulation/fast.py's
# compiled code: change both files together.
KL_LUCB_K1 = 11.0
STITCH_SCALE = 1.7
STITCH_LOGLOG = 0.72
STITCH_ALPHA = 5.2
MIXTURE_ITERATIONS = 50  # Newton steps at most (a handful suffice)
MIXTURE_TOLERANCE = 1e-10  # stop once log M is within this of log(1 / alpha), from above


def kl_bernoulli(p: float, q: float) -> float:
    """kl(p, q) = p log(p / q) + (1 - p) log((1 - p) / (1 - q)), with 0 log 0 = 0."""
    out = 0.0
    if p > 0.0:
        out += p * math.log(p / q) if q > 0.0 else math.inf
    if p < 1.0:
        out += (1.0 - p) * math.log((1.0 - p) / (1.0 - q)) if q < 1.0 else math.inf
    return out


def _newton(mean: float, pulls: int, level: float, q: float) -> float:
    """Newton steps on pulls kl(mean, q) = level from a q outside the root, until within
    KL_TOLERANCE: convexity keeps every iterate outside, a valid bound."""
    for _ in range(KL_ITERATIONS):
        g = pulls * kl_bernoulli(mean, q) - level
        if g <= KL_TOLERANCE:
            break
        q -= g / (pulls * (q - mean) / (q * (1.0 - q)))
    return q


def kl_upper(mean: float, pulls: int, level: float) -> float:
    """The largest q in [mean, 1] with pulls * kl(mean, q) <= level.

    Newton's method on g(q) = pulls kl(mean, q) - level, convex and increasing on [mean, 1),
    started at Hoeffding's end mean + sqrt(level / (2 pulls)), where g >= 0 by Pinsker: every
    iterate stays at or above the root, so each one is a valid (conservative) upper bound."""
    mean = min(max(mean, 0.0), 1.0)
    if mean >= 1.0:
        return 1.0
    if mean <= 0.0:
        return -math.expm1(-level / pulls)  # kl(0, q) = -log(1 - q)
    return _newton(mean, pulls, level, min(mean + math.sqrt(level / (2.0 * pulls)), 1.0 - KL_EDGE))


def kl_lower(mean: float, pulls: int, level: float) -> float:
    """The smallest q in [0, mean] with pulls * kl(mean, q) <= level (Newton from below, as
    `kl_upper` from above: every iterate is a valid lower bound)."""
    mean = min(max(mean, 0.0), 1.0)
    if mean <= 0.0:
        return 0.0
    if mean >= 1.0:
        return math.exp(-level / pulls)  # kl(1, q) = -log(q)
    return _newton(mean, pulls, level, max(mean - math.sqrt(level / (2.0 * pulls)), KL_EDGE))


def kl_interval(mean: float, pulls: int, level: float) -> tuple[float, float]:
    """The Chernoff-KL interval for rewards in [0, 1]; each side fails w.p. <= exp(-level)."""
    return kl_lower(mean, pulls, level), kl_upper(mean, pulls, level)


def elimination_level(rounds: int, n_arms: int, confidence: float) -> float:
    """log(4 K r^2 / conf): SE's union over arms, both sides and rounds r >= 1 sums to
    2 K sum_r conf / (4 K r^2) = conf pi^2 / 12 < conf."""
    return math.log(4.0 * n_arms * rounds * rounds / confidence)


def kl_lucb_level(time: int, n_arms: int, confidence: float) -> float:
    """beta(t, conf) = log(k1 K t^alpha / conf), KL-LUCB's exploration rate."""
    return math.log(KL_LUCB_K1 * n_arms * float(time) ** KL_LUCB_ALPHA / confidence)


def explore_commit_failure(
    name: str, one_side: bool = True, over_times: bool = False, k1: float = KL_LUCB_K1
) -> float:
    """The local failure bound of `lucb`, `ugapec` or `kl-lucb` as a multiple of their confidence:
    the sum over arms, sides and pull counts n of exp(-level) at t = n (the level grows with t,
    and n <= t at any time t), or, with `over_times`, over every time t (from 1; from 2 for
    UGapEc's (t - 1)^3) and every n <= t: inf when that sum diverges. one_side: only the side of
    each arm that the rule's proof uses (docs/SUBROUTINES.md, section 2)."""
    from scipy.special import zeta

    if name == "lucb":  # exp(-level) = 4 conf / (5 K t^4)
        factor = 0.8 * (zeta(3.0) if over_times else zeta(4.0))
    elif name == "ugapec":  # exp(-level) = conf / (4 K max(t - 1, 1)^3)
        factor = ((zeta(2.0) + zeta(3.0)) if over_times else (1.0 + zeta(3.0))) / 4.0
    elif name == "kl-lucb":  # exp(-level) = conf / (k1 K t^alpha): over t, sum t^(1 - alpha)
        factor = math.inf if over_times else zeta(KL_LUCB_ALPHA) / k1
    else:
        raise ValueError(f"no explore-then-commit bound for {name!r}")
    return float(factor) * (1.0 if one_side else 2.0)


def stitched_radius(pulls: int, n_arms: int, confidence: float, sigma: float | None) -> float:
    """Howard et al.'s stitched radius for one arm's mean, anytime, at alpha = conf / (2 K) per
    side and arm (a union over both sides of the K arms). sigma None: rewards in [0, 1] (s = 1/2)."""
    scale = 0.5 if sigma is None else sigma
    alpha = confidence / (2.0 * n_arms)
    n = float(pulls)
    inner = math.log(math.log(2.0 * n)) + STITCH_LOGLOG * math.log(STITCH_ALPHA / alpha)
    return STITCH_SCALE * scale * math.sqrt(inner / n)


def mixture_boundary(variance: float, rho: float, alpha: float) -> float:
    """The one-sided normal-mixture boundary: S_n may exceed it at some n with probability at
    most alpha, for S_n a sum of centred sigma-sub-Gaussian increments and variance = sigma^2 n.

    For every lambda, exp(lambda S_n - lambda^2 V_n / 2) is a nonnegative supermartingale with
    value 1 at n = 0; mixed over lambda >= 0 with a half-normal density of precision rho it stays
    one, M(S, V) = 2 sqrt(rho / (V + rho)) exp(S^2 / (2 (V + rho))) Phi(S / sqrt(V + rho)), and
    Ville's inequality gives P(M >= 1 / alpha at some n) <= alpha (Robbins; Howard, Ramdas,
    McAuliffe and Sekhon 2021, section 3). M is increasing in S, so the boundary is the root of
    log M = log(1 / alpha). It is convex in S (log Phi is concave with curvature above -1):
    Newton's steps from above, from the two-sided formula (where Phi >= 1/2 makes M >= 1 / alpha),
    stay above the root, so every iterate is a valid (conservative) boundary. For a continuous
    martingale the crossing probability is exactly alpha: the boundary leaves no slack of its own.
    """
    width = variance + rho
    target = math.log(1.0 / alpha)
    s = math.sqrt(2.0 * width * math.log(math.sqrt(width / rho) / alpha))
    base = math.log(2.0) + 0.5 * math.log(rho / width)
    root = math.sqrt(width)
    for _ in range(MIXTURE_ITERATIONS):
        x = s / root
        phi = 0.5 * math.erfc(-x / math.sqrt(2.0))
        g = base + x * x / 2.0 + math.log(phi) - target
        if g <= MIXTURE_TOLERANCE:
            break
        density = math.exp(-x * x / 2.0) / math.sqrt(2.0 * math.pi)
        s -= g / ((x + density / phi) / root)
    return s


def mixture_rho(variance: float, alpha: float) -> float:
    """The mixture's precision that makes its boundary tightest near `variance` (Howard et al.
    2021, eq. (3.7)): any rho fixed before the data is valid; this one only chooses where the
    boundary is narrowest."""
    level = 2.0 * math.log(1.0 / alpha)
    return variance / (level + math.log(1.0 + level))


def gaussian_radius(pulls: int, level: float, sigma: float) -> float:
    """sigma sqrt(2 level / n): each side fails w.p. <= exp(-level) for sigma-sub-Gaussian rewards."""
    return sigma * math.sqrt(2.0 * level / pulls)


def half_widths(
    n_arms: int, confidence: float, mean: float, pulls: int
) -> dict[str, tuple[float, float]]:
    """(mean - lower, upper - mean) of each bound for one arm of a [0, 1] problem with `pulls`
    samples, when every one of the K arms has that many (t = K * pulls for the time-indexed
    rates): what `dexp subroutines --widths` prints, to compare the bounds at equal footing."""
    time = n_arms * pulls
    hoeffding = math.sqrt(elimination_level(pulls, n_arms, confidence) / (2.0 * pulls))
    lucb = math.sqrt(math.log(5.0 * n_arms * float(time) ** 4 / (4.0 * confidence)) / (2.0 * pulls))
    ugapec = math.sqrt(
        math.log(4.0 * n_arms * float(max(time - 1, 1)) ** 3 / confidence) / (2.0 * pulls)
    )
    stitched = stitched_radius(pulls, n_arms, confidence, None)
    out = {
        "se (Hoeffding, union over rounds)": (hoeffding, hoeffding),
        "lucb (LUCB1)": (lucb, lucb),
        "ugapec (UGapEc)": (ugapec, ugapec),
        "stitched (anytime)": (stitched, stitched),
    }
    for name, level in (
        ("kl-se (KL, union over rounds)", elimination_level(pulls, n_arms, confidence)),
        ("kl-lucb (KL, KL-LUCB's rate)", kl_lucb_level(time, n_arms, confidence)),
    ):
        low, high = kl_interval(mean, pulls, level)
        out[name] = (mean - low, high - mean)
    return out

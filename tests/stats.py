"""The statistics of the guarantee tests: a one-sided binomial acceptance rule, its power, and
exact failure bounds for a local run on two Bernoulli arms.

A guarantee test runs n seeded trials and accepts when failures <= c. The rule is chosen for a
level p (the failure probability the guarantee proves): c is the smallest count such that
P(Bin(n, p) > c) <= alpha, so a correct implementation whose true failure rate is at most p passes
for all but a fraction alpha of the seeds. Its power against an alternative rate q (a broken
variant's, measured) is P(Bin(n, q) > c).

Why exact bounds: every local subroutine's own guarantee (failure <= conf) is a union bound over
rounds, arms and sides, and a failure also needs the empirical gap to move by more than
Delta - eps; so on any instance the measured failure rates are far below conf, even at conf = 0.9,
and a broken radius (x 0.5) still fails far less often than conf. A test at level conf cannot see
it. On two arms, with both arms sampled equally at every decision (SE's rounds; LUCB1 and UGapEc
in the every-arm model), each decision is a function of the two sums (S_0, S_1) ~ (Bin(u, mu_0),
Bin(u, mu_1)); the failure at decision u is an event on them whose probability is computed
exactly, and the union over u bounds the run's failure probability. That bound is proven for
the instance and much smaller than conf, which is what gives a test power.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import binom, nct
from scipy.stats import t as student_t

from common.subroutines.bounds import (
    KL_LUCB_ALPHA,
    KL_LUCB_K1,
    elimination_level,
    stitched_radius,
)
from common.subroutines.radius import (
    dp_elimination_gap,
    dp_epoch_length,
    elimination_radius,
    lucb_radius,
)

ALPHA = 1e-3  # the chance that a rule rejects a correct implementation, at its level
# Slack for float comparisons, always on the side that makes the failure event larger.
SLACK = 1e-9
# Decisions are summed one by one until the Chernoff bound on all the later ones is below this.
TAIL = 1e-9
# The KL rules are evaluated where S_0 and S_1 have at least this probability.
WINDOW = 1e-30


def max_failures(trials: int, level: float, alpha: float) -> int:
    """The smallest c with P(Bin(trials, level) > c) <= alpha: accept when failures <= c."""
    return int(binom.ppf(1.0 - alpha, trials, level))


def power(trials: int, accepted: int, rate: float) -> float:
    """P(Bin(trials, rate) > accepted): how often the rule rejects a variant failing at `rate`."""
    return float(binom.sf(accepted, trials, rate))


def mean_at_most_zero(values: np.ndarray, alpha: float = ALPHA) -> bool:
    """Student's one-sided t test of H0: E[X] <= 0 on i.i.d. values: accept unless
    mean > t_(1 - alpha, n - 1) sd / sqrt(n). A mean at 0 is rejected with probability alpha
    (for normal values; approximately otherwise)."""
    n = values.size
    return float(values.mean()) <= t_critical(n, alpha) * float(values.std(ddof=1)) / math.sqrt(n)


def t_critical(n: int, alpha: float = ALPHA) -> float:
    return float(student_t.ppf(1 - alpha, n - 1))


def t_power(n: int, sd: float, effect: float, alpha: float = ALPHA) -> float:
    """The power of `mean_at_most_zero` against E[X] = effect > 0 with standard deviation sd
    (the noncentral t)."""
    return float(nct.sf(t_critical(n, alpha), n - 1, effect / (sd / math.sqrt(n))))


def _kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(p > 0, p * np.log(p / q), 0.0)
        b = np.where(p < 1, (1 - p) * np.log((1 - p) / (1 - q)), 0.0)
    return a + b


def _kl_end(mean: np.ndarray, pulls: int, level: float, upper: bool) -> np.ndarray:
    """An end of {q : pulls kl(mean, q) <= level} that is verified inside it: never wider than
    the exact interval, so never wider than the product's (Newton from outside). Newton from
    Hoeffding's end (outside, by Pinsker), SLACK inwards, then bisection where not inside."""
    sign = 1.0 if upper else -1.0
    edge = np.clip(mean + sign * math.sqrt(level / (2 * pulls)), 1e-12, 1 - 1e-12)
    q = edge
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(40):
            g = pulls * _kl(mean, q) - level
            if not (g > 1e-12).any():
                break
            q = np.where(g > 0, q - g / (pulls * (q - mean) / (q * (1 - q))), q)
        q = np.where(np.isfinite(q), q - sign * SLACK, mean)
    q = np.maximum(q, mean) if upper else np.minimum(q, mean)
    bad = pulls * _kl(mean, q) > level
    if bad.any():  # Newton did not converge there: bisect those
        p = mean[bad]
        lo, hi = (p, np.ones_like(p)) if upper else (np.zeros_like(p), p)
        for _ in range(45):
            mid = (lo + hi) / 2
            inside = pulls * _kl(p, mid) <= level
            if upper:
                lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
            else:
                lo, hi = np.where(inside, lo, mid), np.where(inside, mid, hi)
        q[bad] = lo if upper else hi
    return q


def difference_sf(trials: int, mu0: float, mu1: float, d: int) -> float:
    """P(S_1 - S_0 >= d) for independent S_a ~ Bin(trials, mu_a), exactly (up to the mass outside
    the windows of `_binomial_window`, which is added: an upper bound)."""
    lo0, pmf0 = _binomial_window(trials, mu0)
    s0 = lo0 + np.arange(pmf0.size)
    outside = max(1.0 - pmf0.sum(), 0.0)
    return min(1.0, float(pmf0 @ binom.sf(s0 + d - 1, trials, mu1)) + outside)


def chernoff_rate(mu0: float, mu1: float) -> float:
    """E exp(lambda (X_1 - X_0)) at its best lambda >= 0 on a grid: P(S_1 >= S_0) <= rate^u."""
    lam = np.linspace(0.0, 20.0, 20_001)
    mgf = (1 - mu1 + mu1 * np.exp(lam)) * (1 - mu0 + mu0 * np.exp(-lam))
    return float(mgf.min())


def two_arm_failure_bound(
    subroutine: str,
    means: Sequence[float],
    epsilon: float,
    confidence: float,
    scale: float = 1.0,
) -> float:
    """An upper bound on the probability that one local run of `subroutine` on two Bernoulli
    arms with mu_0 - mu_1 > eps (only arm 0 is eps-optimal) keeps arm 1: the union over its
    decisions u = 1, 2, ... of the exact probability that the rule, applied to (S_0, S_1) after u
    samples of each arm, eliminates arm 0 or stops keeping arm 1. `scale` multiplies the radii
    (KL levels by its square), as fast.RADIUS_SCALE does: the bound of a broken variant.

    Subroutines: the SE family (se, ser3, kl-se, stitched-se; one arm or every arm per
    activation), and in the every-arm model (both arms at every decision) lucb, ugapec, kl-lucb,
    stitched-lucb. Every failure needs S_1 >= S_0, so the decisions after the last one summed add
    at most the Chernoff tail sum_u rate^u, itself added once it is below TAIL."""
    mu0, mu1 = means
    if not mu0 - mu1 > epsilon:
        raise ValueError(f"means={means}: arm 1 must not be eps-optimal")
    rule = _rule(subroutine, epsilon, confidence, scale)
    rate = chernoff_rate(mu0, mu1)
    pmf0, pmf1 = np.ones(1), np.ones(1)
    total, u = 0.0, 0
    while True:
        u += 1
        pmf0 = np.append(pmf0 * (1 - mu0), 0.0) + np.append(0.0, pmf0 * mu0)
        pmf1 = np.append(pmf1 * (1 - mu1), 0.0) + np.append(0.0, pmf1 * mu1)
        at_least1 = np.append(np.cumsum(pmf1[::-1])[::-1], 0.0)  # P(S_1 >= j), j = 0 .. u + 1
        need, stopped = rule(u, pmf0, pmf1)  # for each S_0 = s, the smallest failing S_1
        total += float(pmf0 @ at_least1[np.minimum(need, u + 1)])
        tail = rate ** (u + 1) / (1 - rate)
        if stopped:
            return total
        if tail < TAIL:
            return total + tail


Rule = Callable[[int, np.ndarray, np.ndarray], tuple[np.ndarray, bool]]


def _rule(subroutine: str, epsilon: float, confidence: float, scale: float) -> Rule:
    """(u, pmf of S_0, pmf of S_1) -> (for each S_0 = s in 0 .. u, the smallest failing S_1;
    whether every run has stopped by this decision)."""
    k = 2
    se_family = subroutine in ("se", "ser3", "kl-se", "stitched-se")
    if subroutine in ("kl-se", "kl-lucb"):

        def level(u: int) -> float:
            if subroutine == "kl-se":
                return scale**2 * elimination_level(u, k, confidence)
            return scale**2 * math.log(KL_LUCB_K1 * k * float(2 * u) ** KL_LUCB_ALPHA / confidence)

        return lambda u, pmf0, pmf1: (
            _kl_threshold(u, level(u), epsilon, se_family, pmf0, pmf1),
            False,
        )

    def radius(u: int) -> float:
        if subroutine in ("se", "ser3"):
            return scale * elimination_radius(u, k, confidence, None)
        if subroutine in ("stitched-se", "stitched-lucb"):
            return scale * stitched_radius(u, k, confidence, None)
        if subroutine == "lucb":
            return scale * lucb_radius(u, 2 * u, k, confidence, None)
        if subroutine == "ugapec":  # UGapEc's beta at t = 2u
            log_term = math.log(4.0 * k * max(2 * u - 1, 1) ** 3 / confidence)
            return scale * math.sqrt(log_term / (2 * u))
        raise ValueError(f"no bound for subroutine={subroutine!r}")

    def rule(u: int, pmf0: np.ndarray, pmf1: np.ndarray) -> tuple[np.ndarray, bool]:
        rad = radius(u)
        # S_1 - S_0 >= d eliminates arm 0 (SE: d >= 2 rad u) or stops keeping arm 1 (SE's
        # eps-stop once rad <= eps/2, the empirical best winning ties; LUCB1 and UGapEc when
        # S_1 > S_0 and U_0 - L_1 < eps)
        if se_family:
            d = math.ceil(2 * rad * u - SLACK)
            if rad <= epsilon / 2 + SLACK:
                d = min(d, 1)
        else:
            d = max(1, math.floor(u * (2 * rad - epsilon) - SLACK) + 1)
        stopped = se_family and rad <= epsilon / 2 - SLACK
        return np.arange(u + 1) + d, stopped

    return rule


def _kl_threshold(
    u: int, level: float, epsilon: float, elimination: bool, pmf0: np.ndarray, pmf1: np.ndarray
) -> np.ndarray:
    """For each S_0 = s, the smallest S_1 that makes the KL rule fail after u samples of each arm:
    arm 0 eliminated (U_0 <= L_1, kl-se only) or a stop keeping arm 1 (S_1 > S_0 and
    U_0 - L_1 < eps). L_1 grows with S_1, so the failing S_1 form an upper range. Computed where
    the sums have probability > WINDOW; elsewhere the answer errs on the failing side (0 for an
    S_0 outside, the window's bottom or one past its top for a range that reaches them)."""
    s0 = np.flatnonzero(pmf0 > WINDOW)
    s1 = np.flatnonzero(pmf1 > WINDOW)
    upper0 = _kl_end(s0 / u, u, level, upper=True)
    lower1 = _kl_end(s1 / u, u, level, upper=False)

    def first(values: np.ndarray, side: str) -> np.ndarray:
        i = np.searchsorted(lower1, values, side=side)  # type: ignore[call-overload]
        return np.where(i == 0, 0, s1[np.minimum(i, s1.size - 1)] + (i == s1.size))

    need = np.maximum(first(upper0 - epsilon, "right"), s0 + 1)
    if elimination:
        need = np.minimum(need, first(upper0, "left"))
    out = np.zeros(u + 1, dtype=np.int64)
    out[s0] = need
    return out


def _binomial_window(trials: int, p: float) -> tuple[int, np.ndarray]:
    """(first value, pmf) of Bin(trials, p) within 14 standard deviations (+ 14) of its mean:
    what lies outside is far below 1e-30, and the callers add it to their bounds as a whole."""
    sd = math.sqrt(trials * p * (1 - p))
    lo = max(0, math.floor(trials * p - 14 * sd - 14))
    hi = min(trials, math.ceil(trials * p + 14 * sd + 14))
    values = np.arange(lo, hi + 1)
    return lo, binom.pmf(values, trials, p)


def dp_se_failure_bound(
    means: Sequence[float], beta: float, dp_epsilon: float, scale: float = 1.0
) -> float:
    """An upper bound on the probability that one run of DP-SE (DP-MASE's local subroutine) on
    two Bernoulli arms with mu_0 > mu_1 eliminates arm 0: the union over epochs e of the exact
    probability that (S_1 - S_0) / R + Z_1 - Z_0 > gap(e), with S_a ~ Bin(R, mu_a) the epoch's
    fresh sums (R = R(e) rounds), Z_a ~ Laplace(1 / (eps_dp R)) and the gap 2 (h + c) times
    `scale` (fast.RADIUS_SCALE). A failure needs (S_1 - S_0) / R > -Delta / 2 or Z_1 - Z_0 >
    Delta / 2: at most exp(-R Delta^2 / 8) (Hoeffding) plus the Laplace difference's tail. From the
    first epoch where that is negligible, it and the later epochs add at most twice it (R at
    least doubles an epoch, and each term then falls faster than by half)."""
    mu0, mu1 = means
    delta = mu0 - mu1
    if not delta > 0:
        raise ValueError(f"means={means}: arm 0 must be the best")

    def laplace_difference_sf(t: np.ndarray, b: float) -> np.ndarray:
        """P(Z_1 - Z_0 > t) for i.i.d. Laplace(b): density (1 + |x| / b) e^(-|x| / b) / (4 b)."""
        tail = (2 + np.abs(t) / b) * np.exp(-np.abs(t) / b) / 4
        return np.where(t >= 0, tail, 1 - tail)

    total, epoch = 0.0, 0
    while True:
        epoch += 1
        rounds = dp_epoch_length(epoch, 2, beta, dp_epsilon)
        b = 1.0 / (dp_epsilon * rounds)
        crude = math.exp(-rounds * delta**2 / 8) + float(
            laplace_difference_sf(np.array(delta / 2), b)
        )
        if crude < TAIL * 1e-9:  # this epoch and every later one (R grows at least 4-fold)
            return total + 2 * crude
        gap = scale * dp_elimination_gap(epoch, rounds, 2, beta, dp_epsilon)
        lo0, pmf0 = _binomial_window(rounds, mu0)
        lo1, pmf1 = _binomial_window(rounds, mu1)
        diff = np.convolve(pmf1, pmf0[::-1])  # S_1 - S_0, from lo1 - hi0 upwards
        d = lo1 - (lo0 + pmf0.size - 1) + np.arange(diff.size)
        total += float(diff @ laplace_difference_sf(gap - d / rounds, b))
        total += max(2.0 - pmf0.sum() - pmf1.sum(), 0.0)  # the sums outside the windows

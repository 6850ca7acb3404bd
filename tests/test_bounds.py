"""The sharper confidence bounds (common.subroutines.bounds) hold, and their compiled mirrors agree.

Coverage is measured by Monte Carlo with fixed seeds. A bound passes when its measured failure
rate is compatible with its nominal level alpha: the one-sided 99% Clopper-Pearson lower limit of
the rate must not exceed alpha. Each check is shown able to fail: the same check, on the same
draws, rejects a deliberately invalid bound (a KL interval at a quarter of the level; for the
anytime boundary, a radius 0.6 times too small and Hoeffding's fixed-n radius, valid at each n
but not at every n at once).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from common.simulation import fast as fast_bounds
from common.subroutines import LocalParams, bounds, subroutine_class
from dexp.cli import app

DRAWS = 20_000  # binomial samples per (p, n) cell
PATHS, HORIZON = 2_000, 2_000  # reward paths for the anytime boundary, and their length


def compatible(failures: int, trials: int, alpha: float) -> bool:
    """The 99% one-sided lower confidence limit of the failure rate is <= alpha."""
    if failures == 0:
        return True
    low = stats.binomtest(failures, trials).proportion_ci(0.98, method="exact").low
    return bool(low <= alpha)


# -- (a) KL intervals: each side fails with probability <= exp(-level) ----------------------------
def kl_misses(p: float, n: int, level: float, seed: int) -> tuple[int, int, float, float]:
    """Upper-side misses (U < p) and lower-side misses (L > p) among DRAWS samples of n
    Bernoulli(p) rewards, and the exact probabilities of both (a sum over the binomial law)."""
    table = np.array([bounds.kl_interval(j / n, n, level) for j in range(n + 1)])
    sums = np.random.default_rng(seed).binomial(n, p, DRAWS)
    pmf = stats.binom.pmf(np.arange(n + 1), n, p)
    return (
        int((table[sums, 1] < p).sum()),
        int((table[sums, 0] > p).sum()),
        float(pmf[table[:, 1] < p].sum()),
        float(pmf[table[:, 0] > p].sum()),
    )


@pytest.mark.parametrize("alpha", [0.1, 0.01])
@pytest.mark.parametrize("n", [5, 20, 100])
@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9])
def test_kl_interval_covers_at_level_log_one_over_alpha(p: float, n: int, alpha: float) -> None:
    seed = int(1000 * p) + 7 * n + int(1 / alpha)
    up, low, exact_up, exact_low = kl_misses(p, n, math.log(1 / alpha), seed)
    assert compatible(up, DRAWS, alpha), f"U < p in {up}/{DRAWS} draws"
    assert compatible(low, DRAWS, alpha), f"L > p in {low}/{DRAWS} draws"
    assert exact_up <= alpha and exact_low <= alpha, (exact_up, exact_low)


@pytest.mark.parametrize("n", [20, 100])
def test_kl_check_rejects_an_interval_at_a_quarter_of_the_level(n: int) -> None:
    """About half as wide: the same check must catch it (so a real bug would be caught)."""
    alpha = 0.1
    up, low, exact_up, exact_low = kl_misses(0.5, n, math.log(1 / alpha) / 4, 500 + n)
    assert not compatible(up, DRAWS, alpha) and not compatible(low, DRAWS, alpha)
    assert exact_up > alpha and exact_low > alpha


def test_kl_interval_solves_its_equation_and_is_inside_hoeffding() -> None:
    for mean, n, level in [
        (0.0, 3, 2.0),
        (0.2, 50, 4.0),
        (0.5, 7, 1.0),
        (0.97, 400, 9.0),
        (1.0, 5, 3.0),  # the upper end is 1 itself, never below the mean
    ]:
        low, high = bounds.kl_interval(mean, n, level)
        assert 0.0 <= low <= mean <= high <= 1.0
        for q in (low, high):
            if q not in (0.0, 1.0):
                assert n * bounds.kl_bernoulli(mean, q) == pytest.approx(level, rel=1e-9)
        width = math.sqrt(level / (2 * n))  # Pinsker: never wider than Hoeffding
        assert high <= mean + width + 1e-12 and low >= mean - width - 1e-12


def at_state(name: str, n_arms: int, confidence: float, mean: float, pulls: int) -> Any:
    """Subroutine `name` after `pulls` samples of every arm, each arm's mean `mean`."""
    params = LocalParams(confidence=confidence)
    sub = subroutine_class(name)(n_arms, params, np.random.default_rng(0))
    sub.counts[:] = pulls
    sub.sums[:] = mean * pulls
    return sub


@pytest.mark.parametrize(("n_arms", "confidence"), [(2, 0.9), (10, 0.9), (10, 0.05)])
@pytest.mark.parametrize(("mean", "pulls"), [(0.5, 1), (0.3, 40), (0.95, 1000)])
def test_the_widths_table_is_what_the_subroutines_use(
    n_arms: int, confidence: float, mean: float, pulls: int
) -> None:
    """`dexp subroutines --widths` (docs/SUBROUTINES.md's table) prints each subroutine's own
    interval at t = K * pulls, not a formula of its own."""
    widths = bounds.half_widths(n_arms, confidence, mean, pulls)
    time = n_arms * pulls

    def sides(low: float, high: float) -> tuple[float, float]:
        return mean - low, high - mean

    for name in ("se", "stitched-se"):
        radius = at_state(name, n_arms, confidence, mean, pulls).radius(pulls)
        own = (radius, radius)
        key = "se (Hoeffding, union over rounds)" if name == "se" else "stitched (anytime)"
        assert widths[key] == pytest.approx(own, rel=1e-12), name
    kl_se = at_state("kl-se", n_arms, confidence, mean, pulls)
    assert widths["kl-se (KL, union over rounds)"] == pytest.approx(
        sides(*kl_se.intervals(pulls)[0]),
        rel=1e-9,
        abs=1e-12,
    )
    for name, key in [
        ("lucb", "lucb (LUCB1)"),
        ("ugapec", "ugapec (UGapEc)"),
        ("stitched-lucb", "stitched (anytime)"),
        ("kl-lucb", "kl-lucb (KL, KL-LUCB's rate)"),
    ]:
        sub = at_state(name, n_arms, confidence, mean, pulls)
        own = sides(*sub.interval(0, time))
        assert widths[key] == pytest.approx(own, rel=1e-9, abs=1e-12), name


# -- (b) the stitched boundary: every n at once, each side with probability <= alpha ---------------
def stitched_crossings(alpha: float, scale: float = 1.0, fixed_n: bool = False) -> tuple[int, int]:
    """Paths of HORIZON Bernoulli(1/2) rewards whose running mean ever leaves mean +- radius(n),
    radius(n) = scale * stitched_radius(n, K=1, conf=2 alpha) (alpha per side), or Hoeffding's
    fixed-n radius sqrt(log(1/alpha) / (2n)). Returns (paths crossing above, below)."""
    rng = np.random.default_rng(20_250_101)
    pulls = np.arange(1, HORIZON + 1)
    deviation = np.cumsum(rng.random((PATHS, HORIZON)) < 0.5, axis=1) / pulls - 0.5
    if fixed_n:
        radius = np.sqrt(math.log(1 / alpha) / (2 * pulls))
    else:
        radius = scale * np.array(
            [bounds.stitched_radius(int(n), 1, 2 * alpha, None) for n in pulls]
        )
    return int((deviation > radius).any(axis=1).sum()), int((-deviation > radius).any(axis=1).sum())


@pytest.mark.parametrize("alpha", [0.1, 0.3])
def test_stitched_boundary_is_crossed_by_at_most_alpha_of_the_paths(alpha: float) -> None:
    above, below = stitched_crossings(alpha)
    assert compatible(above, PATHS, alpha), f"{above}/{PATHS} paths crossed above"
    assert compatible(below, PATHS, alpha), f"{below}/{PATHS} paths crossed below"


def test_stitched_check_rejects_a_smaller_radius_and_a_fixed_n_one() -> None:
    alpha = 0.1
    for crossed in (stitched_crossings(alpha, scale=0.6), stitched_crossings(alpha, fixed_n=True)):
        assert not compatible(crossed[0], PATHS, alpha), crossed
        assert not compatible(crossed[1], PATHS, alpha), crossed


def test_stitched_radius_formula() -> None:
    n, k, conf = 40, 5, 0.2
    alpha = conf / (2 * k)
    inner = math.log(math.log(2 * n)) + 0.72 * math.log(5.2 / alpha)
    assert bounds.stitched_radius(n, k, conf, None) == pytest.approx(0.85 * math.sqrt(inner / n))
    assert bounds.stitched_radius(n, k, conf, 3.0) == pytest.approx(5.1 * math.sqrt(inner / n))


# -- (c) the normal-mixture boundary (LDP): one side, every n at once, near alpha ----------------
def mixture_crossings(alpha: float, horizon: int, paths: int, scale: float = 1.0) -> int:
    """Paths of `horizon` Bernoulli(1/2) rewards (1/2-sub-Gaussian, with that variance: the
    worst case) whose sum ever reaches scale x the boundary above its mean, tuned at n = 400."""
    rng = np.random.default_rng(20_261_127)
    rho = bounds.mixture_rho(100.0, alpha)
    n = np.arange(1, horizon + 1)
    edge = scale * np.array([bounds.mixture_boundary(i / 4.0, rho, alpha) for i in n])
    crossed = 0
    for _ in range(paths // 500):
        sums = np.cumsum(rng.random((500, horizon)) < 0.5, axis=1) - n / 2.0
        crossed += int((sums >= edge).any(axis=1).sum())
    return crossed


def test_mixture_boundary_is_crossed_by_at_most_alpha_and_nearly_alpha() -> None:
    """Ville's inequality bounds the crossings by alpha; the mixture loses almost nothing to it
    (docs/LDP.md): over 20,000 reports, more than half of alpha cross. A boundary 10 % lower
    is crossed by more than alpha."""
    alpha, horizon, paths = 0.1, 20_000, 2_000
    crossed = mixture_crossings(alpha, horizon, paths)
    assert compatible(crossed, paths, alpha), f"{crossed}/{paths} paths crossed"
    assert crossed >= stats.binom.ppf(1e-6, paths, alpha / 2), f"{crossed}/{paths}"
    lower = mixture_crossings(alpha, horizon, paths, scale=0.9)
    assert not compatible(lower, paths, alpha), f"{lower}/{paths} paths crossed 0.9 x"


def _log_mixture(s: float, width: float, rho: float) -> float:
    """log M(S) of the half-normal mixture, from its closed form (scipy's normal cdf)."""
    phi = stats.norm.cdf(s / math.sqrt(width))
    return math.log(2 * math.sqrt(rho / width) * phi) + s * s / (2 * width)


def test_mixture_boundary_is_the_root_from_above() -> None:
    """Newton's iterate is at or just above the root of log M = log(1 / alpha), found by
    bisection on the closed form: a valid boundary, and no wider than it must be."""
    for variance, rho, alpha in ((0.25, 30.0, 0.05), (250.0, 30.0, 0.01), (2.5e7, 1e3, 0.2)):
        width = variance + rho
        low, high = 0.0, 100.0 * math.sqrt(width)
        for _ in range(200):
            mid = (low + high) / 2
            if _log_mixture(mid, width, rho) >= math.log(1 / alpha):
                high = mid
            else:
                low = mid
        got = bounds.mixture_boundary(variance, rho, alpha)
        assert _log_mixture(got, width, rho) >= math.log(1 / alpha) - 1e-9
        assert got == pytest.approx(high, rel=1e-6)


# -- (d) explore-then-commit: one side per arm, a union over pull counts ---------------------------
def miss(name: str, n_arms: int, confidence: float, pulls: int, time: int) -> float:
    """exp(-level) of one side of one arm's interval with `pulls` samples at time t, from the
    subroutine's own interval (Hoeffding: exp(-2 n r^2) with r its radius; KL: its level)."""
    if name == "kl-lucb":
        return math.exp(-bounds.kl_lucb_level(time, n_arms, confidence))
    low, high = at_state(name, n_arms, confidence, 0.5, pulls).interval(0, time)
    return math.exp(-2.0 * pulls * ((high - low) / 2.0) ** 2)


def test_explore_commit_failure_is_the_union_of_the_rules_own_intervals() -> None:
    """`explore_commit_failure` (docs/SUBROUTINES.md's proof, `dexp subroutines --failure-bounds`)
    is K sum_n exp(-level at t = n) of each rule's own intervals, one side per arm: below 1 for
    LUCB1, UGapEc and KL-LUCB at k1 = 11, the bound of its correctness condition. Summed over both
    sides and every t and n <= t, LUCB1's and UGapEc's exceed 1 (1.92, 1.42): that union does not
    prove them, and KL-LUCB's diverges. Partial sums to 20,000 terms, with the integral's tail."""
    k, conf, terms = 10, 0.9, 20_000
    n = np.arange(1.0, terms + 1)
    alpha = bounds.KL_LUCB_ALPHA
    zeta = {
        s: float(np.sum(n**-s)) + terms ** (1 - s) / (s - 1) - terms**-s / 2
        for s in (2, 3, 4, alpha)
    }
    k1 = bounds.KL_LUCB_K1
    assert pytest.approx(1 + 1 / (alpha - 1)) == k1
    assert zeta[alpha] < k1
    for name, power in (("lucb", 4), ("ugapec", 3), ("kl-lucb", alpha)):
        # exp(-level) = c / (K t^power), t = n (UGapEc: (t - 1)^3, and 1 at t = 1)
        c = miss(name, k, conf, 2, 2) * k * (1 if name == "ugapec" else 2**power) / conf
        for i in (1, 5, 1000):
            t = max(i - 1, 1) if name == "ugapec" else i
            assert miss(name, k, conf, i, i) * k / conf == pytest.approx(c / t**power, rel=1e-9)
        one_side = c * (1.0 + zeta[3]) if name == "ugapec" else c * zeta[power]
        assert bounds.explore_commit_failure(name) == pytest.approx(one_side, rel=1e-6)
        assert bounds.explore_commit_failure(name, one_side=False) == pytest.approx(2 * one_side)
        assert bounds.explore_commit_failure(name) < 1.0
    assert bounds.explore_commit_failure("lucb", False, True) == pytest.approx(1.6 * zeta[3])
    assert bounds.explore_commit_failure("ugapec", False, True) == pytest.approx(
        (zeta[2] + zeta[3]) / 2
    )
    assert bounds.explore_commit_failure("lucb", False, True) > 1.9
    assert bounds.explore_commit_failure("ugapec", False, True) > 1.4
    assert bounds.explore_commit_failure("kl-lucb", True, True) == math.inf
    # KL-LUCB's level depends on k1 / conf only: k1 = 405.5 is k1 = 11 at conf 11 / 405.5
    old = bounds.explore_commit_failure("kl-lucb", k1=405.5)
    assert old == pytest.approx(bounds.explore_commit_failure("kl-lucb") * 11 / 405.5)
    printed = CliRunner().invoke(app, ["subroutines", "--failure-bounds"])
    assert printed.exit_code == 0, printed.output
    rows = {line.split("│")[1].strip(): line for line in printed.output.splitlines() if "│" in line}
    assert [c.strip() for c in rows["lucb"].split("│")[2:6]] == ["1.923", "0.962", "1.732", "0.866"]
    assert "1.423" in rows["ugapec"] and "0.551" in rows["ugapec"]
    assert "0.962" in rows["kl-lucb, k1 = 11"] and "0.026" in rows["kl-lucb, k1 = 405.5 (before)"]


# -- (c) the compiled mirrors ----------------------------------------------------------------------
MEANS = np.linspace(0.0, 1.0, 21)
PULLS = (1, 2, 3, 10, 37, 1000, 123_456)
LEVELS = (0.1, 1.0, math.log(40.0), 12.5)


def test_fast_bounds_match_the_reference_on_a_grid() -> None:
    """Same formulas: equal to 1e-12 (a wrong constant or operation would be far off)."""
    tol = 1e-12
    for mean in MEANS:
        for q in (0.0, 0.01, 0.3, 0.5, 0.99, 1.0):
            ref = bounds.kl_bernoulli(float(mean), q)
            got = fast_bounds.kl_bernoulli(float(mean), q)
            assert ref == got or abs(ref - got) <= tol, (mean, q)
        for n in PULLS:
            for level in LEVELS:
                low, high = bounds.kl_interval(float(mean), n, level)
                assert abs(fast_bounds.kl_lower(float(mean), n, level) - low) <= tol
                assert abs(fast_bounds.kl_upper(float(mean), n, level) - high) <= tol
    for n in PULLS:
        for k in (1, 2, 10, 1000):
            for conf in (1e-4, 0.05, 0.5, 0.9):
                ref = bounds.elimination_level(n, k, conf)
                assert abs(fast_bounds.elimination_level(n, k, conf) - ref) <= tol
                ref = bounds.kl_lucb_level(n, k, conf)
                assert abs(fast_bounds.kl_lucb_level(n, k, conf) - ref) <= tol
                ref = bounds.stitched_radius(n, k, conf, None)
                assert abs(fast_bounds.stitched_radius(n, k, conf, 1.0, True) - ref) <= tol
                ref = bounds.stitched_radius(n, k, conf, 2.5)
                assert abs(fast_bounds.stitched_radius(n, k, conf, 2.5, False) - ref) <= tol
        for level in LEVELS:
            ref = bounds.gaussian_radius(n, level, 0.7)
            assert abs(fast_bounds.gaussian_radius(n, level, 0.7) - ref) <= tol

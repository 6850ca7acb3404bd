"""common/race.py against exact counts of the races it bounds (docs/CDE.md, section 3).

Each bound is checked against an independent exact computation on small cases: a Markov chain
over the counts for `race`, a sum of multinomial terms for `none_reach`. The bound must never be
below the exact value, must equal it (to rounding) where the proof says it is exact (rivals with
equal shares), and must stay above it for uneven splits, the log-concavity argument.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from common import race as race_module
from common.binomial import binomial_tail
from common.race import RACE_SLACK, none_reach, race


def exact_race(needed: int, threshold: int, one: float, rivals: tuple[float, ...]) -> float:
    """P(the one arm gets `needed` reports before any rival gets `threshold`), the reports being
    i.i.d. with shares `one` and `rivals` (the rest goes to arms that do not matter): first-step
    analysis over the counts, restricted to the reports of these arms."""
    total = one + sum(rivals)
    shares = (one / total, *(r / total for r in rivals))

    @cache
    def win(counts: tuple[int, ...]) -> float:
        if counts[0] == needed:
            return 1.0
        if any(c == threshold for c in counts[1:]):
            return 0.0
        return sum(
            share * win((*counts[:i], counts[i] + 1, *counts[i + 1 :]))
            for i, share in enumerate(shares)
            if share > 0
        )

    return win((0,) * (len(rivals) + 1))


def exact_none_reach(reports: int, threshold: int, rivals: tuple[float, ...]) -> float:
    """P(no rival has `threshold` of `reports` i.i.d. reports): the multinomial terms with every
    rival below it, summed by a convolution over the rivals (the rest takes the remainder)."""
    rest = 1.0 - sum(rivals)
    # ways[k]: sum over rival counts totalling k, each below the threshold, of prod p^c / c!
    ways = np.zeros(reports + 1)
    ways[0] = 1.0
    for share in rivals:
        term = np.array([share**c / math.factorial(c) for c in range(min(threshold, reports + 1))])
        ways = np.convolve(ways, term)[: reports + 1]
    return float(
        sum(
            ways[k] * math.factorial(reports) * rest ** (reports - k) / math.factorial(reports - k)
            for k in range(reports + 1)
        )
    )


CASES = [  # needed, threshold, one, rivals' total, rivals
    (1, 1, 0.2, 0.5, 2),
    (3, 3, 0.1, 0.6, 2),
    (2, 4, 0.15, 0.45, 3),
    (4, 4, 0.08, 0.7, 3),
    (5, 3, 0.3, 0.3, 2),
    (3, 5, 0.05, 0.9, 4),
]


@pytest.mark.parametrize(("needed", "threshold", "one", "share", "rivals"), CASES)
def test_race_with_even_rivals_is_the_exact_race(
    needed: int, threshold: int, one: float, share: float, rivals: int
) -> None:
    """With the rivals' share split evenly the bound is the race's probability itself, rounded
    up: never below it, and above it by no more than the rounding."""
    exact = exact_race(needed, threshold, one, (share / rivals,) * rivals)
    bound = race(needed, threshold, one, share, rivals)
    assert exact <= bound <= exact * (1 + 1e-7) + 1e-12, (exact, bound)


@pytest.mark.parametrize(("needed", "threshold", "one", "share", "rivals"), CASES)
def test_uneven_rivals_race_less_often(
    needed: int, threshold: int, one: float, share: float, rivals: int
) -> None:
    """The even split is the worst: random splits of the same total (Dirichlet, seeded), and the
    extreme one where a single rival takes almost everything, all give the one arm a smaller
    chance than the bound, and a larger total for the rivals a smaller one still."""
    bound = race(needed, threshold, one, share, rivals)
    rng = np.random.default_rng(needed * 100 + threshold * 10 + rivals)
    splits = [rng.dirichlet(np.ones(rivals)) for _ in range(12)]
    splits.append(np.array([1 - 1e-6 * (rivals - 1), *[1e-6] * (rivals - 1)]))
    for split in splits:
        uneven = exact_race(needed, threshold, one, tuple(share * split))
        assert uneven <= bound * (1 + 1e-9), (split, uneven, bound)
    more = exact_race(needed, threshold, one, (1.2 * share / rivals,) * rivals)
    assert more <= bound


def test_race_with_one_rival_is_a_binomial_tail() -> None:
    """One rival: the one arm's needed-th report comes first exactly when it has `needed` of the
    first needed + threshold - 1 reports of the two arms."""
    for needed, threshold, one, rival in ((1, 1, 0.3, 0.6), (4, 6, 0.2, 0.5), (10, 12, 0.1, 0.4)):
        exact = exact_race(needed, threshold, one, (rival,))
        assert race(needed, threshold, one, rival, 1) == pytest.approx(exact, rel=1e-7)
        expected = binomial_tail(needed + threshold - 1, needed, one / (one + rival))
        assert race(needed, threshold, one, rival, 1) == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize(("needed", "threshold", "one", "share", "rivals"), CASES[1:])
def test_the_integral_bounds_the_race_within_its_slack(
    needed: int, threshold: int, one: float, share: float, rivals: int
) -> None:
    """The path for large thresholds (an upper Riemann-Stieltjes sum of the Poissonized race) is
    never below the exact race and within RACE_SLACK (plus its absolute allowance) above it."""
    exact = exact_race(needed, threshold, one, (share / rivals,) * rivals)
    integral = race_module._race_integral(needed, threshold, share / (rivals * one), rivals)
    assert exact <= integral <= exact * (1 + RACE_SLACK) + 1e-12, (exact, integral)


def test_large_thresholds_take_the_integral_and_agree_with_the_exact_sum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above EXACT_LIMIT the race is integrated: both paths agree within the slack on a case
    each can do (the exact sum forced by a larger limit), and the integral stays above."""
    args = (60, 60, 0.07, 0.5, 5)
    assert 2 * race_module.EXACT_LIMIT / 100 < 5 * 5 * 60 * 60  # a real size, not a toy
    integral = race_module._race_integral(60, 60, 0.5 / (5 * 0.07), 5)
    monkeypatch.setattr(race_module, "EXACT_LIMIT", 10**9)
    exact = race(*args)
    monkeypatch.setattr(race_module, "EXACT_LIMIT", 1)
    assert race(*args) == integral
    assert exact <= integral <= exact * (1 + RACE_SLACK)


def test_race_edges() -> None:
    assert race(0, 5, 0.1, 0.5, 2) == 1.0  # nothing needed: won at once
    assert race(3, 5, 0.0, 0.5, 2) == 0.0  # the one arm is never reported
    assert race(3, 0, 0.1, 0.5, 2) == 0.0  # a rival has reached 0 already
    assert race(3, 5, 0.1, 0.0, 2) == 1.0  # no rival is ever reported
    assert 0.0 < race(3, 5, 0.1, 0.5, 2) < 1.0


@pytest.mark.parametrize(
    ("reports", "threshold", "rivals"),
    [(6, 3, (0.3, 0.3)), (10, 4, (0.2, 0.2, 0.2)), (12, 5, (0.45, 0.45)), (20, 4, (0.2,) * 5)],
)
def test_none_reach_bounds_the_exact_probability(
    reports: int, threshold: int, rivals: tuple[float, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`none_reach` is the exact probability that no rival reaches the threshold for the even
    split (rounded up), and above it for uneven splits of the same total and for a larger total.
    The cheaper Poisson bound it takes for large thresholds is above it too, and not vacuous."""
    share = sum(rivals)
    bound = none_reach(reports, threshold, share, len(rivals))
    even = exact_none_reach(reports, threshold, rivals)
    assert even <= bound <= even * (1 + 1e-7) + 1e-12, (even, bound)
    rng = np.random.default_rng(reports)
    for _ in range(8):
        split = tuple(share * rng.dirichlet(np.ones(len(rivals))))
        assert exact_none_reach(reports, threshold, split) <= bound
    if 1.1 * share <= 1.0:
        more = tuple(1.1 * r for r in rivals)
        assert exact_none_reach(reports, threshold, more) <= bound
    monkeypatch.setattr(race_module, "EXACT_LIMIT", 0)
    poisson = none_reach(reports, threshold, share, len(rivals))
    assert even <= poisson and (even == 0 or poisson <= 40 * even), (even, poisson)


def test_none_reach_edges() -> None:
    assert none_reach(10, 0, 0.5, 2) == 0.0  # every rival has 0 reports already
    assert none_reach(2, 3, 0.5, 2) == 1.0  # fewer reports than the threshold
    assert none_reach(10, 3, 0.0, 2) == 1.0  # the rivals are never reported
    assert none_reach(400, 3, 0.9, 3) < 1e-12  # hundreds of reports: some rival has 3


def test_the_bounds_stay_probabilities_at_their_extremes() -> None:
    """Rounding up never leaves [0, 1]: a race the one arm wins for sure is 1, not 1 + 1e-8; no
    rival ever reported, or with all the share, gives the certain answers; one report per rival
    needed is the chance that none of them is reported."""
    assert race(3, 5, 0.5, 1e-12, 2) == 1.0
    assert race(3, 5, 0.5, 1e-12, 1) == 1.0
    assert none_reach(5, 3, 1e-9, 2) == 1.0
    assert none_reach(10, 3, 1.5, 2) < 1e-12  # a share above 1 is all of it: 10 reports, 2 x 2
    assert none_reach(3, 1, 0.5, 2) == pytest.approx(0.125, rel=1e-7)
    assert none_reach(3, 3, 0.9, 1) == pytest.approx(1 - 0.9**3, rel=1e-7)


def poisson_none_reach(reports: int, threshold: int, share: float, rivals: int) -> float:
    """The Poisson bound of `none_reach`, computed here apart: min over its grid of lam of
    S_m(share lam / s)^s / P(Poisson(lam) <= n)."""
    from scipy.stats import poisson

    spread = math.sqrt(reports)
    lam = np.linspace(max(reports - 8 * spread - 8, reports / 4), reports, 96)
    stays = poisson.cdf(threshold - 1, share * lam / rivals) ** rivals
    return float(np.min(stays / poisson.cdf(reports, lam)))


def test_large_thresholds_take_the_cheaper_bounds() -> None:
    """Past EXACT_LIMIT (s^2 M^2 > 2 x 10^6) `none_reach` takes its Poisson bound and `race` its
    integral; below it, both are exact. The paths are told apart by their values."""
    big = (1_900, 200, 0.9, 9)  # 81 x 40,000 = 3.24 million; a bound of 0.16, not a rounding
    assert 2 * race_module.EXACT_LIMIT < 9 * 9 * 200 * 200
    assert none_reach(*big) == pytest.approx(poisson_none_reach(*big), rel=1e-6)
    assert 0.1 < none_reach(*big) < 0.2
    small = (100, 12, 0.9, 9)
    exact = exact_none_reach(100, 12, (0.1,) * 9)
    assert none_reach(*small) == pytest.approx(exact, rel=1e-7)
    assert poisson_none_reach(*small) > 1.01 * exact
    assert race(200, 200, 0.07, 0.65, 9) == pytest.approx(
        race_module._race_integral(200, 200, 0.65 / (9 * 0.07), 9), rel=1e-12
    )
    assert 2 * race_module.EXACT_LIMIT > 9 * 9 * 150 * 150
    slow = race_module._race_integral(150, 150, 0.65 / (9 * 0.07), 9)
    assert race(150, 150, 0.07, 0.65, 9) < slow  # the exact sum, below the integral's bound

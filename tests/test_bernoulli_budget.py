"""CDE's exact budget for rewards declared Bernoulli (common/subroutines/bernoulli_budget.py).

The certified sup must be an upper bound (against scipy's binomial law, independently, and a
dense grid of the means), the T chosen must be certified and no larger than the sub-Gaussian one,
and the real local run (FixedBudget) at that T, on the worst-case means, must err at most at the
rate the certificate allows, while T - 3 is shown to err more (the Monte Carlo has the power to
tell). Seeds are fixed; the binomial tests' thresholds are said beside them.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy import stats

from common.errors import ParameterError
from common.subroutines import FixedBudget, LocalParams
from common.subroutines.bernoulli_budget import (
    cell_values,
    certifies,
    probed,
    worst_case,
    wrong_answer_chance,
)
from common.subroutines.fixed_budget import samples_per_arm


def exact_f(pulls: int, p: float, q: float) -> float:
    """P(S_b > S_a) + P(S_b = S_a) / 2 from scipy's binomial law, summed directly."""
    x = np.arange(pulls + 1)
    b, a = stats.binom.pmf(x, pulls, p), stats.binom.pmf(x, pulls, q)
    return float(sum(b[i] * (a[:i].sum() + a[i] / 2) for i in x))


def grid_sup(pulls: int, epsilon: float, points: int = 2001) -> tuple[float, float]:
    """(max, argmax) of F_T(mu) = f_T(mu, mu + eps) on a dense grid, from scipy."""
    mu = np.linspace(0.0, 1.0 - epsilon, points)
    x = np.arange(pulls + 1)
    b = stats.binom.pmf(x[None, :], pulls, mu[:, None])
    a = stats.binom.pmf(x[None, :], pulls, mu[:, None] + epsilon)
    below = np.cumsum(a, axis=1) - a
    values = (b * (below + a / 2)).sum(axis=1)
    i = int(np.argmax(values))
    return float(values[i]), float(mu[i])


@pytest.mark.parametrize("pulls", [1, 2, 7, 13, 40])
def test_the_chance_is_scipys(pulls: int) -> None:
    """f_T at random means, all points and windowed, is scipy's to 1e-12 (relative), and the
    cells' bounds enclose it: the upper one at (hi, lo + eps), the lower one at (lo, lo + eps)."""
    rng = np.random.default_rng(pulls)
    p, q = rng.uniform(0, 1, 20), rng.uniform(0, 1, 20)
    p[0], q[0] = 0.0, 1.0  # the edge rows
    ours = wrong_answer_chance(pulls, p, q)
    for i in range(p.size):
        want = exact_f(pulls, p[i], q[i])
        assert math.isclose(ours[i], want, rel_tol=1e-12, abs_tol=1e-300), (p[i], q[i])
    eps = 0.2
    lo = rng.uniform(0, 1 - eps - 0.01, 20)
    hi = lo + rng.uniform(0, 0.01, 20)
    upper, lower = cell_values(pulls, eps, lo, hi)
    for i in range(lo.size):
        assert upper[i] >= exact_f(pulls, hi[i], lo[i] + eps) * (1 - 1e-12)
        assert lower[i] <= exact_f(pulls, lo[i], lo[i] + eps) * (1 + 1e-12)


@pytest.mark.parametrize(
    ("pulls", "epsilon"), [(1, 0.3), (5, 0.5), (13, 0.25), (41, 0.25), (82, 0.1)]
)
def test_the_certified_sup_bounds_a_dense_grid(pulls: int, epsilon: float) -> None:
    """worst_case's high is at least the max of F_T over 2,001 means (scipy) and within 0.1 % of
    its low, which is at most that max's neighbourhood: the bound is an upper bound, and tight."""
    top, _ = grid_sup(pulls, epsilon)
    low, high = worst_case(epsilon, pulls, rtol=1e-3)
    assert high >= top
    assert low <= high <= low * (1 + 1e-3) * (1 + 1e-7)
    assert high <= top * 1.01  # the grid's max is within 1 % of the sup here


def test_the_certificate_refuses_a_target_below_the_sup() -> None:
    """certifies() says no for a target just below the grid's max (a sup it could not bound
    below it), yes a little above the sup's certified bound."""
    top, _ = grid_sup(41, 0.25)
    assert not certifies(0.25, 41, top * (1 - 1e-6))
    assert certifies(0.25, 41, worst_case(0.25, 41)[1] * 1.001)
    assert probed(0.25, 41) <= top * (1 + 1e-9)


@pytest.mark.parametrize(
    ("epsilon", "arms", "want"),
    [(0.25, 2, 13), (0.25, 6, 33), (0.25, 10, 41), (0.5, 2, 4), (0.1, 10, 261)],
)
def test_the_exact_t_is_certified_and_the_smallest(epsilon: float, arms: int, want: int) -> None:
    """The issue's figures (eps = 0.25, eta = 0.1, K = 2 / 6 / 10: 13 / 33 / 41 against the
    sub-Gaussian 37 / 63 / 72) and two more: the T chosen is certified, below the sub-Gaussian
    one, and T - 1 is refuted (its sup provably exceeds eta / (K - 1))."""
    eta = 0.1
    target = eta / (arms - 1)
    pulls = samples_per_arm(epsilon, eta, arms, None, bernoulli=True)
    assert pulls == want
    assert pulls < samples_per_arm(epsilon, eta, arms, None)
    assert certifies(epsilon, pulls, target)
    assert worst_case(epsilon, pulls - 1, target=target)[0] > target


def test_bernoulli_rewards_take_no_sigma() -> None:
    with pytest.raises(ParameterError, match="sigma"):
        samples_per_arm(0.25, 0.1, 2, 0.5, bernoulli=True)


@pytest.mark.parametrize(("epsilon", "arms"), [(0.05, 10), (0.05, 100), (0.1, 100)])
def test_the_search_is_quick(epsilon: float, arms: int) -> None:
    """The coordinator computes T when an experiment is created: well under a second of CPU for
    eps >= 0.05 and K <= 100 (measured about 0.2 s; 1.5 s allowed for a slower machine)."""
    start = time.process_time()
    samples_per_arm(epsilon, 0.07, arms, None, bernoulli=True)  # eta 0.07: not cached elsewhere
    assert time.process_time() - start < 1.5


def wrong_rate(pulls: int, means: tuple[float, ...], runs: int, seed: int) -> int:
    """Runs of FixedBudget itself (every arm each activation) on Bernoulli arms: how many end on
    arm 1 (the bad arm; arm 0 is the best)."""
    rng = np.random.default_rng(seed)
    params = LocalParams(epsilon=0.25, confidence=0.1, every_arm=True, pulls=pulls)
    mu = np.asarray(means)
    wrong = 0
    for _ in range(runs):
        run = FixedBudget(len(means), params, rng)
        while not run.done:
            arms = run.select()
            run.observe(arms, (rng.random(len(arms)) < mu[arms]).astype(float))
        wrong += run.active == [1]
    return wrong


def test_the_real_run_errs_within_its_budget_and_t_minus_3_does_not() -> None:
    """eps = 0.25, eta = 0.1, K = 2: T = 13. On the worst-case means (the grid's argmax mu for b,
    mu + eps for the best arm), 20,000 runs of FixedBudget at T end on b at a rate that a one-sided
    exact binomial test does not find above eta (p > 1e-6), and at T - 3 = 10 at a rate it finds
    above eta (p < 1e-6): the test has the power to see a T too small by 3."""
    eps, eta = 0.25, 0.1
    pulls = samples_per_arm(eps, eta, 2, None, bernoulli=True)
    _, mu = grid_sup(pulls, eps)
    means = (mu + eps, mu)
    runs = 20_000
    at_t = wrong_rate(pulls, means, runs, seed=33)
    assert stats.binomtest(at_t, runs, eta, alternative="greater").pvalue > 1e-6, at_t / runs
    fewer = wrong_rate(pulls - 3, means, runs, seed=34)
    assert stats.binomtest(fewer, runs, eta, alternative="greater").pvalue < 1e-6, fewer / runs


def test_simulate_declares_bernoulli_arms_unless_told_bounded() -> None:
    """`dexp simulate --algorithm cde` on Bernoulli arms plays the exact T (the environment's
    rewards are 0 or 1); --declare bounded plays the sub-Gaussian one; a family that is neither
    exits 2 with one line."""
    from typer.testing import CliRunner

    from dexp.cli import app

    base = ["simulate", "--algorithm", "cde", "--agents", "16", "--trials", "1", "--json"]
    runner = CliRunner()
    told = json.loads(runner.invoke(app, base).stdout)["config"]
    bounded = json.loads(runner.invoke(app, [*base, "--declare", "bounded"]).stdout)["config"]
    assert told["declared_rewards"] == "bernoulli" and bounded["declared_rewards"] is None
    assert told["pulls_per_arm"] == samples_per_arm(0.25, 0.1, 10, None, bernoulli=True) == 41
    assert bounded["pulls_per_arm"] == samples_per_arm(0.25, 0.1, 10, None) == 72
    wrong = runner.invoke(app, [*base, "--declare", "gaussian"])
    assert wrong.exit_code == 2 and "declare='gaussian' is invalid" in wrong.stderr

"""The information-theoretic lower bound (common/lower_bound.py, docs/LOWER_BOUND.md): its known
closed form, the simpler bound it contains, and a delta-correct algorithm it must stay below."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import linprog

from common.environments import PROBLEMS, Environment
from common.errors import ParameterError
from common.lower_bound import (
    alternatives,
    bernoulli_kl,
    binary_kl,
    characteristic_time,
    dual_point,
    lower_bound,
    single_arm_bound,
)
from common.subroutines.fixed_budget import samples_per_arm


@pytest.mark.parametrize(("gap", "epsilon", "sigma"), [(0.5, 0.1, 1.0), (0.3, 0.25, 0.5)])
def test_two_gaussian_arms_reach_the_closed_form_from_below(
    gap: float, epsilon: float, sigma: float
) -> None:
    """T* = 8 sigma^2 / (gap + eps)^2 for two Gaussian arms: the program is a relaxation, so at
    most that, and its grid brings it within 0.1%."""
    env = Environment((1.0, 1.0 - gap), rewards="gaussian", sigma=sigma)
    exact = 8.0 * sigma**2 / (gap + epsilon) ** 2 * binary_kl(0.05)
    bound = lower_bound(env, epsilon, 0.05).pulls
    assert exact * 0.999 <= bound <= exact * (1.0 + 1e-9)


@pytest.mark.parametrize("name", ["feraud-1", "spread-20", "gauss-8", "rio-2"])
def test_the_program_is_never_below_the_one_arm_bound(name: str) -> None:
    env = PROBLEMS[name].environment
    bound = lower_bound(env, 0.25, 0.05)
    assert bound.pulls >= single_arm_bound(env, 0.25, 0.05) * (1.0 - 1e-9)
    assert bound.pulls > 0


def test_the_dual_point_summed_is_feasible_and_optimal() -> None:
    """Weak duality needs A^T z <= 1 exactly as computed (a larger z would overstate the bound);
    the primal optimum, solved on its own, equals its sum (the bound is not loosened either)."""
    env = PROBLEMS["feraud-1"].environment
    matrix = alternatives(env, 0.25)
    z = dual_point(matrix)
    assert np.all(z >= 0.0)
    assert np.all(matrix.T @ z <= 1.0)
    primal = linprog(np.ones(env.n_arms), A_ub=-matrix, b_ub=-np.ones(len(matrix)), method="highs")
    assert z.sum() == pytest.approx(primal.fun, rel=1e-6)
    assert characteristic_time(matrix) == lower_bound(env, 0.25, 0.05).characteristic_time


def test_a_delta_correct_algorithm_spends_at_least_the_bound() -> None:
    """The fixed-budget run with confidence delta is delta-correct on every instance (Hoeffding on
    each comparison): on any instance its 2T pulls are at least 4 times the bound (4 log(1/delta)
    >= 4 kl(delta, 1 - delta), the bound at its largest when the gap is just above eps)."""
    rng = np.random.default_rng(7)
    delta = 0.05
    for _ in range(40):
        epsilon = float(rng.uniform(0.05, 0.4))
        sigma = float(rng.uniform(0.2, 2.0))
        gap = float(rng.uniform(0.0, 1.5))
        env = Environment((0.0, -gap), rewards="gaussian", sigma=sigma)
        cost = 2 * samples_per_arm(epsilon, delta, 2, sigma)
        assert cost >= 4.0 * lower_bound(env, epsilon, delta).pulls


def test_nothing_to_find_costs_nothing_and_a_smaller_delta_costs_more() -> None:
    near = Environment((0.5, 0.45, 0.4))
    assert lower_bound(near, 0.25, 0.05).pulls == 0.0
    assert math.isinf(lower_bound(near, 0.25, 0.05).ratio(100.0))
    env = PROBLEMS["feraud-1"].environment
    assert lower_bound(env, 0.25, 0.01).pulls > lower_bound(env, 0.25, 0.05).pulls
    assert lower_bound(env, 0.1, 0.05).pulls > lower_bound(env, 0.25, 0.05).pulls


def test_every_arm_activations_pull_up_to_k_arms() -> None:
    env = PROBLEMS["feraud-1"].environment
    one, every = lower_bound(env, 0.25, 0.05), lower_bound(env, 0.25, 0.05, every_arm=True)
    assert every.activations == pytest.approx(one.activations / env.n_arms)
    assert one.activations == one.pulls


def test_bad_input_is_refused() -> None:
    with pytest.raises(ParameterError, match="delta"):
        lower_bound(PROBLEMS["feraud-1"].environment, 0.25, 0.5)
    with pytest.raises(ParameterError, match="drift"):
        lower_bound(PROBLEMS["feraud-3"].environment, 0.25, 0.05)
    assert bernoulli_kl(0.3, 0.3) == 0.0
    assert math.isinf(bernoulli_kl(0.3, 1.0))
    assert bernoulli_kl(0.1, 0.9) == pytest.approx(0.8 * math.log(9.0))

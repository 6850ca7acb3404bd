"""The information-theoretic lower bound on activations for eps-best arm identification
(docs/LOWER_BOUND.md proves it).

What it bounds. Any algorithm that, on every instance with the same kind of rewards (Bernoulli;
Gaussian with the same sigma), ends with a wrong outcome (an arm that is not eps-optimal named; at a
tie, a candidate that is not) with probability at most delta, and on this instance ends with a right
one with probability at least 1 - delta, makes in expectation at least `pulls` pulls on this
instance, all agents together. The agents, their activations and their messages can be simulated
by one player that sees every reward, so a decentralized algorithm is one centralized strategy and
the centralized bound holds for it; an activation pulls at most one arm (`every_arm`: at most K),
so `activations` = `pulls` (pulls / K) bounds the activations as dexp counts them.

How. The change of measure of Kaufmann, Cappe and Garivier (JMLR 2016, Lemma 1): for an
alternative instance lambda in which every eps-optimal arm of mu is not eps-optimal,
sum_a E[N_a] KL(mu_a, lambda_a) >= kl(delta, 1 - delta). Each alternative here raises one arm c
that is not eps-optimal to a level y and lowers every eps-optimal arm of mu above y - eps to
y - eps; the grid of (c, y) makes a linear program, min sum_a n_a subject to these constraints, a
relaxation of Garivier and Kaufmann's characteristic time T*(mu). Its value is certified by a
feasible point of its dual (weak duality), made exactly feasible by scaling: whatever the solver
returns, the number is a valid lower bound, at most T*(mu) kl(delta, 1 - delta).

Pure arithmetic (scipy's linear programming): no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from common.environments import Environment
from common.errors import ParameterError

GRID = 64  # levels y per challenger arm (a finer grid only raises the bound towards T*)


def bernoulli_kl(p: float, q: float) -> float:
    """KL(Ber(p), Ber(q)); inf when q is 0 or 1 and p is not."""
    if not (0.0 <= p <= 1.0 and 0.0 <= q <= 1.0):
        raise ValueError(f"Bernoulli means must be in [0, 1], got {p}, {q}")
    total = 0.0
    for a, b in ((p, q), (1.0 - p, 1.0 - q)):
        if a > 0.0:
            if b <= 0.0:
                return math.inf
            total += a * math.log(a / b)
    return max(total, 0.0)


def binary_kl(delta: float) -> float:
    """kl(delta, 1 - delta) = (1 - 2 delta) log((1 - delta) / delta): the information a test
    that is right with probability 1 - delta under both instances needs."""
    if not 0.0 < delta < 0.5:
        raise ParameterError("delta", delta, "the lower bound needs delta in (0, 1/2)")
    return (1.0 - 2.0 * delta) * math.log((1.0 - delta) / delta)


def reward_kl(env: Environment, mean: float, other: float) -> float:
    """KL between one arm's reward distributions at two means: Bernoulli, or Gaussian with the
    environment's sigma. inf where the alternative leaves the model (a Bernoulli mean at 0 or 1,
    where the two laws are not mutually absolutely continuous, as the change of measure needs)."""
    if not env.bounded:
        return (mean - other) ** 2 / (2.0 * env.sigma**2)
    if mean == other:
        return 0.0
    if not (0.0 < mean < 1.0 and 0.0 < other < 1.0):
        return math.inf
    return bernoulli_kl(mean, other)


@dataclass(frozen=True)
class LowerBound:
    """pulls: the bound on E[pulls], all agents together; activations: on E[activations] (pulls,
    or pulls / K when an activation pulls every arm of the local set); characteristic_time: the
    relaxation's value, at most T*(mu) (pulls = characteristic_time kl(delta, 1 - delta));
    optimal_arms: the eps-optimal arms of mu; alternatives: the constraints used."""

    pulls: float
    activations: float
    characteristic_time: float
    information: float  # kl(delta, 1 - delta)
    optimal_arms: tuple[int, ...]
    alternatives: int
    every_arm: bool = False

    def ratio(self, activations: float) -> float:
        """An algorithm's activations over the bound (inf when the bound is 0: nothing to find)."""
        return activations / self.activations if self.activations > 0 else math.inf

    def to_json(self) -> dict[str, object]:
        return {
            "activations": self.activations,
            "pulls": self.pulls,
            "characteristic_time": self.characteristic_time,
            "kl_delta": self.information,
            "eps_optimal_arms": list(self.optimal_arms),
            "alternatives": self.alternatives,
            "bounds": "expected activations of all agents together, for any algorithm that is "
            "wrong with probability at most delta on every instance (docs/LOWER_BOUND.md)",
        }


def alternatives(env: Environment, epsilon: float, grid: int = GRID) -> np.ndarray:
    """The constraint matrix: one row per alternative (c, y), entry a = KL(mu_a, lambda_a). Raise
    c (not eps-optimal) to y in [mu_c, mu* + eps], lower each eps-optimal arm of mu whose mean is
    at least y - eps to y - eps (just below, in the limit): every eps-optimal arm of mu is then
    eps below lambda_c, so not eps-optimal. Rows with an infinite entry are left out (fewer
    constraints: still a valid bound)."""
    mu = env.means_at(0)
    k = mu.size
    top = float(mu.max())
    optimal = mu >= top - epsilon
    rows = []
    for c in np.flatnonzero(~optimal):
        for y in np.linspace(float(mu[c]), top + epsilon, grid):
            row = np.zeros(k)
            row[c] = reward_kl(env, float(mu[c]), float(y))
            for b in np.flatnonzero(optimal & (mu >= y - epsilon)):
                row[b] = reward_kl(env, float(mu[b]), float(y) - epsilon)
            if np.all(np.isfinite(row)) and row.any():
                rows.append(row)
    return np.array(rows).reshape(len(rows), k)


def dual_point(constraints: np.ndarray) -> np.ndarray:
    """A z >= 0 with constraints.T @ z <= 1 as computed (the dual of min sum_a n_a subject to
    constraints @ n >= 1, n >= 0): the solver's optimum, scaled down until it is feasible, so that
    its sum is a lower bound (weak duality) whatever the solver's accuracy."""
    j, k = constraints.shape
    if j == 0:
        return np.zeros(0)
    solution = linprog(-np.ones(j), A_ub=constraints.T, b_ub=np.ones(k), method="highs")
    if solution.status != 0:  # an unbounded dual: some alternative costs nothing, T* is infinite
        raise ParameterError("means", None, f"the lower bound's program failed: {solution.message}")
    z = np.clip(solution.x, 0.0, None)
    while (load := float((constraints.T @ z).max())) > 1.0:
        z = z / load * (1.0 - 1e-15)
    return z


def characteristic_time(constraints: np.ndarray) -> float:
    """A lower bound on min sum_a n_a subject to constraints @ n >= 1, n >= 0: the sum of a
    feasible dual point."""
    return float(dual_point(constraints).sum())


def lower_bound(
    env: Environment, epsilon: float, delta: float, every_arm: bool = False, grid: int = GRID
) -> LowerBound:
    """The bound for this instance (its means at t = 0; drifting rewards are refused: the bound
    is for fixed means)."""
    if env.drift and any(env.drift):
        raise ParameterError("drift", env.drift, "the lower bound is for rewards with fixed means")
    if not epsilon >= 0.0:
        raise ParameterError("epsilon", epsilon, "must be >= 0")
    information = binary_kl(delta)
    matrix = alternatives(env, epsilon, grid)
    time = characteristic_time(matrix)
    pulls = time * information
    mu = env.means_at(0)
    return LowerBound(
        pulls=pulls,
        activations=pulls / env.n_arms if every_arm else pulls,
        characteristic_time=time,
        information=information,
        optimal_arms=tuple(int(a) for a in np.flatnonzero(mu >= mu.max() - epsilon)),
        alternatives=matrix.shape[0],
        every_arm=every_arm,
    )


def single_arm_bound(env: Environment, epsilon: float, delta: float) -> float:
    """The simpler bound that moves one arm at a time (each E[N_a] >= kl / KL alone, summed):
    raise each arm that is not eps-optimal to mu* + eps and, when one arm alone is eps-optimal,
    lower it to the second mean minus eps. `lower_bound` uses these alternatives among others,
    so it is never below this."""
    mu = env.means_at(0)
    top = float(mu.max())
    optimal = np.flatnonzero(mu >= top - epsilon)
    total = 0.0
    for c in np.flatnonzero(mu < top - epsilon):
        cost = reward_kl(env, float(mu[c]), top + epsilon)
        total += 1.0 / cost if cost > 0 else 0.0
    if optimal.size == 1:
        second = float(np.sort(mu)[-2])
        cost = reward_kl(env, top, second - epsilon)
        total += 1.0 / cost if cost > 0 else 0.0
    return total * binary_kl(delta)

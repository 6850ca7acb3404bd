"""CDE's local run: every arm played the same fixed number of times, then the empirical best.

The budget depends on public parameters only (eps, the local error bound eta, K and the reward
model), never on the rewards: the run ends, and the agent reports, after the same number of
activations whatever it saw, so the report's timing tells nothing about its content
(docs/CDE.md, section 1). An experiment publishes it (`pulls_per_arm`, computed by the
coordinator with `samples_per_arm`), and the agents use the published value (LocalParams.pulls):
the SDKs, in any language or version, play the same T as the coordinator certified.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from common.errors import ParameterError
from common.subroutines.base import ArmSelection
from common.subroutines.bernoulli_budget import bernoulli_samples_per_arm


def samples_per_arm(
    epsilon: float, eta: float, n_arms: int, sigma: float | None, bernoulli: bool = False
) -> int:
    """T, the pulls per arm after which the empirical best is not eps-optimal with probability at
    most eta: a given arm b with gap Delta_b > eps is the empirical best with probability at most
    eta / (K - 1), so all of them at most eta. Sub-Gaussian rewards (sigma) and rewards in
    [0, 1]: b beats the best arm's empirical mean with probability at most
    exp(-T Delta_b^2 / (4 s^2)), s = sigma, or 1/2 (Hoeffding's lemma). Rewards declared
    Bernoulli (every reward 0 or 1): the smallest T the exact binomial computation certifies
    (common.subroutines.bernoulli_budget), at most the former, about half of it."""
    scale = 1.0 if sigma is None else 4.0 * sigma * sigma
    pulls = max(1, math.ceil(scale * math.log((n_arms - 1) / eta) / (epsilon * epsilon) - 1e-9))
    if not bernoulli:
        return pulls
    if sigma is not None:
        raise ParameterError("sigma", sigma, "Bernoulli rewards are 0 or 1: no sigma")
    return bernoulli_samples_per_arm(float(epsilon), float(eta), int(n_arms), pulls)


def wrong_arm_bound(epsilon: float, samples: int, sigma: float | None) -> float:
    """The bound on P(the empirical best is one given arm b) for any b with gap > eps."""
    scale = 1.0 if sigma is None else 4.0 * sigma * sigma
    return math.exp(-samples * epsilon * epsilon / scale)


class FixedBudget(ArmSelection):
    """Round-robin over the K arms, T pulls each (T from `samples_per_arm` with the run's
    confidence as eta), then every arm but the empirical best leaves at once (ties broken
    uniformly at random)."""

    name = "fixed-budget"
    summary = (
        "T pulls per arm in turn (T from eps and eta, not from the rewards), then the empirical "
        "best; CDE's local run"
    )
    reference = "uniform allocation, Hoeffding's bound on each pairwise comparison"
    selectable = False

    @property
    def budget(self) -> int:
        """T, the pulls per arm of this run: the experiment's (LocalParams.pulls), else the
        sub-Gaussian one from the run's parameters."""
        if self.params.pulls is not None:
            return self.params.pulls
        return samples_per_arm(
            self.params.epsilon, self.params.confidence, self.initial_arms, self.params.sigma
        )

    def _restart(self) -> None:
        self._next = 0

    def select(self) -> list[int]:
        if self.done:
            return []
        if self.params.every_arm:
            return list(self.active)
        return [self.active[self._next % len(self.active)]]

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        self._record(arms, rewards)
        self._next += len(arms) if not self.params.every_arm else 0
        if self.done or min(self.counts[a] for a in self.active) < self.budget:
            return []
        mu = self.means()
        top = max(mu[a] for a in self.active)
        best = [a for a in self.active if mu[a] == top]
        return self._keep_only(int(self.rng.choice(best)) if len(best) > 1 else best[0])

    def _extra_state(self) -> dict[str, int]:
        return {"next": self._next}

    def _load_extra(self, state: dict[str, object]) -> None:
        self._next = int(state.get("next", 0))  # type: ignore[call-overload]

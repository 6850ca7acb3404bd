"""Successive Elimination (Even-Dar et al. 2006) and its randomized round-robin variants SER3/SER4.

A round ends when every arm of the local set has the same number of samples r (> the last round
checked). Then: eliminate k when max_l mu_l - mu_k >= 2 a_r; and once a_r <= eps/2, keep the
empirical best and eliminate every other arm (the eps-stop). A round whose end is reached by a
`discard` rather than a pull is not checked: checks are opportunities, and skipping one keeps the
union bound valid. Arms are pulled least-sampled first, ties broken by the round order (index order
for SE, a fresh random permutation every round for SER3/SER4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from common.subroutines.base import ArmSelection
from common.subroutines.radius import elimination_radius


class SuccessiveElimination(ArmSelection):
    name = "se"
    summary = (
        "successive elimination: round robin over the local set, Hoeffding (or sub-Gaussian) "
        "radii union-bounded over arms and rounds, eps-stop when the radius is below eps/2"
    )
    reference = "Even-Dar, Mannor and Mansour, JMLR 2006"
    shuffle = False

    def _restart(self) -> None:
        self.checked_round = 0
        self._new_order()

    def _new_order(self) -> None:
        if self.shuffle:
            self.order = self.rng.permutation(self.n_arms).astype(np.int64)
        else:
            self.order = np.arange(self.n_arms, dtype=np.int64)

    def select(self) -> list[int]:
        if self.done:
            return []
        if self.params.every_arm:
            return list(self.active)
        least = min(int(self.counts[a]) for a in self.active)
        return [
            min((a for a in self.active if self.counts[a] == least), key=lambda a: self.order[a])
        ]

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        self._record(arms, rewards)
        counts = {int(self.counts[a]) for a in self.active}
        if len(counts) != 1:
            return []
        rounds = counts.pop()
        if rounds <= self.checked_round:
            return []
        self.checked_round = rounds
        out = self._check(rounds)
        self._new_order()
        return out

    def radius(self, rounds: int) -> float:
        return elimination_radius(
            rounds, self.initial_arms, self.params.confidence, self.params.sigma
        )

    def _check(self, rounds: int) -> list[int]:
        radius = self.radius(rounds)
        mu = self.means()
        best = max(mu[a] for a in self.active)
        out = self._eliminate([a for a in self.active if best - mu[a] >= 2.0 * radius])
        if radius <= self.params.epsilon / 2.0 and len(self.active) > 1:
            out += self._keep_only(self._empirical_best())
        return sorted(out)

    def _extra_state(self) -> dict[str, Any]:
        return {"checked_round": self.checked_round, "order": self.order.tolist()}

    def _load_extra(self, state: dict[str, Any]) -> None:
        self.checked_round = int(state["checked_round"])
        self.order = np.asarray(state["order"], dtype=np.int64)


class SER3(SuccessiveElimination):
    """SE with the round-robin order reshuffled every round (Allesiardo et al. 2017)."""

    name = "ser3"
    shuffle = True
    summary = "SE whose round-robin order is drawn again every round (the papers' default)"
    reference = "Allesiardo, Feraud and Maillard, IJDSA 2017"


class SER4(SER3):
    """SER3 plus, at each step, a reset with probability phi (statistics forgotten, local set := K).

    The reset is drawn by the agent (`wants_reset`) because it also needs the global set, and, in
    DSER4, resets the whole experiment.
    """

    name = "ser4"
    summary = (
        "SER3 that forgets its statistics with probability phi at each step (DSER4: the reset "
        "resets the experiment), for rewards that drift"
    )
    reference = "Allesiardo, Feraud and Maillard, IJDSA 2017"

    def wants_reset(self) -> bool:
        return self.params.phi > 0 and bool(self.rng.random() < self.params.phi)

"""Median Elimination (Even-Dar et al. 2002): rounds of fixed size, the lower half leaves each round.

Round l samples every arm n_l = (4 / eps_l^2) log(3 / delta_l) times with fresh statistics; it keeps
the ceil(|S|/2) empirically best arms. eps_1 = eps/4, delta_1 = conf/2, then eps *= 3/4, delta /= 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.subroutines.base import ArmSelection
from common.subroutines.radius import median_elimination_samples


class MedianElimination(ArmSelection):
    name = "me"
    summary = (
        "median elimination: rounds of (4 / eps_l^2) log(3 / delta_l) samples per arm, the lower "
        "half dropped each round"
    )
    reference = "Even-Dar, Mannor and Mansour, COLT 2002"

    def _restart(self) -> None:
        self.round_epsilon = self.params.epsilon / 4.0
        self.round_delta = self.params.confidence / 2.0
        self.samples = median_elimination_samples(
            self.round_epsilon, self.round_delta, self.params.sigma
        )

    def select(self) -> list[int]:
        if self.done:
            return []
        pending = [a for a in self.active if self.counts[a] < self.samples]
        if self.params.every_arm:
            return pending
        least = min(int(self.counts[a]) for a in pending)
        return [next(a for a in pending if self.counts[a] == least)]

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        self._record(arms, rewards)
        return self._end_round_if_complete()

    def _after_discard(self) -> list[int]:
        return self._end_round_if_complete()

    def _end_round_if_complete(self) -> list[int]:
        if self.done or any(self.counts[a] < self.samples for a in self.active):
            return []
        mu = self.means()
        ranked = sorted(self.active, key=lambda a: (-mu[a], a))
        out = self._eliminate(ranked[math.ceil(len(ranked) / 2) :])
        self.counts[:] = 0
        self.sums[:] = 0.0
        self.round_epsilon *= 0.75
        self.round_delta /= 2.0
        self.samples = median_elimination_samples(
            self.round_epsilon, self.round_delta, self.params.sigma
        )
        return out

    def _extra_state(self) -> dict[str, Any]:
        return {
            "round_epsilon": self.round_epsilon,
            "round_delta": self.round_delta,
            "samples": self.samples,
        }

    def _load_extra(self, state: dict[str, Any]) -> None:
        self.round_epsilon = float(state["round_epsilon"])
        self.round_delta = float(state["round_delta"])
        self.samples = int(state["samples"])

"""DP Successive Elimination in epochs (Sajed & Sheffet 2019), DP-MASE's local subroutine.

Epoch e lasts R(e) rounds (every arm of the local set sampled once per round); at its end the means
get Laplace(1 / (eps_dp R(e))) noise, arm k leaves when max_l mu~_l - mu~_k > 2 (h + c), and the
epoch's samples are forgotten: each reward is used once, which makes the votes eps_dp-DP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from common.errors import ParameterError
from common.subroutines.base import ArmSelection
from common.subroutines.radius import dp_elimination_gap, dp_epoch_length


class DPSuccessiveElimination(ArmSelection):
    name = "dp-se"
    rewards = ("bounded",)
    summary = (
        "DP successive elimination in epochs: Laplace noise on each epoch's means, each reward "
        "used once (DP-MASE's own subroutine)"
    )
    reference = "Sajed and Sheffet, ICML 2019; Rio et al., ICML 2023"
    selectable = False

    def _restart(self) -> None:
        if self.params.sigma is not None:
            raise ParameterError("rewards", "gaussian", "DP-MASE needs rewards in [0, 1]")
        self.epoch = 1
        self._start_epoch()

    def _start_epoch(self) -> None:
        self.epoch_arms = len(self.active)
        self.epoch_rounds = dp_epoch_length(
            self.epoch, self.epoch_arms, self.params.confidence, self.params.dp_epsilon
        )
        self.counts[:] = 0
        self.sums[:] = 0.0

    def select(self) -> list[int]:
        if self.done:
            return []
        if self.params.every_arm:
            return list(self.active)
        least = min(int(self.counts[a]) for a in self.active)
        return [next(a for a in self.active if self.counts[a] == least)]

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        self._record(arms, rewards)
        return self._end_epoch_if_complete()

    def _after_discard(self) -> list[int]:
        return self._end_epoch_if_complete()

    def noise_scale(self) -> float:
        return 1.0 / (self.params.dp_epsilon * self.epoch_rounds)

    def _end_epoch_if_complete(self) -> list[int]:
        if self.done or any(self.counts[a] < self.epoch_rounds for a in self.active):
            return []
        arms = np.asarray(self.active)
        noisy = self.sums[arms] / self.epoch_rounds + self.rng.laplace(
            0.0, self.noise_scale(), size=len(arms)
        )
        gap = dp_elimination_gap(
            self.epoch,
            self.epoch_rounds,
            self.epoch_arms,
            self.params.confidence,
            self.params.dp_epsilon,
        )
        top = noisy.max()
        out = self._eliminate(int(a) for a, mu in zip(arms, noisy, strict=True) if top - mu > gap)
        self.epoch += 1
        self._start_epoch()
        return out

    def _extra_state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "epoch_arms": self.epoch_arms,
            "epoch_rounds": self.epoch_rounds,
        }

    def _load_extra(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.epoch_arms = int(state["epoch_arms"])
        self.epoch_rounds = int(state["epoch_rounds"])

"""LUCB1 (Kalyanakrishnan et al. 2012), the explore-then-commit subroutine (UGapEc-style).

After one sample of every arm, each decision compares the empirical best h with the challenger l of
highest upper bound; it stops when UCB_l - LCB_h < eps and then eliminates every arm but h. Otherwise
it plays h and l (one per activation, or both in one activation in the every-arm model). t in the
radius is the number of samples since the (re)start. Keeping an h that is not eps-optimal needs
the best arm's upper bound below its mean or h's lower bound above its own: one side per arm,
which bounds the local failure by 0.87 conf (`bounds.explore_commit_failure`, docs/SUBROUTINES.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from common.subroutines.base import ArmSelection
from common.subroutines.radius import lucb_radius


class LUCB(ArmSelection):
    name = "lucb"
    summary = (
        "LUCB1: sample the empirical best and its strongest challenger until their Hoeffding "
        "bounds overlap by less than eps, then keep the best (explore, then commit)"
    )
    reference = "Kalyanakrishnan, Tewari, Auer and Stone, ICML 2012"

    def _restart(self) -> None:
        self.queue: list[int] = []

    def select(self) -> list[int]:
        if self.done:
            return []
        unseen = [a for a in self.active if self.counts[a] == 0]
        if unseen:
            return unseen if self.params.every_arm else unseen[:1]
        return list(self.queue) if self.params.every_arm else self.queue[:1]

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        self._record(arms, rewards)
        self.queue = [a for a in self.queue if a not in arms]
        return self._decide()

    def _after_discard(self) -> list[int]:
        self.queue = [a for a in self.queue if a in self.active]
        return self._decide()

    def _decide(self) -> list[int]:
        if self.done or self.queue or any(self.counts[a] == 0 for a in self.active):
            return []
        time = max(1, int(self.counts.sum()))
        bounds = {a: self.interval(a, time) for a in self.active}
        return self._rule(bounds)

    def interval(self, arm: int, time: int) -> tuple[float, float]:
        """[L, U] for `arm` after `time` samples in all: LUCB1's Hoeffding radius."""
        radius = lucb_radius(
            int(self.counts[arm]),
            time,
            self.initial_arms,
            self.params.confidence,
            self.params.sigma,
        )
        mean = float(self.means()[arm])
        return mean - radius, mean + radius

    def _rule(self, bounds: dict[int, tuple[float, float]]) -> list[int]:
        """LUCB1: h the empirical best, l the other arm of highest U; stop when U_l - L_h < eps
        (keep h), else play h and l."""
        mu = self.means()
        best = max(self.active, key=lambda a: (mu[a], -a))
        challenger = max((a for a in self.active if a != best), key=lambda a: (bounds[a][1], -a))
        if bounds[challenger][1] - bounds[best][0] < self.params.epsilon:
            return self._keep_only(best)
        self.queue = [best, challenger]
        return []

    def _extra_state(self) -> dict[str, Any]:
        return {"queue": list(self.queue)}

    def _load_extra(self, state: dict[str, Any]) -> None:
        self.queue = [int(a) for a in state["queue"]]

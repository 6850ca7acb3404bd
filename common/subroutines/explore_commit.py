"""Explore-then-commit subroutines beyond LUCB1: UGapEc's rule, and LUCB1's rule on sharper bounds.

All keep LUCB1's shape (`common.subroutines.lucb`): one sample of every arm, then a decision
whenever the queue of arms to play is empty; at the stop every arm but the kept one is eliminated
(the agent votes against them). t is the number of samples since the (re)start. Why each bound
holds is in `common.subroutines.bounds` and docs/SUBROUTINES.md.
"""

from __future__ import annotations

import math

from common.errors import ParameterError
from common.subroutines.base import BOUNDED, SUB_GAUSSIAN
from common.subroutines.bounds import kl_interval, kl_lucb_level, stitched_radius
from common.subroutines.lucb import LUCB


class UGapEc(LUCB):
    """UGapEc (Gabillon, Ghavamzadeh and Lazaric, NIPS 2012) with m = 1, the DE paper's ETC rule.

    beta_k = sqrt(log(4 K (t - 1)^3 / conf) / (2 T_k)) (sub-Gaussian: sigma sqrt(2 log(.) / T_k)),
    U = mean + beta, L = mean - beta, B_k = max_{i != k} U_i - L_k, J = argmin B_k. Stop when
    B_J < eps and keep J: were J not eps-optimal, the best arm i* would have mu* <= U_i* < L_J +
    eps <= mu_J + eps, a contradiction, using only i*'s upper side and J's lower side (hence a
    local failure of at most 0.55 conf, `explore_commit_failure`). Otherwise u = argmax_{j != J}
    U_j and the one of u, J with the larger beta is played (both, in the every-arm model)."""

    name = "ugapec"
    rewards = (BOUNDED, SUB_GAUSSIAN)
    summary = (
        "UGapEc: find the arm J whose worst-case regret bound B_J is smallest; play the less "
        "known of J and its strongest challenger until B_J < eps, then keep J"
    )
    reference = "Gabillon, Ghavamzadeh and Lazaric, NIPS 2012"

    def beta(self, arm: int, time: int) -> float:
        log_term = math.log(
            4.0 * self.initial_arms * float(max(time - 1, 1)) ** 3 / self.params.confidence
        )
        pulls = int(self.counts[arm])
        if self.params.sigma is None:
            return math.sqrt(log_term / (2.0 * pulls))
        return self.params.sigma * math.sqrt(2.0 * log_term / pulls)

    def interval(self, arm: int, time: int) -> tuple[float, float]:
        beta = self.beta(arm, time)
        mean = float(self.means()[arm])
        return mean - beta, mean + beta

    def _rule(self, bounds: dict[int, tuple[float, float]]) -> list[int]:
        arms = self.active
        gaps = {k: max(bounds[i][1] for i in arms if i != k) - bounds[k][0] for k in arms}
        chosen = min(arms, key=lambda k: (gaps[k], k))
        if gaps[chosen] < self.params.epsilon:
            return self._keep_only(chosen)
        rival = max((j for j in arms if j != chosen), key=lambda j: (bounds[j][1], -j))
        if self.params.every_arm:
            self.queue = [chosen, rival]
        else:
            width = {a: bounds[a][1] - bounds[a][0] for a in (chosen, rival)}
            self.queue = [rival if width[rival] > width[chosen] else chosen]
        return []


class KLLUCB(LUCB):
    """KL-LUCB (Kaufmann and Kalyanakrishnan, COLT 2013): LUCB1's rule on Chernoff-KL intervals
    {q : T_a kl(mean_a, q) <= log(11 K t^1.1 / conf)}, for rewards in [0, 1] only. k1 = 11 is the
    smallest their correctness condition allows: a local failure of at most 0.96 conf, where
    their sample-complexity condition's k1 = 405.5 ran at 0.026 conf (`explore_commit_failure`)."""

    name = "kl-lucb"
    rewards = (BOUNDED,)
    summary = (
        "KL-LUCB: LUCB1's rule on Chernoff-KL intervals at the rate log(11 K t^1.1 / eta) "
        "(rewards in [0, 1])"
    )
    reference = "Kaufmann and Kalyanakrishnan, COLT 2013"

    def _restart(self) -> None:
        if self.params.sigma is not None:
            raise ParameterError(
                "rewards", "gaussian", "kl-lucb's KL bounds need rewards in [0, 1]"
            )
        super()._restart()

    def interval(self, arm: int, time: int) -> tuple[float, float]:
        level = kl_lucb_level(time, self.initial_arms, self.params.confidence)
        return kl_interval(float(self.means()[arm]), int(self.counts[arm]), level)


class StitchedLUCB(LUCB):
    """LUCB1's rule on Howard et al.'s stitched radius, anytime per arm (alpha = conf / (2 K) per
    side and arm): no union over time, so no t in the radius."""

    name = "stitched-lucb"
    rewards = (BOUNDED, SUB_GAUSSIAN)
    summary = (
        "LUCB1's rule on the stitched anytime radius (Howard et al.): log log n in place of "
        "LUCB1's log t^4"
    )
    reference = (
        "Howard, Ramdas, McAuliffe and Sekhon, Ann. Statist. 2021 (stitched boundary); "
        "Kalyanakrishnan et al. 2012 (LUCB1)"
    )

    def interval(self, arm: int, time: int) -> tuple[float, float]:
        radius = stitched_radius(
            int(self.counts[arm]), self.initial_arms, self.params.confidence, self.params.sigma
        )
        mean = float(self.means()[arm])
        return mean - radius, mean + radius

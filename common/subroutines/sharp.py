"""SER3 with confidence bounds sharper than Hoeffding's: KL intervals, Howard et al.'s stitching.

Both keep SER3's rounds (a fresh random round-robin order every round), its checks at the end of
each round r (every arm of the local set has r samples) and its rule that a round whose end is
reached by a `discard` is not checked. Only the confidence bounds, and so the rules built on them,
change (`common.subroutines.bounds` states why each bound holds).
"""

from __future__ import annotations

from common.errors import ParameterError
from common.subroutines.base import BOUNDED, SUB_GAUSSIAN
from common.subroutines.bounds import elimination_level, kl_interval, stitched_radius
from common.subroutines.successive import SER3


class KLSuccessiveElimination(SER3):
    """SER3 with Chernoff-KL intervals, for rewards in [0, 1] only.

    At the end of round r every arm a gets [L_a, U_a] = {q : r kl(mu_a, q) <= log(4 K r^2 / conf)}
    (K: the local set's size at the restart). Arm a leaves when U_a <= max_b L_b. Then, with h the
    empirical best, if max_{a != h} U_a - L_h < eps, h is kept and every other arm leaves.
    Validity: each side of each arm fails at round r with probability <= conf / (4 K r^2), a union
    over K arms, 2 sides and r >= 1 of conf pi^2 / 12 < conf. On the complementary event the best
    arm's U is >= every L (it is never eliminated) and the eps-stop keeps an arm h with
    mu_h >= L_h > U_a - eps >= mu_a - eps for every other a. By Pinsker the intervals are never
    wider than SE's Hoeffding radius at the same level, and much narrower for means near 0 or 1.
    """

    name = "kl-se"
    rewards = (BOUNDED,)
    summary = (
        "SER3 with Chernoff-KL intervals (rewards in [0, 1]): eliminate an arm whose upper bound "
        "is below the best lower bound, eps-stop when no other arm's upper bound is eps above the "
        "empirical best's lower bound"
    )
    reference = "Garivier and Cappe, COLT 2011 (KL bounds); Even-Dar et al. 2006 (elimination)"

    def _restart(self) -> None:
        if self.params.sigma is not None:
            raise ParameterError("rewards", "gaussian", "kl-se's KL bounds need rewards in [0, 1]")
        super()._restart()

    def level(self, rounds: int) -> float:
        """log(4 K r^2 / conf): each side of each arm's interval fails w.p. <= conf / (4 K r^2)."""
        return elimination_level(rounds, self.initial_arms, self.params.confidence)

    def intervals(self, rounds: int) -> dict[int, tuple[float, float]]:
        """[L_a, U_a] for every arm of the local set, each with `rounds` samples."""
        level = self.level(rounds)
        mu = self.means()
        return {a: kl_interval(float(mu[a]), rounds, level) for a in self.active}

    def _check(self, rounds: int) -> list[int]:
        bounds = self.intervals(rounds)
        top_lower = max(low for low, _ in bounds.values())
        # the arm with the largest L has U > L: it stays, so the set never empties
        out = self._eliminate([a for a in self.active if bounds[a][1] <= top_lower])
        if len(self.active) > 1:
            best = self._empirical_best()
            challenger = max(bounds[a][1] for a in self.active if a != best)
            if challenger - bounds[best][0] < self.params.epsilon:
                out += self._keep_only(best)
        return sorted(out)


class StitchedSuccessiveElimination(SER3):
    """SER3 with Howard et al.'s stitched radius, for rewards in [0, 1] or sigma-sub-Gaussian.

    The radius after r samples, 1.7 s sqrt((log log(2r) + 0.72 log(5.2 / alpha)) / r) with
    alpha = conf / (2 K) and s = 1/2 for [0, 1] (else sigma), holds for every r at once on each
    side of each arm with probability >= 1 - alpha: a union over 2 K events, none over rounds.
    SE's rules are unchanged: eliminate a when max_b mu_b - mu_a >= 2 radius, eps-stop once
    radius <= eps / 2. It is below SE's Hoeffding radius from r = 3 or 4 on (log log r against
    log r^2): about 0.75 of it at r = 100 and 0.67 at r = 1000 for K = 10, conf = 0.9.
    """

    name = "stitched-se"
    rewards = (BOUNDED, SUB_GAUSSIAN)
    summary = (
        "SER3 with Howard et al.'s anytime stitched radius (log log r instead of log r^2), "
        "union-bounded over arms only; SE's elimination and eps-stop rules"
    )
    reference = (
        "Howard, Ramdas, McAuliffe and Sekhon, Ann. Statist. 2021 (stitched boundary); "
        "Even-Dar et al. 2006"
    )

    def radius(self, rounds: int) -> float:
        return stitched_radius(rounds, self.initial_arms, self.params.confidence, self.params.sigma)

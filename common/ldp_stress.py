"""The LDP certificate under the order of activations that brings it nearest its bound.

`common.ldp.decide` certifies delta for every order of activations (docs/LDP.md, section 3), so
an adversary may choose the order. The one that spends the bound: two arms, the best one (0) sampled
first until its mean is known to the last digit, then the other (1), a little more than eps below,
alone, with a decision after each of its reports. Arm 0's interval is then a point, and a wrong
answer needs only arm 1's lower end to rise within eps of it: one side of one arm, the share
delta / K = delta / 2 of the union, on a boundary that leaves no slack of its own in the limit
(`common.subroutines.bounds.mixture_boundary`). Each run ends at its first decision that
identifies an arm or eliminates one; it is wrong if arm 0 leaves or arm 1 is the answer.

The reports are drawn in bulk with numpy and the stop is located on their cumulative sums; the
verdict at the stop, and the absence of any before it, are `decide`'s own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.ldp import Decision, Mechanism, bit_interval, decide, tuning_variance


@dataclass(frozen=True)
class Stress:
    k: int = 2
    delta: float = 0.1
    dp_epsilon: float = 1.0
    epsilon: float = 0.05
    best: float = 0.6  # arm 0's mean reward
    gap: float = 0.0505  # arm 1's mean is best - gap: more than eps below, not eps-optimal
    known: int = 10**9  # arm 0's reports before arm 1's first
    horizon: int = 20_000  # arm 1's reports at most per run


@dataclass(frozen=True)
class StressResult:
    runs: int
    wrong: int
    stopped: int  # runs that identified an arm or eliminated one within the horizon
    median_stop: float  # arm 1's reports at the stop, over the runs that stopped


def run(stress: Stress, runs: int, seed: int) -> StressResult:
    s = stress
    if s.k != 2:
        raise ValueError("the adversarial order is defined for two arms")
    mechanism = Mechanism(s.dp_epsilon)
    q, scale = 1.0 - mechanism.keep, mechanism.scale
    alpha = s.delta / s.k  # the decision's side (common.ldp.decide)
    tuning = tuning_variance(s.epsilon, mechanism, s.k, s.delta)
    n = np.arange(1, s.horizon + 1)
    radius = np.array([bit_interval(0, int(i), alpha, tuning, 0)[1] for i in n])
    m_best, m_other = q + scale * s.best, q + scale * (s.best - s.gap)
    margin = s.epsilon * scale  # eps in the bit scale
    rng = np.random.default_rng(seed)
    wrong = 0
    stops: list[int] = []
    for _ in range(runs):
        ones_best = int(rng.binomial(s.known, m_best))
        low_best, high_best = bit_interval(ones_best, s.known, alpha, tuning, 0)
        ones = np.cumsum(rng.random(s.horizon) < m_other)
        mean = ones / n
        low, high = mean - radius, mean + radius
        stop = (low >= high_best - margin) | (low_best >= high - margin) | (low > high_best)
        if not stop.any():
            continue
        i = int(np.argmax(stop))
        # a hair's difference in rounding could move the stop by one report: decide() is checked
        # before it and is the verdict at it
        if i > 0:
            before = _decide(s, ones_best, i, int(ones[i - 1]))
            if before.identified or before.eliminate:
                raise AssertionError(f"decide stopped before the located stop ({i} reports)")
        verdict = _decide(s, ones_best, i + 1, int(ones[i]))
        if not (verdict.identified or verdict.eliminate):
            raise AssertionError(f"decide did not stop at the located stop ({i + 1} reports)")
        wrong += (0 in verdict.eliminate) or (verdict.identified and verdict.leader == 1)
        stops.append(i + 1)
    return StressResult(runs, wrong, len(stops), float(np.median(stops)) if stops else 0.0)


def _decide(s: Stress, ones_best: int, reports: int, ones: int) -> Decision:
    return decide(
        [s.known, reports],
        [ones_best, ones],
        [0, 1],
        epsilon=s.epsilon,
        delta=s.delta,
        dp_epsilon=s.dp_epsilon,
    )

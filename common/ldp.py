"""LDP: one private report per visit; the coordinator learns from all of them (docs/LDP.md).

The papers' modes make each agent learn alone before the group learns anything, so their cost
grows with the fleet. Here no device learns: at an activation it plays an arm drawn from the
allocation the coordinator publishes, and sends one report, the arm and one privatized bit.

The mechanism (`Mechanism.privatize`, run on the device): a reward r in [0, 1] becomes a bit
b ~ Bernoulli(r) (a Bernoulli reward is its own bit), then y = b with probability
p = e^eps / (1 + e^eps), else 1 - b (randomized response). y's law is Bernoulli(q + (p - q) r)
with q = 1 - p, and the ratio of its two probabilities under any two rewards is at most
p / q = e^eps: one report is eps-locally private, whatever the reward. The arm does not depend on
the rewards (the allocation is public, the draw the device's own), so a device that sends at most
B reports is (B eps)-locally private with respect to its whole reward history.

The statistics (`decide`, run by the coordinator on the counts): for each arm, n reports and s
ones. The honest reports on an arm are i.i.d. Bernoulli(m) with m = q + (p - q) mu, whatever the
allocation and whichever device sends them, so a normal-mixture boundary (anytime, one side at a
time: `mixture_boundary`) bounds each side of each arm's mean at all times. f Byzantine devices
send at most f B reports in all: an interval is taken over every way of removing up to f B of an
arm's reports. Mapped to the reward scale, mu = (m - q) / (p - q):
- the decision's intervals, each side at delta / K: a wrong answer needs the best arm's upper
  side or another arm's lower side to fail, K sides in all (docs/LDP.md, section 3). An arm whose
  upper end is below another arm's lower end is not the best: it is eliminated. The leader (the
  highest mean) whose lower end is within eps of every other remaining arm's upper end is
  eps-optimal: the experiment is
  identified, with certified failure delta, for every N, every instance and every order of
  activations. Once the experiment holds as many devices as the coordinator admits and each has
  sent its B reports (`exhausted`), no more can come: the experiment is tied, the best arm among
  the arms still in the set on the same event;
- the estimates' intervals, each side at delta / (2K), hold together, both sides of every arm,
  with probability >= 1 - delta: what a team reads, and the lift between two arms.
The allocation is LUCB's pair (the leader and the arm with the highest upper end), mixed with a
uniform share over the remaining arms so that a stale allocation (a device reads it between
publications) still samples every candidate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from common.errors import ParameterError

DEFAULT_DP_EPSILON = 1.0
DEFAULT_REPORTS_PER_AGENT = 1
DEFAULT_EPSILON = 0.25  # the accuracy the estimates' boundaries are tuned for, when none is given
# The boundaries are made narrowest where an arm's radius (reward scale) is this times eps: about
# where an experiment decides (scripts/ldp_results.py measures the activations), and early enough
# that a wrong answer can spend its share of delta before the right one is certain
# (common/ldp_stress.py). Any value is valid: it is fixed before the reports.
TUNING_WIDTH = 2.0
EXPLORATION = 0.1  # the allocation's uniform share over the remaining arms
MAX_DP_EPSILON = 10.0  # beyond this a report is practically its reward: no privacy to speak of


def check_dp_epsilon(dp_epsilon: float) -> None:
    if not (isinstance(dp_epsilon, int | float) and 0.0 < dp_epsilon <= MAX_DP_EPSILON):
        raise ParameterError("dp_epsilon", dp_epsilon, f"must be in (0, {MAX_DP_EPSILON:g}]")


def check_reports_per_agent(reports: int) -> None:
    if isinstance(reports, bool) or not isinstance(reports, int) or reports < 1:
        raise ParameterError("reports_per_agent", reports, "must be an integer >= 1")


@dataclass(frozen=True)
class Mechanism:
    """Randomized response on a stochastically rounded reward: eps-locally private, 1 bit."""

    dp_epsilon: float

    def __post_init__(self) -> None:
        check_dp_epsilon(self.dp_epsilon)

    @property
    def keep(self) -> float:
        """p = e^eps / (1 + e^eps): the probability that the bit is sent as it is."""
        return 1.0 / (1.0 + math.exp(-self.dp_epsilon))

    @property
    def scale(self) -> float:
        """p - q = tanh(eps / 2): how much of a mean difference survives in the reports."""
        return math.tanh(self.dp_epsilon / 2.0)

    @property
    def overhead(self) -> float:
        """((e^eps + 1) / (e^eps - 1))^2: the factor on the samples a central algorithm needs."""
        return 1.0 / self.scale**2

    def privatize(self, reward: float, u_round: float, u_flip: float) -> int:
        """The report's bit for a reward in [0, 1], from two uniforms in [0, 1) that the caller
        draws (the device's own randomness): b = [u_round < reward], kept when u_flip < p."""
        if not 0.0 <= reward <= 1.0:
            raise ParameterError("reward", reward, "must be in [0, 1]")
        bit = 1 if u_round < reward else 0
        return bit if u_flip < self.keep else 1 - bit

    def to_reward_scale(self, bit_mean: float) -> float:
        """The unbiased estimate of the mean reward from a mean of report bits."""
        return (bit_mean - (1.0 - self.keep)) / self.scale


def exhausted(reports_total: int, agents: int, reports_per_agent: int, max_agents: int) -> bool:
    """No report can come any more: the experiment holds as many devices as it admits
    (`max_agents`, the coordinator's cap; 0: no cap, so another device can always enroll) and every
    one of them has sent its B reports. An experiment that has not identified its arm by then is
    tied. Without a cap it waits: one-visit devices enroll just before they report, so "every
    device enrolled so far has reported" holds between almost any two visits."""
    return 0 < max_agents <= agents and reports_total >= agents * reports_per_agent


def unit_reward(reward: float, low: float, high: float) -> float:
    """A reward clipped to the declared range [low, high] and mapped to [0, 1]: what a device
    privatizes when rewards are not in [0, 1] (Gaussian rewards: docs/LDP.md, section 4)."""
    return (min(max(reward, low), high) - low) / (high - low)


@dataclass(frozen=True)
class Estimate:
    """One arm: its reports and the mean reward with its interval (simultaneous, anytime)."""

    index: int
    reports: int
    mean: float | None  # None before its first report
    low: float
    high: float


@dataclass(frozen=True)
class Lift:
    """The leader against arm `vs`: the difference of their means and its interval."""

    vs: int
    mean: float | None
    low: float
    high: float


@dataclass(frozen=True)
class Decision:
    estimates: tuple[Estimate, ...]
    leader: int
    eliminate: tuple[int, ...]  # remaining arms that leave now
    identified: bool
    allocation: tuple[float, ...]  # over every arm; 0 on arms out of the set
    lift: tuple[Lift, ...]


def tuning_variance(epsilon: float, mechanism: Mechanism, n_arms: int, delta: float) -> float:
    """The variance (reports / 4) at which the boundaries are narrowest: where an arm's radius at
    Hoeffding's level log(K / delta) is TUNING_WIDTH x eps in the reward scale. It depends on the
    experiment's parameters only, never on its reports, as the proof requires."""
    radius = mechanism.scale * epsilon * TUNING_WIDTH
    reports = math.log(n_arms / delta) / (2.0 * radius * radius)
    return reports / 4.0


def bit_interval(
    ones: int, reports: int, alpha: float, tuning: float, corrupt: int
) -> tuple[float, float]:
    """The interval of an arm's report mean m, anytime: each side fails with probability at most
    `alpha` (`mixture_boundary`, reports are 1/2-sub-Gaussian, tuned at variance `tuning`),
    whatever up to `corrupt` of its reports are. The worst case removes `corrupt` reports, ones
    for the lower end and zeros for the upper (both ends move outwards as reports are removed)."""
    # Imported here (and in _radius): common.subroutines loads numpy, and the checks above serve
    # commands that only send a configuration to a coordinator (dexp experiments create) and start
    # without it.
    from common.subroutines.bounds import mixture_rho

    honest = reports - corrupt
    if honest < 1:
        return 0.0, 1.0
    radius = _radius(honest, alpha, mixture_rho(tuning, alpha))
    low = max(ones - corrupt, 0) / honest - radius
    high = min(ones, honest) / honest + radius
    return max(low, 0.0), min(high, 1.0)


@lru_cache(maxsize=65_536)
def _radius(honest: int, alpha: float, rho: float) -> float:
    from common.subroutines.bounds import mixture_boundary

    return mixture_boundary(honest / 4.0, rho, alpha) / honest


def _intervals(
    reports: Sequence[int],
    ones: Sequence[int],
    mechanism: Mechanism,
    alpha: float,
    tuning: float,
    corrupt: int,
) -> list[tuple[float | None, float, float]]:
    """(mean, low, high) per arm in the reward scale, each side at `alpha`."""
    q, scale = 1.0 - mechanism.keep, mechanism.scale
    out: list[tuple[float | None, float, float]] = []
    for n, s in zip(reports, ones, strict=True):
        lo, hi = bit_interval(s, n, alpha, tuning, corrupt)
        mean = None if n == 0 else _unit(mechanism.to_reward_scale(s / n))
        # Both ends clipped to [0, 1], where every mean lies: an interval of m entirely below q
        # (or above p: possible off the good event, or with reports beyond `corrupt`) becomes
        # [0, 0] (or [1, 1]) and never ends below its own lower end, which would remove every arm.
        out.append((mean, _unit((lo - q) / scale), _unit((hi - q) / scale)))
    return out


def estimates(
    reports: Sequence[int],
    ones: Sequence[int],
    mechanism: Mechanism,
    delta: float,
    corrupt: int = 0,
    epsilon: float = DEFAULT_EPSILON,
) -> tuple[Estimate, ...]:
    """Every arm's mean reward and interval; the intervals hold together, at all times, with
    probability >= 1 - delta (each side of each arm at delta / (2K); with at most `corrupt`
    reports from Byzantine devices)."""
    k = len(reports)
    tuning = tuning_variance(epsilon, mechanism, k, delta)
    rows = _intervals(reports, ones, mechanism, delta / (2 * k), tuning, corrupt)
    return tuple(
        Estimate(arm, n, mean, lo, hi)
        for arm, (n, (mean, lo, hi)) in enumerate(zip(reports, rows, strict=True))
    )


def _unit(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def _leader(candidates: Sequence[Estimate]) -> Estimate:
    """The highest estimated mean (arms without reports last), then the lowest index."""
    return max(candidates, key=lambda e: (e.mean is not None, e.mean or 0.0, -e.index))


def decide(
    reports: Sequence[int],
    ones: Sequence[int],
    remaining: Sequence[int],
    *,
    epsilon: float,
    delta: float,
    dp_epsilon: float,
    corrupt: int = 0,
) -> Decision:
    """The coordinator's rule on the counts of reports (n) and ones (s) per arm: the estimates,
    the arms that leave, whether the leader is identified, the allocation and the lift.
    `remaining` are the arms still in the set; `corrupt` = f B, what Byzantine devices can send."""
    mechanism = Mechanism(dp_epsilon)
    est = estimates(reports, ones, mechanism, delta, corrupt, epsilon)
    k = len(reports)
    tuning = tuning_variance(epsilon, mechanism, k, delta)
    # The decision's intervals: each side at delta / K (the proof needs one side per arm)
    sides = _intervals(reports, ones, mechanism, delta / k, tuning, corrupt)
    low = {a: sides[a][1] for a in remaining}
    high = {a: sides[a][2] for a in remaining}
    if not low:
        raise ParameterError("remaining", list(remaining), "at least one arm must remain")
    best_low = max(low.values())
    out = tuple(a for a in sorted(remaining) if high[a] < best_low)
    alive = [est[a] for a in sorted(remaining) if high[a] >= best_low]
    leader = _leader(alive)
    rivals = [e for e in alive if e.index != leader.index]
    identified = all(low[leader.index] >= high[e.index] - epsilon for e in rivals)
    allocation = [0.0] * len(est)
    if rivals:
        challenger = max(rivals, key=lambda e: (high[e.index], -e.reports, -e.index))
        for e in alive:
            allocation[e.index] += EXPLORATION / len(alive)
        allocation[leader.index] += (1.0 - EXPLORATION) / 2.0
        allocation[challenger.index] += (1.0 - EXPLORATION) / 2.0
    else:
        allocation[leader.index] = 1.0
    lift = tuple(
        Lift(
            e.index,
            None if leader.mean is None or e.mean is None else leader.mean - e.mean,
            leader.low - e.high,
            leader.high - e.low,
        )
        for e in est
        if e.index != leader.index
    )
    return Decision(est, leader.index, out, identified, tuple(allocation), lift)

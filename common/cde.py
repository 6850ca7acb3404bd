"""CDE, certified decentralized elimination: one randomized report per agent (docs/CDE.md).

Each agent plays every arm T times (T from eps and its local error bound eta: no timing leak,
`common.subroutines.fixed_budget`), takes its empirical best arm a, and sends ONE report: a with
probability p = e^e0 / (e^e0 + K - 1), each other arm with probability r = 1 / (e^e0 + K - 1)
(K-ary randomized response, Warner 1965). The coordinator accepts the first arm that M distinct
agents reported; the others leave at once. An agent reports at most once per experiment; the
threshold is chosen from N, the agents expected, but any number of them keeps the bound.

Proved in docs/CDE.md, and computed here:
- Privacy. The report's distribution changes by a factor of at most e^e0 when the agent's data
  change, and its time does not depend on them: the report is e0-locally differentially private
  with respect to the agent's answer, hence its rewards, so whatever any adversary believed before,
  its odds on any event about the agent's data are multiplied by at most e^e0 (`report_epsilon`,
  the figure shown as `certified_epsilon`; `posterior_bound`). A corollary for one prior: an
  adversary with a uniform prior over which arm is best names an eps-optimal arm of the agent
  with probability at most s e^e0 / (s e^e0 + K - s) (s eps-optimal arms; s = 1: `privacy`;
  `hit_rate_uniform_prior`). Another prior gives another hit rate (0.5 for a prior that puts 0.5
  on one arm, whatever the report), its odds still multiplied by at most e^e0.
- Correctness. A non-eps-optimal arm b is the local answer with probability at most
  eta / (K - 1), so it is reported with probability at most q_bad = r + (p - r) eta / (K - 1);
  the best arm, when it is the only eps-optimal one, with probability at least
  q_good = r + (p - r)(1 - eta). With at most f liars among N agents, a wrong answer needs a bad
  arm with M - f honest reports or the best arm short of M honest ones:
  failure <= (K - 1) P(Bin(n, q_bad) >= M - f) + P(Bin(n, q_good) < M)
  over the first n honest reports, for any n <= N - f: a report's time depends on activations
  only, so the first n honest reports are independent draws of one distribution whatever N is,
  and more agents never make the bound worse. The first term (a wrong arm accepted) holds for any
  instance; the second assumes the best arm is the only eps-optimal one and that n honest agents
  report.

Pure arithmetic and one draw: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from common.binomial import RELATIVE_MARGIN, binomial_tail
from common.errors import ParameterError

# P when none is asked for: the hit-rate bound under a uniform prior over which arm is best,
# equivalently e0 = log(P (K - 1) / (1 - P))
DEFAULT_PRIVACY = 0.6


def check_privacy(privacy: float, n_arms: int) -> float:
    """P, the hit-rate bound under a uniform prior over which arm is best, must lie strictly
    between 1/K (the report says nothing, e0 = 0, nothing can be decided) and 1 (no randomization:
    e0 infinite, no privacy)."""
    if not (isinstance(privacy, int | float) and 1.0 / n_arms < privacy < 1.0):
        raise ParameterError(
            "privacy",
            privacy,
            f"must be in (1/K, 1) = ({1.0 / n_arms:.4g}, 1) with {n_arms} arms: 1/K is a uniform "
            "guess, 1 is no privacy",
        )
    return float(privacy)


def report_odds(privacy: float, n_arms: int) -> float:
    """e^e0, the randomized response's likelihood ratio, from P (the hit-rate bound under a
    uniform prior over which arm is best): P = e^e0 / (e^e0 + K - 1) gives
    e^e0 = P (K - 1) / (1 - P)."""
    check_privacy(privacy, n_arms)
    return privacy * (n_arms - 1) / (1.0 - privacy)


def report_epsilon(privacy: float, n_arms: int) -> float:
    """e0, the certified figure for every prior (`certified_epsilon` in the services and the
    command line): the report is e0-locally differentially private with respect to the agent's
    answer, hence its rewards."""
    return math.log(report_odds(privacy, n_arms))


def report_probabilities(privacy: float, n_arms: int) -> tuple[float, float]:
    """(p, r): the chance the report names the local answer, and each other arm."""
    odds = report_odds(privacy, n_arms)
    r = 1.0 / (odds + n_arms - 1)
    return odds * r, r


def randomize(answer: int, n_arms: int, privacy: float, rng: np.random.Generator) -> int:
    """The report: `answer` with probability p, else a uniform draw among the K - 1 others."""
    p, _ = report_probabilities(privacy, n_arms)
    if rng.random() < p:
        return answer
    other = int(rng.integers(n_arms - 1))
    return other + (other >= answer)


def posterior_bound(prior: float, privacy: float, n_arms: int) -> float:
    """The most any adversary can believe, after one agent's report, an event about that agent's
    data that it believed with probability `prior` before: its odds multiplied by e^e0, for every
    prior (docs/CDE.md, section 2)."""
    odds = report_odds(privacy, n_arms)
    if prior >= 1.0:
        return 1.0
    return prior * odds / (prior * odds + 1.0 - prior)


def hit_rate_uniform_prior(privacy: float, n_arms: int, optimal_arms: int = 1) -> float:
    """The bound on any messages-only adversary's hit rate under a uniform prior over which arms
    are eps-optimal, when s = `optimal_arms` of them are: `posterior_bound` of a blind guess's
    s / K, s e^e0 / (s e^e0 + K - s); `privacy` itself at s = 1. Another prior gives another
    bound (0.5 on one arm: a hit rate of 0.5 without the report)."""
    if optimal_arms >= n_arms:
        return 1.0
    return posterior_bound(optimal_arms / n_arms, privacy, n_arms)


def privacy_sentence(privacy: float, n_arms: int) -> str:
    """What `certified_epsilon` means for every prior, then the hit rate under a uniform prior,
    where the number of eps-optimal arms is not known (the services do not know the means)."""
    from common.certificate import upper  # common.certificate imports this module

    odds = report_odds(privacy, n_arms)
    two = hit_rate_uniform_prior(privacy, n_arms, 2) if n_arms > 2 else 1.0
    return (
        f"e0 = {upper(math.log(odds))}: whatever it believed before, any adversary's odds about "
        f"this agent's answer, hence its rewards, are multiplied by at most e^e0 = {upper(odds)} "
        f"by its report (local differential privacy). Hit rate under a uniform prior over which "
        f"arm is best: at most {privacy:g} when one arm alone is eps-optimal (with two, "
        f"{upper(two)}). Another prior gives another hit rate (a prior of 0.5 on one arm hits "
        "0.5 without any report), its odds still multiplied by at most e^e0 (docs/CDE.md, "
        "section 2)."
    )


@dataclass(frozen=True)
class ReportShares:
    """q_bad bounds P(report = b) for each non-eps-optimal b; q_good bounds P(report = best)
    from below when the best arm is the only eps-optimal one."""

    bad: float
    good: float


def report_shares(eta: float, privacy: float, n_arms: int) -> ReportShares:
    p, r = report_probabilities(privacy, n_arms)
    return ReportShares(
        bad=min(1.0, (r + (p - r) * eta / (n_arms - 1)) * (1.0 + RELATIVE_MARGIN)),
        good=max(0.0, (r + (p - r) * (1.0 - eta)) * (1.0 - RELATIVE_MARGIN)),
    )


def binomial_below(n: int, m: int, p: float) -> float:
    """P(Bin(n, p) < m), rounded up: 1 - P(Bin(n, p) >= m) computed as the upper tail of the
    complement, P(Bin(n, 1 - p) > n - m) = P(Bin(n, 1 - p) >= n - m + 1)."""
    if m <= 0:
        return 0.0
    if m > n:
        return 1.0
    return binomial_tail(n, n - m + 1, 1.0 - p)


@dataclass(frozen=True)
class Failure:
    """CDE's certified failure for a threshold M, counted over the first `horizon` honest reports
    (n): a wrong answer needs one of the two events below among them."""

    threshold: int
    horizon: int
    wrong_arm: float  # some non-eps-optimal arm gets M - f of the n honest reports (any instance)
    no_answer: float  # the best arm gets fewer than M of them (when it is the only eps-optimal arm)

    @property
    def total(self) -> float:
        return min(1.0, self.wrong_arm + self.no_answer)


@lru_cache(maxsize=65536)
def failure_over(
    horizon: int, threshold: int, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> Failure:
    """The bound over the first n = `horizon` honest reports, with at most f = `liars` lying agents
    (they report what they like, once each, whenever they like)."""
    shares = report_shares(eta, privacy, n_arms)
    wrong = min(1.0, (n_arms - 1) * binomial_tail(horizon, threshold - liars, shares.bad))
    return Failure(
        threshold=threshold,
        horizon=horizon,
        wrong_arm=wrong,
        no_answer=binomial_below(horizon, threshold, shares.good),
    )


def failure(
    agents: int, threshold: int, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> Failure:
    """The certified failure with N = `agents` agents (f of them lying): the best bound over the
    horizons n <= N - f. Every n gives a valid bound (the first n honest reports are independent
    draws of one distribution whatever N is, since their order depends on activations only), so
    more agents never make it worse. The wrong-arm term grows with n and the no-answer term
    falls, so a bisection finds where they cross and the neighbours of the crossing are compared."""
    honest = max(agents - liars, 0)
    if honest < 1:
        return failure_over(0, threshold, eta, privacy, n_arms, liars)
    if n_arms == 2 and honest >= 2 * threshold - 1 - liars:
        return two_arms(threshold, eta, privacy, liars)

    def at(n: int) -> Failure:
        return failure_over(n, threshold, eta, privacy, n_arms, liars)

    low, high = 1, honest
    while low < high:  # the smallest n at which the wrong-arm term is >= the no-answer term
        middle = (low + high) // 2
        t = at(middle)
        if t.wrong_arm >= t.no_answer:
            high = middle
        else:
            low = middle + 1
    candidates = [at(n) for n in range(max(1, low - 3), min(honest, low + 3) + 1)]
    return min(candidates, key=lambda t: (t.total, t.horizon))


def two_arms(threshold: int, eta: float, privacy: float, liars: int = 0) -> Failure:
    """K = 2, exactly: every report names one of the two arms, so among the first n = 2M - 1 - f
    honest reports the bad arm has M - f of them exactly when the best arm has fewer than M. The
    two events of the general bound are one: P(Bin(n, q_bad) >= M - f), with no union to pay
    (tight when the local runs err at exactly eta: docs/CDE.md, section 4)."""
    shares = report_shares(eta, privacy, 2)
    n = 2 * threshold - 1 - liars
    return Failure(
        threshold=threshold,
        horizon=n,
        wrong_arm=binomial_tail(n, threshold - liars, shares.bad),
        no_answer=0.0,
    )


def threshold_for(
    agents: int, delta: float, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> int:
    """The threshold M an experiment uses with N agents: the smallest that certifies delta (fewer
    reports to wait for: the best arm is accepted after about M / q_good of them), else the one
    with the smallest certified failure. Any choice is a valid bound, computed exactly by
    `failure`; the searches only look for a good one."""

    def total(m: int) -> float:
        return failure(agents, m, eta, privacy, n_arms, liars).total

    first, last = liars + 1, max(agents, liars + 1)
    m = first
    while m < last and total(m) > delta:  # doubling, then bisection: certifying is monotone in
        m = min(last, 2 * m)  # practice (a larger M separates the two shares better)
    if total(m) <= delta:
        low, high = max(first, m // 2), m
        while low < high:
            middle = (low + high) // 2
            if total(middle) <= delta:
                high = middle
            else:
                low = middle + 1
        return high
    low, high = first, last  # nothing certifies: a ternary search for the smallest failure
    while high - low > 2:
        a, b = low + (high - low) // 3, high - (high - low) // 3
        if total(a) <= total(b):
            high = b
        else:
            low = a
    return min(range(low, high + 1), key=lambda m: (total(m), m))


def smallest_agents(
    delta: float, eta: float, privacy: float, n_arms: int, liars: int = 0, limit: int = 10**7
) -> int | None:
    """The fewest agents that certify delta (None if none up to `limit`); from there on, any
    number of agents does (the bound never grows with N)."""

    def certifies(n: int) -> bool:
        m = threshold_for(n, delta, eta, privacy, n_arms, liars)
        return failure(n, m, eta, privacy, n_arms, liars).total <= delta

    return first_certifying(liars + 1, limit, certifies)


def first_certifying(start: int, limit: int, certifies: Callable[[int], bool]) -> int | None:
    """The smallest N in [start, limit] that certifies, for a test that, once true, stays true
    as N grows (None if not even `limit` does): doubling, then a bisection."""
    low = high = start
    while not certifies(high):  # nor does any N below high
        if high >= limit:
            return None
        low, high = high + 1, min(limit, 2 * high)
    while low < high:
        middle = (low + high) // 2
        if certifies(middle):
            high = middle
        else:
            low = middle + 1
    return high


def strongest_privacy(
    agents: int, delta: float, eta: float, n_arms: int, liars: int = 0
) -> float | None:
    """The smallest P, the hit-rate bound under a uniform prior (so the smallest e0), rounded up to
    3 decimals, that certifies delta with these agents; None if not even 0.999 does. A larger
    bound means a more faithful report, so certifying is monotone in it and a bisection finds the
    limit."""

    def certifies(privacy: float) -> bool:
        m = threshold_for(agents, delta, eta, privacy, n_arms, liars)
        return failure(agents, m, eta, privacy, n_arms, liars).total <= delta

    low, high = 1.0 / n_arms, 0.999
    if not certifies(high):
        return None
    for _ in range(30):
        middle = (low + high) / 2
        if certifies(middle):
            high = middle
        else:
            low = middle
    return min(0.999, math.ceil(high * 1000) / 1000)


def agents_for(
    threshold: int,
    delta: float,
    eta: float,
    privacy: float,
    n_arms: int,
    liars: int = 0,
    limit: int = 10**7,
) -> int | None:
    """The fewest agents that certify delta with this threshold M (None if none up to `limit`):
    what a running experiment, whose M was chosen when it was created, needs enrolled. `failure`
    never grows with N for a given M, so a doubling then a bisection finds it."""

    def certifies(n: int) -> bool:
        return failure(n, threshold, eta, privacy, n_arms, liars).total <= delta

    return first_certifying(max(threshold, liars + 1), limit, certifies)  # fewer send no M

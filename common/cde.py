"""CDE, certified decentralized elimination: one randomized report per agent (docs/CDE.md).

Each agent plays every arm T times (T from eps and its local error bound eta: no timing leak,
`common.subroutines.fixed_budget`), takes its empirical best arm a, and sends ONE report: a with
probability p = e^e0 / (e^e0 + K - 1), each other arm with probability r = 1 / (e^e0 + K - 1)
(K-ary randomized response, Warner 1965). The coordinator accepts the first arm that M distinct
agents reported; the others leave at once. An agent reports at most once per experiment.

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
  when s arms are eps-optimal, one of them is reported with probability at least
  g_s = s r + (p - r)(1 - (K - s) eta / (K - 1)). The honest reports are i.i.d. (their times
  depend on activations only), so a bad arm is accepted only if, in that sequence, its count
  reaches M - f (f liars add the rest) before any eps-optimal arm's reaches M: a race bounded by
  `common.race.race`, worst when the eps-optimal arms share their reports evenly. So
  P(wrong arm accepted) <= max over s of (K - s) race_s, for any number of agents and any
  instance: `wrong_arm`. With N agents, no arm accepted adds `no_answer`, which falls with N.
  The threshold M is chosen from the agents expected; any number of agents keeps the bound.

Pure arithmetic and one draw: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from common.binomial import RELATIVE_MARGIN
from common.errors import ParameterError
from common.race import none_reach, race
from common.rounding import upper

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
    certain = min(1.0, prior)  # a sure belief stays sure
    return certain * odds / (certain * odds + 1.0 - certain)


def hit_rate_uniform_prior(privacy: float, n_arms: int, optimal_arms: int = 1) -> float:
    """The bound on any messages-only adversary's hit rate under a uniform prior over which arms
    are eps-optimal, when s = `optimal_arms` of them are: `posterior_bound` of a blind guess's
    s / K, s e^e0 / (s e^e0 + K - s); `privacy` itself at s = 1. Another prior gives another
    bound (0.5 on one arm: a hit rate of 0.5 without the report). Every arm eps-optimal: 1."""
    return posterior_bound(optimal_arms / n_arms, privacy, n_arms)


def privacy_sentence(privacy: float, n_arms: int) -> str:
    """What `certified_epsilon` means for every prior, then the hit rate under a uniform prior,
    where the number of eps-optimal arms is not known (the services do not know the means)."""
    odds = report_odds(privacy, n_arms)
    two = hit_rate_uniform_prior(privacy, n_arms, 2)  # 1 with two arms: both eps-optimal
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
    """What Lemma 2 of docs/CDE.md bounds: `bad` = q_bad >= P(report = b) for each arm b that is
    not eps-optimal; `optimal(s)` = g_s <= P(report is eps-optimal) when s arms are."""

    bad: float
    answer: float  # p - r: how much more likely the report names the local answer than an arm
    other: float  # r
    eta: float
    n_arms: int

    def optimal(self, s: int) -> float:
        """g_s = s r + (p - r)(1 - (K - s) eta / (K - 1)): each of the K - s other arms is the
        local answer with probability at most eta / (K - 1), so the s eps-optimal ones are with at
        least the rest (rounded down)."""
        local = 1.0 - (self.n_arms - s) * self.eta / (self.n_arms - 1)
        return max(0.0, (s * self.other + self.answer * local) * (1.0 - RELATIVE_MARGIN))


def report_shares(eta: float, privacy: float, n_arms: int) -> ReportShares:
    p, r = report_probabilities(privacy, n_arms)
    return ReportShares(
        bad=(r + (p - r) * eta / (n_arms - 1)) * (1.0 + RELATIVE_MARGIN),
        answer=p - r,
        other=r,
        eta=eta,
        n_arms=n_arms,
    )


@dataclass(frozen=True)
class Failure:
    """CDE's certified failure for a threshold M: a wrong arm accepted, whatever the number of
    agents and of eps-optimal arms, or no arm accepted once the N - f honest agents reported."""

    threshold: int
    wrong_arm: float  # some non-eps-optimal arm accepted: any N, any instance
    optimal_arms: int  # the number s of eps-optimal arms at which that is likeliest
    no_answer: float  # no arm accepted with the N - f honest agents' reports (any instance)

    @property
    def total(self) -> float:
        return min(1.0, self.wrong_arm + self.no_answer)


@lru_cache(maxsize=65536)
def wrong_arm(
    threshold: int, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> tuple[float, int]:
    """(W, s): the bound on a non-eps-optimal arm being accepted, W = max over s = 1 .. K - 1 of
    (K - s) race_s, and the s that attains it. A bad arm b is accepted only if its honest reports
    reach M - f (the liars add at most f) before any eps-optimal arm's reach M (else that arm was
    accepted first): `common.race.race`, for each of the K - s bad arms. It does not depend on N:
    the honest reports are an i.i.d. sequence whatever their number, and fewer of them only cut
    the race short."""
    shares = report_shares(eta, privacy, n_arms)
    needed = threshold - liars
    races = [
        (n_arms - s) * race(needed, threshold, shares.bad, shares.optimal(s), s)
        for s in range(1, n_arms)
    ]
    worst = max(range(len(races)), key=lambda i: races[i])
    return races[worst], worst + 1  # not capped at 1: the searches compare bounds above 1


@lru_cache(maxsize=65536)
def no_answer(
    honest: int, threshold: int, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> float:
    """The bound on no arm being accepted, beyond the wrong-arm race, once n = `honest` agents
    reported: no eps-optimal arm has M of the n reports, max over s = 1 .. K
    (`common.race.none_reach`). It is 0 once n > s (M - 1) + (K - s)(M - f - 1): unless a bad arm
    won the race, the n reports would have to fit below M on the eps-optimal arms and below M - f
    on the others."""
    shares = report_shares(eta, privacy, n_arms)
    worst = 0.0
    for s in range(1, n_arms + 1):
        room = s * (threshold - 1) + (n_arms - s) * (threshold - liars - 1)
        if honest <= room:
            worst = max(worst, none_reach(honest, threshold, shares.optimal(s), s))
    return worst


def failure(
    agents: int, threshold: int, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> Failure:
    """The certified failure with N = `agents` agents, f = `liars` of them lying (any strategy:
    they report what they like, once each, when they like, having seen everything). It never
    grows with N: the wrong-arm term does not depend on it and the no-answer term falls."""
    wrong, optimal = wrong_arm(threshold, eta, privacy, n_arms, liars)
    return Failure(
        threshold=threshold,
        wrong_arm=min(1.0, wrong),
        optimal_arms=optimal,
        no_answer=no_answer(agents - liars, threshold, eta, privacy, n_arms, liars),
    )


def threshold_for(
    agents: int, delta: float, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> int:
    """The threshold M an experiment uses with N agents: the smallest that certifies delta (fewer
    reports to wait for: an eps-optimal arm is accepted after about M / g_1 of them), else the one
    with the smallest certified failure. Any choice is a valid bound, computed exactly by
    `failure`; the searches only look for a good one."""
    found = certifying_threshold(agents, delta, eta, privacy, n_arms, liars)
    if found is not None:
        return found

    def total(m: int) -> float:  # not capped at 1, so that bounds above 1 still compare
        wrong = wrong_arm(m, eta, privacy, n_arms, liars)[0]
        return wrong + no_answer(agents - liars, m, eta, privacy, n_arms, liars)

    low, high = liars + 1, _knee(agents, 0.5, eta, privacy, n_arms, liars)
    while high - low > 2:  # a ternary search for the smallest failure
        a, b = low + (high - low) // 3, high - (high - low) // 3
        if total(a) <= total(b):
            high = b
        else:
            low = a
    return min(range(low, high + 1), key=lambda m: (total(m), m))


def certifying_threshold(
    agents: int, delta: float, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> int | None:
    """The smallest threshold that certifies delta with N agents, or None: below the one
    `_certifying` finds, the bound falls as M grows (the no-answer term is about 0 there), so a
    bisection."""
    top = _certifying(agents, delta, eta, privacy, n_arms, liars)
    if top is None:
        return None
    low = liars + 1
    while low < top:
        middle = (low + top) // 2
        if failure(agents, middle, eta, privacy, n_arms, liars).total <= delta:
            top = middle
        else:
            low = middle + 1
    return top


def certifies(
    agents: int, delta: float, eta: float, privacy: float, n_arms: int, liars: int = 0
) -> bool:
    """Whether some threshold certifies delta with N agents (what the searches over N and P
    ask)."""
    return _certifying(agents, delta, eta, privacy, n_arms, liars) is not None


def _certifying(
    agents: int, delta: float, eta: float, privacy: float, n_arms: int, liars: int
) -> int | None:
    """A threshold that certifies delta with N agents, or None if none does. The wrong-arm term
    falls as M grows (a longer race separates the shares better) and does not depend on N; the
    no-answer term, cheap to compute, is about 0 up to a knee near N g_s / s and then climbs
    fast. So if any M certifies, one does at the knee or a little above it, where the no-answer
    term is still below delta: those few are scanned."""
    if hopeless(delta, eta, privacy, n_arms):
        return None
    low = _knee(agents, 1e-3 * delta, eta, privacy, n_arms, liars)  # no answer about 0 below
    high = _knee(agents, delta, eta, privacy, n_arms, liars)  # the no-answer term alone is more

    def total(m: int) -> float:
        return failure(agents, m, eta, privacy, n_arms, liars).total

    return next((m for m in range(low, high + 1) if total(m) <= delta), None)


def _knee(agents: int, level: float, eta: float, privacy: float, n_arms: int, liars: int) -> int:
    """The largest threshold M >= f + 1 whose no-answer term with N agents is at most `level`
    (f + 1 if none is): the term grows with M, so a bisection."""
    honest = agents - liars
    low, high = liars + 1, max(liars + 1, honest)
    while low < high:  # f + 1 when even it is above the level (the term grows with M)
        middle = (low + high + 1) // 2
        if no_answer(honest, middle, eta, privacy, n_arms, liars) <= level:
            low = middle
        else:
            high = middle - 1
    return low


def hopeless(delta: float, eta: float, privacy: float, n_arms: int) -> bool:
    """No threshold can certify delta: the best arm is the local answer no more often than a bad
    arm (eta >= (K - 1) / K, which makes g_s <= s q_bad for every s at once), so a bad arm wins
    its race against it with probability at least 1/2 for every M (it is at least as fast and
    needs no more reports), and the wrong-arm bound is at least (K - 1) / 2."""
    shares = report_shares(eta, privacy, n_arms)
    return shares.optimal(1) <= shares.bad and (n_arms - 1) / 2 > delta


def smallest_agents(
    delta: float, eta: float, privacy: float, n_arms: int, liars: int = 0, limit: int = 10**7
) -> int | None:
    """The fewest agents that certify delta (None if none up to `limit`); from there on, any
    number of agents does (the bound never grows with N)."""

    return first_certifying(
        liars + 1, limit, lambda n: certifies(n, delta, eta, privacy, n_arms, liars)
    )


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
    """The smallest P, the hit-rate bound under a uniform prior (so the smallest e0), in
    thousandths, that certifies delta with these agents; None if not even 0.999 does. A larger
    bound means a more faithful report, so certifying is monotone in it and a bisection over the
    thousandths above 1/K finds the limit."""

    def certifies_at(thousandths: int) -> bool:
        return certifies(agents, delta, eta, thousandths / 1000, n_arms, liars)

    low, high = 1000 // n_arms + 1, 999  # P must be above 1/K
    if not certifies_at(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if certifies_at(middle):
            high = middle
        else:
            low = middle + 1
    return high / 1000


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

    return first_certifying(threshold, limit, certifies)  # fewer send no M (M > f)
